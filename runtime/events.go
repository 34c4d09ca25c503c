package runtime

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"
)

// EventType names an event: subject_pasttense.
type EventType string

// Events the kernel emits. Executors may emit other (domain) types through
// FlowContext.Emit, but never these.
const (
	EventRunStarted      EventType = "run_started"
	EventRunCompleted    EventType = "run_completed"
	EventRunFailed       EventType = "run_failed"
	EventRunCancelled    EventType = "run_cancelled"
	EventRunInterrupted  EventType = "run_interrupted"
	EventNodeStarted     EventType = "node_started"
	EventNodeCompleted   EventType = "node_completed"
	EventNodeFailed      EventType = "node_failed"
	EventNodeCancelled   EventType = "node_cancelled"
	EventNodeInterrupted EventType = "node_interrupted"
	EventNodeSkipped     EventType = "node_skipped"
	EventNodeRetrying    EventType = "node_retrying"
	EventEdgeTaken       EventType = "edge_taken"
)

// Reserved reports whether t is one of the kernel's own event types.
func (t EventType) Reserved() bool {
	switch t {
	case EventRunStarted, EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunInterrupted,
		EventNodeStarted, EventNodeCompleted, EventNodeFailed, EventNodeCancelled, EventNodeInterrupted,
		EventNodeSkipped, EventNodeRetrying, EventEdgeTaken:
		return true
	}
	return false
}

// Terminal reports whether t ends a run.
func (t EventType) Terminal() bool {
	switch t {
	case EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunInterrupted:
		return true
	}
	return false
}

// Event is the one envelope every transport carries. Seq starts at 1 per
// run and has no gaps; it is the SSE id and the resume cursor.
//
// Data holds the type's payload struct while the event is live; events read
// back from a durable store carry it as json.RawMessage.
type Event struct {
	Seq     int64     `json:"seq"`
	RunID   string    `json:"runId"`
	ChatID  string    `json:"chatId,omitempty"`
	Type    EventType `json:"type"`
	NodeID  string    `json:"nodeId,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Time    time.Time `json:"time"`
	Data    any       `json:"data,omitempty"`

	// data is Data encoded, when the engine encoded it at emit (for a
	// store that keeps event data as JSON, see JSONEventStore).
	data []byte
}

// DataJSON returns Data as JSON, nil when Data is nil: the bytes the
// engine encoded when the run emitted the event (once, for the store and
// every transport), or Data encoded now. The caller must not modify them.
func (e *Event) DataJSON() ([]byte, error) {
	if e.data != nil {
		return e.data, nil
	}
	if e.Data == nil {
		return nil, nil
	}
	return marshalData(e.Data)
}

// encodeData encodes Data for DataJSON. Data that does not encode is left
// to DataJSON, so the store reports the error where it did before.
func (e *Event) encodeData() {
	if e.Data == nil {
		return
	}
	if b, err := marshalData(e.Data); err == nil {
		e.data = b
	}
}

// DataAppender is implemented by an event payload that encodes itself:
// AppendJSON appends to b exactly the bytes json.Marshal gives for the
// payload. The engine encodes the payload of each event a run emits
// (once, at emit, for a JSONEventStore), and token deltas are most of
// them: a delta that appends its one field takes a third of the time
// encoding/json's reflection takes (65 against 185 ns).
type DataAppender interface {
	AppendJSON(b []byte) []byte
}

// payloadAppender is implemented by the engine's own payloads: they
// append what json.Marshal gives for them, or fail as it would (an
// output that does not encode), without encoding/json's reflection — and,
// for those with a MarshalJSON, without its check of what that returned.
type payloadAppender interface {
	appendJSON(b []byte) ([]byte, error)
}

// marshalData encodes an event's payload: through its AppendJSON when it
// has one, the engine's payloads by hand, anything else with EncodeJSON.
func marshalData(v any) ([]byte, error) {
	switch a := v.(type) {
	case DataAppender:
		return a.AppendJSON(nil), nil
	case payloadAppender:
		if !isNilPointer(v) {
			return encodeScratch(a.appendJSON)
		}
	}
	return EncodeJSON(v)
}

// EncodeJSON returns the bytes json.Marshal gives for v, or its error:
// by hand where AppendJSONValue takes v, else with encoding/json. For the
// JSON the engine and the stores write of node outputs, run inputs and
// payloads.
func EncodeJSON(v any) ([]byte, error) {
	return encodeScratch(func(b []byte) ([]byte, error) { return appendAny(b, v) })
}

// scratch holds encoding buffers: a payload is encoded into one and
// copied out at its size, in one allocation instead of one for each time
// appending outgrew the bytes so far.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxScratch bounds the buffers scratch keeps.
const maxScratch = 64 << 10

// encodeScratch runs enc on a scratch buffer and returns a copy of what
// it encoded.
func encodeScratch(enc func(b []byte) ([]byte, error)) ([]byte, error) {
	p := scratch.Get().(*[]byte)
	defer scratch.Put(p)
	b, err := enc((*p)[:0])
	if err != nil {
		return nil, err
	}
	if cap(b) <= maxScratch {
		*p = b[:0] // grown: keep the larger buffer
	}
	return bytes.Clone(b), nil
}

// appendAny appends v as json.Marshal encodes it: by hand where
// AppendJSONValue takes it, else with encoding/json.
func appendAny(b []byte, v any) ([]byte, error) {
	if out, ok := AppendJSONValue(b, v); ok {
		return out, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// appendFloatMember appends a float64 member's value, or fails as
// json.Marshal does for NaN and the infinities.
func appendFloatMember(b []byte, f float64) ([]byte, error) {
	out, ok := appendFloat(b, f)
	if !ok {
		_, err := json.Marshal(f)
		return nil, err
	}
	return out, nil
}

// AppendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it (HTML-safe, invalid UTF-8 replaced): for the AppendJSON of a
// payload, and for the envelopes the transports build by hand.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// JSONEventStore is implemented by stores that keep each event's data as
// JSON (the SQLite and Postgres stores). For them the engine encodes an
// event's data once, when the run emits it, in the run's goroutine rather
// than in the group commit that writes it; the store and the transports
// take the bytes from Event.DataJSON.
type JSONEventStore interface {
	Store
	KeepsEventJSON()
}

// EventSink receives a run's events in seq order, one call at a time per
// run, each once the store holds it (commit-then-publish; without a store,
// at once). It must not block: with sync and batched durability it is
// called by the engine's committer, which serves every run.
type EventSink interface {
	Emit(Event)
}

// StartSink is an EventSink told when its run begins: Started is called
// once the run has emitted run_started — before that event is committed
// and handed to Emit — and before any node starts. A cancel of the run
// from then on stops it before it starts a node not started yet, while the
// run is still created and logs run_started (a caller that links its
// cancels here so lets a cancel that came first end the run before any
// node runs). Started is called on the run's dispatcher and must not
// block.
type StartSink interface {
	EventSink
	Started(runID string)
}

// StartSinkFunc adapts two functions to a StartSink.
type StartSinkFunc struct {
	SinkFunc
	OnStart func(runID string)
}

// Started calls OnStart.
func (s StartSinkFunc) Started(runID string) { s.OnStart(runID) }

// SinkFunc adapts a function to EventSink.
type SinkFunc func(Event)

// Emit calls f.
func (f SinkFunc) Emit(e Event) { f(e) }

// RunStartedData is the payload of run_started. Attrs are caller-supplied
// labels (a message id, say) merged into the payload's top level.
type RunStartedData struct {
	Kind          string         `json:"kind,omitempty"`
	GraphID       string         `json:"graphId"`
	PlanVersion   int64          `json:"planVersion"`
	EntryNodeIDs  []string       `json:"entryNodeIds"`
	ActiveNodeIDs []string       `json:"activeNodeIds"`
	ParentRunID   string         `json:"parentRunId,omitempty"`
	Resumed       bool           `json:"resumed,omitempty"`
	Attrs         map[string]any `json:"-"`
}

// MarshalJSON flattens Attrs into the object; declared fields win. It
// writes the declared fields by hand (every run emits one run_started):
// what encoding/json gives for them, then the attributes in key order.
func (d RunStartedData) MarshalJSON() ([]byte, error) { return d.appendJSON(make([]byte, 0, 256)) }

func (d RunStartedData) appendJSON(b []byte) ([]byte, error) {
	o := object{b: append(b, '{')}
	if d.Kind != "" {
		o.b = AppendJSONString(o.key("kind"), d.Kind)
	}
	o.b = AppendJSONString(o.key("graphId"), d.GraphID)
	o.b = strconv.AppendInt(o.key("planVersion"), d.PlanVersion, 10)
	o.b = appendJSONStrings(o.key("entryNodeIds"), d.EntryNodeIDs)
	o.b = appendJSONStrings(o.key("activeNodeIds"), d.ActiveNodeIDs)
	if d.ParentRunID != "" {
		o.b = AppendJSONString(o.key("parentRunId"), d.ParentRunID)
	}
	if d.Resumed {
		o.b = append(o.key("resumed"), "true"...)
	}
	return o.end(d.Attrs)
}

// RunCompletedData is the payload of run_completed.
type RunCompletedData struct {
	DurationMs float64 `json:"durationMs"`
}

func (d RunCompletedData) appendJSON(b []byte) ([]byte, error) {
	b, err := appendFloatMember(append(b, `{"durationMs":`...), d.DurationMs)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// RunFailedData is the payload of run_failed.
type RunFailedData struct {
	Error       string   `json:"error"`
	Code        string   `json:"code,omitempty"`
	NodeID      string   `json:"nodeId,omitempty"`
	FailedNodes []string `json:"failedNodes,omitempty"`
	DurationMs  float64  `json:"durationMs"`
}

// RunCancelledData is the payload of run_cancelled.
type RunCancelledData struct {
	Cause      string  `json:"cause"`
	DurationMs float64 `json:"durationMs"`
}

// RunInterruptedData is the payload of run_interrupted: every pending interrupt.
type RunInterruptedData struct {
	Interrupts []InterruptInfo `json:"interrupts"`
}

// NodeStartedData is the payload of node_started. Details (from a
// Describer) are merged into the payload's top level.
type NodeStartedData struct {
	Replayed bool           `json:"replayed,omitempty"`
	Details  map[string]any `json:"-"`
}

// MarshalJSON flattens Details into the object; declared fields win.
func (d NodeStartedData) MarshalJSON() ([]byte, error) { return d.appendJSON(make([]byte, 0, 64)) }

func (d NodeStartedData) appendJSON(b []byte) ([]byte, error) {
	o := object{b: append(b, '{')}
	if d.Replayed {
		o.b = append(o.key("replayed"), "true"...)
	}
	return o.end(d.Details)
}

// NodeCompletedData is the payload of node_completed.
type NodeCompletedData struct {
	Output     any     `json:"output,omitempty"`
	Replayed   bool    `json:"replayed,omitempty"`
	DurationMs float64 `json:"durationMs"`
	// Error is set when continueOnError let a failed node complete.
	Error string `json:"error,omitempty"`
}

func (d NodeCompletedData) appendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	var err error
	if d.Output != nil {
		if b, err = appendAny(append(b, `"output":`...), d.Output); err != nil {
			return nil, err
		}
		b = append(b, ',')
	}
	if d.Replayed {
		b = append(b, `"replayed":true,`...)
	}
	if b, err = appendFloatMember(append(b, `"durationMs":`...), d.DurationMs); err != nil {
		return nil, err
	}
	if d.Error != "" {
		b = AppendJSONString(append(b, `,"error":`...), d.Error)
	}
	return append(b, '}'), nil
}

// NodeFailedData is the payload of node_failed.
type NodeFailedData struct {
	Error    string `json:"error"`
	Code     string `json:"code"`
	Attempts int    `json:"attempts"`
	// Handled is true when an on_failure/always edge takes over.
	Handled    bool    `json:"handled,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// NodeCancelledData is the payload of node_cancelled.
type NodeCancelledData struct {
	Cause string `json:"cause"`
}

// NodeInterruptedData is the payload of node_interrupted.
type NodeInterruptedData = InterruptInfo

// NodeSkippedData is the payload of node_skipped.
type NodeSkippedData struct {
	Reason string `json:"reason"`
}

// Reasons a node is skipped.
const (
	SkipDeadEdges    = "upstream_not_taken"
	SkipRunFailed    = "run_failed"
	SkipRunCancelled = "run_cancelled"
)

// NodeRetryingData is the payload of node_retrying: the attempt about to start.
type NodeRetryingData struct {
	Attempt int    `json:"attempt"`
	DelayMs int64  `json:"delayMs"`
	Error   string `json:"error"`
	Code    string `json:"code"`
}

// EdgeTakenData is the payload of edge_taken.
type EdgeTakenData struct {
	EdgeID string `json:"edgeId"`
	Source string `json:"source"`
	Target string `json:"target"`
}

func (d EdgeTakenData) appendJSON(b []byte) ([]byte, error) {
	b = AppendJSONString(append(b, `{"edgeId":`...), d.EdgeID)
	b = AppendJSONString(append(b, `,"source":`...), d.Source)
	b = AppendJSONString(append(b, `,"target":`...), d.Target)
	return append(b, '}'), nil
}

// InterruptInfo describes a pending interrupt.
type InterruptInfo struct {
	ID      string `json:"interruptId"`
	NodeID  string `json:"nodeId"`
	Reason  string `json:"reason"`
	Payload any    `json:"payload,omitempty"`
}

// object is a JSON object being written by hand: its bytes so far (the
// last '{' while it has no member) and the keys of its declared members.
type object struct {
	b    []byte
	keys [8]string // keys[:n]: as many as a payload type declares
	n    int
}

// key appends a declared member's key and colon, and returns the bytes.
func (o *object) key(k string) []byte {
	o.keys[o.n] = k
	o.n++
	return o.member(k)
}

// member appends a member's key and colon, and returns the bytes.
func (o *object) member(k string) []byte {
	if o.b[len(o.b)-1] != '{' {
		o.b = append(o.b, ',')
	}
	o.b = append(AppendJSONString(o.b, k), ':')
	return o.b
}

// appendJSONStrings appends ss as encoding/json encodes a []string.
func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendJSONString(b, s)
	}
	return append(b, ']')
}

// end ends the object with extra's members whose keys are not declared
// ones it wrote, in key order, and returns its bytes.
func (o *object) end(extra map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !slices.Contains(o.keys[:o.n], k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		var err error
		if o.b, err = appendAny(o.member(k), extra[k]); err != nil {
			return nil, err
		}
	}
	return append(o.b, '}'), nil
}
