package runtime

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Direction says whether a port receives (In) or emits (Out).
type Direction string

// Port directions.
const (
	In  Direction = "in"
	Out Direction = "out"
)

// Port is a named connection point a node type declares. The runtime
// validates every edge's handles against these declarations.
type Port struct {
	Name      string    `json:"name"`
	Direction Direction `json:"direction"`
	Channel   Channel   `json:"channel"`
	// Required in-ports must have at least one edge.
	Required bool `json:"required,omitempty"`
	// Many allows more than one edge on the port; otherwise at most one.
	Many bool `json:"many,omitempty"`
}

// Factory builds the executor for one node of a type at compile time. It
// parses and validates the node's data once; a returned error becomes a
// diagnostic on that node (a *FieldError names the field).
type Factory func(n *Node) (Executor, error)

// NodeType declares a kind of node: its ports, how to build its executor,
// and metadata an editor can show.
type NodeType struct {
	Name  string
	Ports []Port
	New   Factory
	// Entry marks types that start runs. Problems in parts of a graph that no
	// node of an Entry type reaches are reported as warnings, not errors.
	Entry bool
	// DefaultEffect applies when a node's data sets no effect (default
	// pure): a type that calls out to the world declares it here once.
	DefaultEffect Effect
	// Inline promises that the type's executors never block: they compute
	// from their inputs and return at once. When nothing else of the run
	// can run, the dispatcher then executes the node itself, saving a
	// goroutine hand-off each way; beside other nodes, Inline nodes
	// (without a timeout, retries or links) share the run's workers, up to
	// GOMAXPROCS of them at once, rather than each taking a goroutine.
	// Every other node runs on a worker of its own, so a cancel ends the
	// run after the grace even when an executor ignores its context; an
	// Inline executor that blocked would hold the run's cancel (or the
	// Inline nodes queued behind it) until it returned.
	Inline bool
	// Label, Description and DataSchema (a JSON Schema of data) are for
	// editors; the runtime does not read them.
	Label       string
	Description string
	DataSchema  json.RawMessage
}

// Port returns the declared port with that name and direction.
func (t *NodeType) Port(name string, dir Direction) (Port, bool) {
	for _, p := range t.Ports {
		if p.Name == name && p.Direction == dir {
			return p, true
		}
	}
	return Port{}, false
}

func (t *NodeType) portIndex(name string, dir Direction) int {
	for i, p := range t.Ports {
		if p.Name == name && p.Direction == dir {
			return i
		}
	}
	return -1
}

// FieldError is an invalid field of a node's data, returned by factories.
type FieldError struct {
	Field   string // JSON field path inside data, e.g. "retry.maxAttempts"
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Registry holds node types. Register them explicitly at start-up; after
// that the registry is read-only and safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]*NodeType
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]*NodeType{}} }

// Register adds a node type. It fails on a duplicate name, a missing
// factory, or ports that are unnamed, duplicated or of an unknown channel.
func (r *Registry) Register(t NodeType) error {
	if t.Name == "" {
		return fmt.Errorf("runtime: node type without a name")
	}
	if t.New == nil {
		return fmt.Errorf("runtime: node type %q has no executor factory", t.Name)
	}
	seen := map[string]bool{}
	for _, p := range t.Ports {
		if p.Name == "" {
			return fmt.Errorf("runtime: node type %q has an unnamed port", t.Name)
		}
		if p.Channel != ChannelFlow && p.Channel != ChannelLink {
			return fmt.Errorf("runtime: node type %q port %q: channel must be flow or link", t.Name, p.Name)
		}
		if p.Direction != In && p.Direction != Out {
			return fmt.Errorf("runtime: node type %q port %q: direction must be in or out", t.Name, p.Name)
		}
		k := string(p.Direction) + "/" + p.Name
		if seen[k] {
			return fmt.Errorf("runtime: node type %q declares port %q twice", t.Name, p.Name)
		}
		seen[k] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[t.Name]; dup {
		return fmt.Errorf("runtime: node type %q registered twice", t.Name)
	}
	tt := t
	tt.Ports = append([]Port(nil), t.Ports...)
	r.types[t.Name] = &tt
	return nil
}

// MustRegister is Register for start-up code: it panics on error.
func (r *Registry) MustRegister(t NodeType) {
	if err := r.Register(t); err != nil {
		panic(err)
	}
}

// Lookup returns the type with that name.
func (r *Registry) Lookup(name string) (*NodeType, bool) {
	r.mu.RLock()
	t, ok := r.types[name]
	r.mu.RUnlock()
	return t, ok
}

// Types returns all types sorted by name.
func (r *Registry) Types() []*NodeType {
	r.mu.RLock()
	out := make([]*NodeType, 0, len(r.types))
	for _, t := range r.types {
		out = append(out, t)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
