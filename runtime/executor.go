package runtime

import (
	"context"
	"errors"
	"fmt"
)

// Executor runs one node. It must honour ctx: when ctx is done it returns
// promptly (the kernel reports the node cancelled or timed out).
// Domain events (token deltas, tool calls...) go out through fc.Emit while
// Execute runs; anything emitted after it returns is dropped.
//
// To pause the run for a human, return Interrupt(...). To fail with a code
// that retry policies can match, return Errorf(code, ...) or any error with
// an ErrorCode() string method.
type Executor interface {
	Execute(ctx context.Context, n *Node, in Inputs, fc *FlowContext) (Result, error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, n *Node, in Inputs, fc *FlowContext) (Result, error)

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, n *Node, in Inputs, fc *FlowContext) (Result, error) {
	return f(ctx, n, in, fc)
}

// Materializer is an optional capability of link producers: it builds the
// artifact a consumer gets when it resolves links into one of its ports
// (handle is the producer's out-port the link leaves from). The runtime
// caches the artifact per run.
type Materializer interface {
	Materialize(ctx context.Context, n *Node, handle string, fc *FlowContext) (any, error)
}

// Describer is an optional capability: it returns extra fields for the
// node's node_started event (what the node was given), computed from its
// inputs before Execute runs. It must be cheap and must not fail.
type Describer interface {
	Describe(ctx context.Context, n *Node, in Inputs, fc *FlowContext) map[string]any
}

// Input is one value routed to a node over a flow edge. The run's own input
// reaches entry nodes as an Input with empty EdgeID, Source and Handle.
type Input struct {
	EdgeID string
	Source string // source node id
	Handle string // the target port it arrived on
	Value  any
}

// Inputs is a node's routed inputs in deterministic order (entry input
// first, then by edge position in the graph). Each node gets its own copy.
type Inputs []Input

// First returns the first input value, or nil.
func (in Inputs) First() any {
	if len(in) == 0 {
		return nil
	}
	return in[0].Value
}

// Get returns the first value that arrived on handle.
func (in Inputs) Get(handle string) (any, bool) {
	for i := range in {
		if in[i].Handle == handle {
			return in[i].Value, true
		}
	}
	return nil, false
}

// All returns every value that arrived on handle, in order.
func (in Inputs) All(handle string) []any {
	var out []any
	for i := range in {
		if in[i].Handle == handle {
			out = append(out, in[i].Value)
		}
	}
	return out
}

// Result is what a node produced. Output is routed over the node's live
// outgoing flow edges and recorded in its checkpoint; it should be
// JSON-serialisable (durable stores keep it as JSON).
type Result struct {
	Output any
	// Summary is a short human-readable description kept in the checkpoint;
	// when empty the runtime derives one from Output.
	Summary string
}

// Error codes the kernel itself assigns.
const (
	ErrCodeDefault   = "error"
	ErrCodeTimeout   = "timeout"
	ErrCodePanic     = "panic"
	ErrCodeCondition = "condition_error"
	ErrCodeLinkCycle = "link_cycle"
)

// CodedError is an error with a code retry policies and failure edges can
// match on.
type CodedError struct {
	Code string
	Err  error
}

func (e *CodedError) Error() string     { return e.Code + ": " + e.Err.Error() }
func (e *CodedError) Unwrap() error     { return e.Err }
func (e *CodedError) ErrorCode() string { return e.Code }

// Errorf returns a *CodedError with a formatted message.
func Errorf(code, format string, args ...any) error {
	return &CodedError{Code: code, Err: fmt.Errorf(format, args...)}
}

// ErrorCode extracts the code of err (from any error in its chain with an
// ErrorCode() string method); ErrCodeDefault when none.
func ErrorCode(err error) string {
	var c interface{ ErrorCode() string }
	if errors.As(err, &c) {
		if code := c.ErrorCode(); code != "" {
			return code
		}
	}
	return ErrCodeDefault
}

// NodeError is a node's final failure as the run reports it.
type NodeError struct {
	NodeID  string
	Attempt int
	Code    string
	Err     error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %s failed (attempt %d, %s): %v", e.NodeID, e.Attempt, e.Code, e.Err)
}
func (e *NodeError) Unwrap() error { return e.Err }

// InterruptError pauses a run at a node until Resume gives it a value.
// Executors create it with Interrupt; the kernel fills in the ID.
type InterruptError struct {
	Reason  string
	Payload any
}

func (e *InterruptError) Error() string { return "interrupted: " + e.Reason }

// Interrupt returns the error an executor returns to pause the run. reason
// is a short machine word; payload is shown to whoever resumes.
func Interrupt(reason string, payload any) error {
	return &InterruptError{Reason: reason, Payload: payload}
}

// Sentinel errors callers branch on.
var (
	ErrRunNotFound       = errors.New("run not found")
	ErrRunExists         = errors.New("run already exists")
	ErrRunNotResumable   = errors.New("run is not resumable")
	ErrInterruptNotFound = errors.New("interrupt not found")
	// ErrCheckpointNotFound is returned for a fork from a seq the run never reached.
	ErrCheckpointNotFound = errors.New("checkpoint not found")
	ErrFenced             = errors.New("write fenced off by a newer lease")
	ErrSeqConflict        = errors.New("event seq conflict")
	ErrUnknownEntry       = errors.New("unknown entry node")
	ErrEmitClosed         = errors.New("node already finished: event dropped")
	ErrReservedEvent      = errors.New("event type is reserved for the runtime")
)

// Causes recorded when the kernel cancels node contexts.
var (
	// ErrSiblingFailed cancels in-flight nodes when another node fails a fail_fast run.
	ErrSiblingFailed = errors.New("cancelled: another node failed the run")
	// ErrNodeTimeout is the cause when a node attempt exceeds its timeoutMs.
	ErrNodeTimeout = Errorf(ErrCodeTimeout, "node attempt timed out")
)
