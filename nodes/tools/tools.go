package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// Spec describes a tool to a model. Parameters is a JSON Schema of the
// arguments object.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Call is one invocation of a tool.
type Call struct {
	// ID is the model's id of the call.
	ID   string
	Name string
	// Arguments is the JSON arguments object.
	Arguments json.RawMessage
	// IdempotencyKey is stable across retries and resumes of the run that
	// made the call: a tool with side effects should use it to dedupe.
	IdempotencyKey string
}

// Tool is something an agent can call. Implementations are safe for
// concurrent use and honour ctx. The returned text is what the model sees;
// an error is reported to the model as the call's failure (the agent goes
// on), not as the node's.
type Tool interface {
	Spec() Spec
	Invoke(ctx context.Context, c Call) (string, error)
}

type funcTool struct {
	spec Spec
	fn   func(context.Context, Call) (string, error)
}

func (f *funcTool) Spec() Spec { return f.spec }
func (f *funcTool) Invoke(ctx context.Context, c Call) (string, error) {
	return f.fn(ctx, c)
}

// New returns a Tool made of a spec and a function.
func New(spec Spec, fn func(ctx context.Context, c Call) (string, error)) Tool {
	return &funcTool{spec: spec, fn: fn}
}

// ErrInvalidArguments wraps argument decoding failures.
var ErrInvalidArguments = errors.New("invalid arguments")

// DecodeArgs decodes a call's JSON arguments into v, rejecting unknown
// fields; empty arguments decode as {}.
func DecodeArgs(c Call, v any) error {
	args := bytes.TrimSpace(c.Arguments)
	if len(args) == 0 {
		args = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the arguments object", ErrInvalidArguments)
	}
	return nil
}

// namePattern is what model APIs accept as a function name.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidName reports whether s can name a tool.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// SanitizeName makes a valid tool name of s: characters models reject
// become '_', at most 64 bytes; fallback when nothing is left.
func SanitizeName(s, fallback string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 64 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return fallback
	}
	return b.String()
}

// Registry holds tools by name, and sources of tools that come and go
// (MCP servers) whose tools are named "source/tool". It is safe for
// concurrent use.
type Registry struct {
	mu      sync.RWMutex
	tools   map[string]Tool
	safe    map[string]bool // tools registered with RegisterSafe
	sources map[string]Source
}

// Source is a named set of tools that may change while the server runs,
// like an MCP server's. Implementations are safe for concurrent use.
type Source interface {
	// Tools returns the current tools (connecting when needed). Their
	// Spec().Name is the part after "source/" in node data.
	Tools(ctx context.Context) ([]Tool, error)
}

// ErrToolNotFound is returned by Resolve for a name nothing provides.
var ErrToolNotFound = errors.New("tool not found")

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: map[string]Tool{}, safe: map[string]bool{}, sources: map[string]Source{}}
}

// AddSource adds a source of tools under name (a valid tool name, not
// used by another source).
func (r *Registry) AddSource(name string, s Source) error {
	if !ValidName(name) {
		return fmt.Errorf("tools: invalid source name %q (letters, digits, _ and -, at most 64)", name)
	}
	if s == nil {
		return fmt.Errorf("tools: source %q is nil", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.sources[name]; dup {
		return fmt.Errorf("tools: source %q added twice", name)
	}
	r.sources[name] = s
	return nil
}

// Source returns the source named name.
func (r *Registry) Source(name string) (Source, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.sources[name]
	return s, ok
}

// SourceNames returns the sources' names, sorted.
func (r *Registry) SourceNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.sources))
	for k := range r.sources {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Resolve returns the tool a node names: a registered tool, or
// "source/tool" from that source's current tools. A name nothing
// provides wraps ErrToolNotFound; a source that cannot list its tools
// returns its error.
func (r *Registry) Resolve(ctx context.Context, name string) (Tool, error) {
	src, tool, ok := strings.Cut(name, "/")
	if !ok {
		if t, found := r.Lookup(name); found {
			return t, nil
		}
		return nil, fmt.Errorf("%w: %q", ErrToolNotFound, name)
	}
	s, found := r.Source(src)
	if !found {
		return nil, fmt.Errorf("%w: no tool source %q (known: %v)", ErrToolNotFound, src, r.SourceNames())
	}
	ts, err := s.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("tool source %s: %w", src, err)
	}
	for _, t := range ts {
		if t.Spec().Name == tool {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %s has no tool %q", ErrToolNotFound, src, tool)
}

// Register adds a tool. Its name must match ^[a-zA-Z0-9_-]{1,64}$ and be
// new; its parameters, when set, must be a JSON object. A tool added this
// way may have effects outside the process: a chat user may enable it
// only where the graph lists it (see Safe).
func (r *Registry) Register(t Tool) error { return r.register(t, false) }

// RegisterSafe adds a tool as Register does, declared safe: it has no
// effect outside the process and reaches nothing outside it (no network,
// files or processes; it computes from its arguments and the clock), so
// any chat user may enable it, also where the graph lists no user tools.
func (r *Registry) RegisterSafe(t Tool) error { return r.register(t, true) }

func (r *Registry) register(t Tool, safe bool) error {
	if t == nil {
		return errors.New("tools: nil tool")
	}
	s := t.Spec()
	if !ValidName(s.Name) {
		return fmt.Errorf("tools: invalid tool name %q (letters, digits, _ and -, at most 64)", s.Name)
	}
	if len(s.Parameters) > 0 {
		var m map[string]any
		if err := json.Unmarshal(s.Parameters, &m); err != nil {
			return fmt.Errorf("tools: %s: parameters must be a JSON Schema object: %v", s.Name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[s.Name]; dup {
		return fmt.Errorf("tools: %q registered twice", s.Name)
	}
	r.tools[s.Name] = t
	if safe {
		r.safe[s.Name] = true
	}
	return nil
}

// Safe reports whether name is a tool added with RegisterSafe. Tools of
// sources ("server/tool") never are: an MCP server may do anything.
func (r *Registry) Safe(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.safe[name]
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tools))
	for k := range r.tools {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Specs returns every tool's spec, sorted by name.
func (r *Registry) Specs() []Spec {
	names := r.Names()
	out := make([]Spec, 0, len(names))
	for _, n := range names {
		if t, ok := r.Lookup(n); ok {
			out = append(out, t.Spec())
		}
	}
	return out
}

// Config configures the built-in tools.
type Config struct {
	// HTTP configures http_request; with no AllowedHosts it refuses every
	// request.
	HTTP HTTPConfig
	// Now is current_time's clock (default time.Now).
	Now func() time.Time
	// CalculatorCostLimit bounds an expression's CEL cost (default 10000).
	CalculatorCostLimit uint64
}

// RegisterBuiltins adds calculator and current_time (safe: see
// RegisterSafe) and http_request (not safe: it reaches other hosts).
func RegisterBuiltins(r *Registry, cfg Config) error {
	calc, err := Calculator(cfg.CalculatorCostLimit)
	if err != nil {
		return err
	}
	for _, t := range []Tool{calc, CurrentTime(cfg.Now)} {
		if err := r.RegisterSafe(t); err != nil {
			return err
		}
	}
	return r.Register(HTTPRequest(cfg.HTTP))
}
