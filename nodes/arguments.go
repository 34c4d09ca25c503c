package nodes

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var english = message.NewPrinter(language.English)

// argumentSchemas compiles tools' JSON Schemas once (by content) and
// checks call arguments against them before a tool runs. Safe for
// concurrent use.
type argumentSchemas struct {
	mu    sync.Mutex
	cache map[[32]byte]*compiledSchema
}

type compiledSchema struct {
	schema *jsonschema.Schema
	err    error // the schema itself is unusable: arguments are not checked
}

// maxSchemaCache bounds the compiled schemas kept (MCP servers may
// change theirs); the cache starts over when full.
const maxSchemaCache = 1024

func newArgumentSchemas() *argumentSchemas {
	return &argumentSchemas{cache: map[[32]byte]*compiledSchema{}}
}

func (a *argumentSchemas) compiled(raw json.RawMessage) *compiledSchema {
	key := sha256.Sum256(raw)
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if ok {
		return c
	}
	// Compiled outside the lock, so a slow schema holds up no other call;
	// two calls compiling the same new schema keep the first one stored.
	c = &compiledSchema{}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err == nil {
		comp := jsonschema.NewCompiler() // loads no remote references
		if err = comp.AddResource("tool.json", doc); err == nil {
			c.schema, err = comp.Compile("tool.json")
		}
	}
	c.err = err
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.cache[key]; ok {
		return old
	}
	if len(a.cache) >= maxSchemaCache {
		a.cache = map[[32]byte]*compiledSchema{}
	}
	a.cache[key] = c
	return c
}

// check validates args (JSON) against the tool's parameters schema. It
// returns a message for the model when they do not match, "" when they
// do or when there is no usable schema (that is logged by the caller via
// the error).
func (a *argumentSchemas) check(params json.RawMessage, args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(params)) == 0 {
		return "", nil
	}
	c := a.compiled(params)
	if c.err != nil {
		return "", c.err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return "arguments are not valid JSON", nil
	}
	if err := c.schema.Validate(v); err != nil {
		return "arguments do not match the tool's schema: " + schemaMessage(err), nil
	}
	return "", nil
}

// schemaMessage renders a validation error as the list of violations
// with their JSON pointers, without the schema's internal location.
func schemaMessage(err error) string {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			at := "/" + strings.Join(e.InstanceLocation, "/")
			out = append(out, fmt.Sprintf("at %s: %s", at, e.ErrorKind.LocalizedString(english)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(out, "; ")
}
