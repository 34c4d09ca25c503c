package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Channel is the kind of an edge or port: flow edges carry values and order
// execution; link edges wire dependencies that consumers resolve on demand.
type Channel string

// The two channels. Any other value, including the empty string, is invalid.
const (
	ChannelFlow Channel = "flow"
	ChannelLink Channel = "link"
)

// When says in which outcome of its source a flow edge fires.
type When string

// Edge firing modes. The empty value means WhenOnSuccess.
const (
	WhenOnSuccess When = "on_success"
	WhenOnFailure When = "on_failure"
	WhenAlways    When = "always"
)

// Graph is a user graph in the React Flow JSON shape the editor saves.
type Graph struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	PlanVersion int64  `json:"planVersion"`
	Nodes       []Node `json:"nodes"`
	Edges       []Edge `json:"edges"`
}

// Position is where the editor draws a node; the runtime ignores it.
type Position struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Node is one vertex. Data holds the type's own settings plus the generic
// options the runtime understands (see NodeOptions).
type Node struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Position Position        `json:"position"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// Edge connects an output port of Source to an input port of Target.
type Edge struct {
	ID           string   `json:"id"`
	Source       string   `json:"source"`
	SourceHandle string   `json:"sourceHandle"`
	Target       string   `json:"target"`
	TargetHandle string   `json:"targetHandle"`
	Data         EdgeData `json:"data"`
}

// EdgeData is the part of an edge the runtime interprets.
type EdgeData struct {
	Channel   Channel `json:"channel"`
	When      When    `json:"when,omitempty"`
	Condition string  `json:"condition,omitempty"`
}

// DecodeGraph parses graph JSON. Shape errors (not an object, a field of the
// wrong type, trailing data) come back as error diagnostics with a JSON
// path; it never panics on any input.
func DecodeGraph(b []byte) (*Graph, Diagnostics) {
	var g Graph
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&g); err != nil {
		return nil, Diagnostics{decodeDiagnostic(err)}
	}
	if dec.More() {
		return nil, Diagnostics{{Severity: SeverityError, Code: CodeInvalidJSON, Message: "trailing data after the graph object"}}
	}
	return &g, nil
}

func decodeDiagnostic(err error) Diagnostic {
	d := Diagnostic{Severity: SeverityError, Code: CodeInvalidJSON, Message: err.Error()}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		d.Path = te.Field
		d.Message = fmt.Sprintf("%s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return d
}
