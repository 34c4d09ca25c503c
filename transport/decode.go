package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
)

// idChars is the characters and length an id may have: a path id
// outside them names nothing (see pathIDs).
var idChars = regexp.MustCompile(`^[A-Za-z0-9_.:\-]{1,128}$`)

// idPattern is what client-chosen ids may look like: idChars, and not
// made only of dots, since "." and ".." are dot segments that browsers
// and fetch clients take out of a URL's path: no such id could be
// addressed.
var idPattern idRule

// idRule is the check of a client-chosen id (see idPattern).
type idRule struct{}

// MatchString reports whether s is an id a client may choose.
func (idRule) MatchString(s string) bool {
	return idChars.MatchString(s) && strings.Trim(s, ".") != ""
}

// String names the rule, as error messages give it.
func (idRule) String() string { return idChars.String() + " and not be only dots" }

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Report fields by their JSON names.
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if name == "-" {
			return ""
		}
		if name == "" {
			return f.Name
		}
		return name
	})
	_ = v.RegisterValidation("ident", func(fl validator.FieldLevel) bool {
		return idPattern.MatchString(fl.Field().String())
	})
	_ = v.RegisterValidation("clientid", func(fl validator.FieldLevel) bool {
		s := fl.Field().String()
		if len(s) == 0 || len(s) > 256 {
			return false
		}
		for _, r := range s {
			if r < 0x20 || r == 0x7f {
				return false
			}
		}
		return true
	})
	return v
}

// fieldProblem is one invalid request field, as error details carry it.
type fieldProblem struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Path     string `json:"path"`
	ID       string `json:"id,omitempty"`
	Message  string `json:"message"`
}

// readBody reads the request body; a body over the limit returns the
// body-limit middleware's 413 error.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return nil, he
		}
		var ae *Error
		if errors.As(err, &ae) {
			return nil, ae
		}
		if strings.Contains(err.Error(), "too large") {
			return nil, echo.ErrStatusRequestEntityTooLarge
		}
		return nil, badRequest("reading the body: %v", err)
	}
	return b, nil
}

// decodeJSON decodes a JSON object body into v (an empty body is {}) and
// validates it; every problem is in one 400 invalid_json.
func (s *Server) decodeJSON(c echo.Context, v any) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	return s.decodeBytes(b, v)
}

func (s *Server) decodeBytes(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	if err := unmarshalStrictShape(b, v); err != nil {
		return err
	}
	return s.validateStruct(v)
}

// unmarshalStrictShape decodes one JSON object into v. Unknown fields are
// ignored (clients may send more); wrong types and syntax errors are 400.
func unmarshalStrictShape(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return badRequest("the body must be a JSON object")
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("trailing data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("trailing data after the JSON object")
	}
	return nil
}

func jsonError(err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		e := badRequest("%s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		e.Details = []fieldProblem{{Severity: "error", Code: CodeInvalidJSON, Path: te.Field, Message: e.Message}}
		return e
	case errors.As(err, &se):
		return badRequest("invalid JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("invalid JSON: unexpected end of input")
	}
	return badRequest("invalid JSON: %v", err)
}

// validateStruct runs validator/v10 over v; all failures come back at once.
func (s *Server) validateStruct(v any) error {
	err := s.validate.Struct(v)
	if err == nil {
		return nil
	}
	var ves validator.ValidationErrors
	if !errors.As(err, &ves) {
		return badRequest("%v", err)
	}
	probs := fieldProblems(ves)
	msgs := make([]string, 0, len(probs))
	for _, p := range probs {
		msgs = append(msgs, p.Path+": "+p.Message)
	}
	e := badRequest("invalid request: %s", strings.Join(msgs, "; "))
	e.Details = probs
	return e
}

func fieldProblems(ves validator.ValidationErrors) []fieldProblem {
	out := make([]fieldProblem, 0, len(ves))
	for _, fe := range ves {
		out = append(out, fieldProblem{Severity: "error", Code: CodeInvalidJSON, Path: jsonPath(fe.Namespace()), Message: ruleMessage(fe)})
	}
	return out
}

// jsonPath turns a validator namespace ("graphBody.edges[2].data.channel")
// into the JSON path inside the body ("edges[2].data.channel").
func jsonPath(ns string) string {
	if i := strings.IndexByte(ns, '.'); i >= 0 {
		return ns[i+1:]
	}
	return ns
}

func ruleMessage(fe validator.FieldError) string {
	switch fe.Tag() {
	case "required":
		return "is required"
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "max":
		if fe.Kind() == reflect.String {
			return "must be at most " + fe.Param() + " characters"
		}
		return "must have at most " + fe.Param() + " items"
	case "min":
		return "must be at least " + fe.Param()
	case "ident":
		return "must match " + idPattern.String() + " (a browser drops . and .. from a URL's path)"
	case "clientid":
		return "must be 1 to 256 printable characters"
	}
	return fmt.Sprintf("fails the %q rule", fe.Tag())
}

// parseSeq parses a non-negative event seq cursor.
func parseSeq(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("invalid event cursor %q: want a non-negative integer", s)
	}
	return n, nil
}

// created answers 201 with v.
func created(c echo.Context, v any) error { return c.JSON(http.StatusCreated, v) }
