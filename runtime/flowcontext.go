package runtime

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// FlowContext is a node's view of its run: identity, the run's services,
// the graph around the node, link resolution, a per-run cache and event
// emission. The kernel creates one per node execution; executors must not
// keep it after Execute returns. Its methods are safe for concurrent use by
// the goroutines of one executor.
type FlowContext struct {
	// A run holds one FlowContext per node, so it keeps to what every
	// execution uses; what only resumed, recovered and link-producing
	// contexts need waits behind more (nil for the others).
	r    *run
	node int32
	// guard tracks the worker executing this node (see execGuard).
	guard      execGuard
	attempt    int
	attemptID  string
	inputsHash string
	begin      time.Time
	more       *fcMore
	replayed   bool
	// closed (guarded by run.emu) is set with the node's terminal event.
	closed bool
}

// fcMore is the part of a FlowContext few executions use. The dispatcher
// sets it up before the node runs (extra), except that a retry's backoff
// clears wait on the node's worker.
type fcMore struct {
	resumes   int
	answers   string // the interrupt id the resume value answers
	resume    any
	hasResume bool
	stale     bool      // recovery: this attempt was lost with its process
	wait      time.Time // recovery: the persisted time of the next attempt
	// chain is the link materialization path that led here (for cycle checks).
	chain []int32
}

// extra returns fc's rarely used part, making it on first use.
func (fc *FlowContext) extra() *fcMore {
	if fc.more == nil {
		fc.more = new(fcMore)
	}
	return fc.more
}

// resumes is the resume count, answers the interrupt the resume value
// answers, wait the persisted time of a recovered node's next attempt
// and chain the link path that led here: zero without fc.more.
func (fc *FlowContext) resumes() int {
	if fc.more == nil {
		return 0
	}
	return fc.more.resumes
}

func (fc *FlowContext) answers() string {
	if fc.more == nil {
		return ""
	}
	return fc.more.answers
}

func (fc *FlowContext) wait() time.Time {
	if fc.more == nil {
		return time.Time{}
	}
	return fc.more.wait
}

func (fc *FlowContext) chain() []int32 {
	if fc.more == nil {
		return nil
	}
	return fc.more.chain
}

// NodeID is the id of the node this context belongs to.
func (fc *FlowContext) NodeID() string { return fc.r.p.nodes[fc.node].node.ID }

// Node returns the node with id in the run's graph (read-only).
func (fc *FlowContext) Node(id string) (*Node, bool) { return fc.r.p.Node(id) }

// RunID is the id of the run.
func (fc *FlowContext) RunID() string { return fc.r.rec.ID }

// RootRunID is the first run of this run's lineage (itself unless resumed).
func (fc *FlowContext) RootRunID() string { return fc.r.rec.RootID }

// ParentRunID is the run this one continues ("" for a fresh run).
func (fc *FlowContext) ParentRunID() string { return fc.r.rec.ParentID }

// ChatID is the chat the run belongs to ("" when none).
func (fc *FlowContext) ChatID() string { return fc.r.rec.ChatID }

// Kind is the run's kind label.
func (fc *FlowContext) Kind() string { return fc.r.rec.Kind }

// Attr returns a run attribute.
func (fc *FlowContext) Attr(key string) any { return fc.r.rec.Attrs[key] }

// RunInput is the input the run was started with.
func (fc *FlowContext) RunInput() any { return fc.r.rec.Input }

// IsEntry reports whether this node is one of the run's entry nodes.
func (fc *FlowContext) IsEntry() bool { return fc.r.as.isEntry[fc.node] }

// Attempt is the current attempt number, from 1.
func (fc *FlowContext) Attempt() int { return fc.attempt }

// AttemptID is a deterministic id of this attempt: a hash of run id, node
// id and attempt. A re-execution of the same attempt after a crash gets the
// same id, so idempotent executors can dedupe with it.
func (fc *FlowContext) AttemptID() string {
	if fc.attemptID == "" {
		fc.attemptID = attemptID(fc.r.rec.ID, fc.NodeID(), fc.attempt)
	}
	return fc.attemptID
}

func (fc *FlowContext) setAttempt(a int) { fc.attempt, fc.attemptID = a, "" }

// Services is the opaque value the run was started with; the kernel never
// inspects it.
func (fc *FlowContext) Services() any { return fc.r.services }

// ResumeValue returns the value a Resume gave this node's pending interrupt.
func (fc *FlowContext) ResumeValue() (any, bool) {
	if fc.more == nil {
		return nil, false
	}
	return fc.more.resume, fc.more.hasResume
}

// InterruptID is the id an interrupt returned by this execution will get,
// so an executor can name it in the events it emits before interrupting.
// It is unique per node, attempt and resume count within a run lineage.
func (fc *FlowContext) InterruptID() string {
	return interruptID(fc.r.rec.RootID, fc.NodeID(), fc.attempt, fc.resumes())
}

// Resumes counts the resume values this node has consumed over its run lineage.
func (fc *FlowContext) Resumes() int { return fc.resumes() }

// Edges returns the edges of this node on one side (In: incoming, Out:
// outgoing), filtered by channel and, when handle is not empty, by this
// node's port name. Edges are read-only.
func (fc *FlowContext) Edges(dir Direction, ch Channel, handle string) []*Edge {
	var out []*Edge
	id := fc.NodeID()
	for i := range fc.r.p.edges {
		e := fc.r.p.edges[i].edge
		if e.Data.Channel != ch {
			continue
		}
		if dir == In && e.Target == id && (handle == "" || e.TargetHandle == handle) ||
			dir == Out && e.Source == id && (handle == "" || e.SourceHandle == handle) {
			out = append(out, e)
		}
	}
	return out
}

// Link is one artifact resolved from a link edge.
type Link struct {
	EdgeID   string
	NodeID   string // the producer
	Handle   string // the producer's out-port
	Artifact any
}

// ResolveLinks materializes, in edge order, every producer linked into this
// node's in-port handle. Artifacts are cached per run: each producer port
// is materialized once however many consumers ask. A dependency cycle is an
// error naming its path.
func (fc *FlowContext) ResolveLinks(ctx context.Context, handle string) ([]Link, error) {
	pn := &fc.r.p.nodes[fc.node]
	var links []Link
	for _, ei := range pn.linkIn {
		pe := &fc.r.p.edges[ei]
		if pe.edge.TargetHandle != handle {
			continue
		}
		art, err := fc.r.materialize(ctx, pe.src, pe.edge.SourceHandle, fc.linkPath())
		if err != nil {
			return nil, err
		}
		links = append(links, Link{EdgeID: pe.edge.ID, NodeID: pe.edge.Source, Handle: pe.edge.SourceHandle, Artifact: art})
	}
	return links, nil
}

// linkPath is the materialization path from here: fc's chain and its node.
func (fc *FlowContext) linkPath() []int32 {
	c := fc.chain()
	return append(c[:len(c):len(c)], fc.node)
}

// Materialize returns the (cached) artifact of node id's out-port handle.
func (fc *FlowContext) Materialize(ctx context.Context, id, handle string) (any, error) {
	i, ok := fc.r.p.index[id]
	if !ok {
		return nil, fmt.Errorf("materialize: no node %q", id)
	}
	return fc.r.materialize(ctx, i, handle, fc.linkPath())
}

// CacheGet reads the run's shared cache.
func (fc *FlowContext) CacheGet(key string) (any, bool) {
	fc.r.kvmu.Lock()
	defer fc.r.kvmu.Unlock()
	v, ok := fc.r.kv[key]
	return v, ok
}

// CacheSet writes the run's shared cache (in memory, for this run only).
func (fc *FlowContext) CacheSet(key string, v any) {
	fc.r.kvmu.Lock()
	defer fc.r.kvmu.Unlock()
	if fc.r.kv == nil {
		fc.r.kv = map[string]any{}
	}
	fc.r.kv[key] = v
}

// CacheLoadOrStore returns the value the run's shared cache holds under
// key, or stores v there and returns it when it holds none; loaded says
// which. Two nodes racing on a key get the same value.
func (fc *FlowContext) CacheLoadOrStore(key string, v any) (actual any, loaded bool) {
	fc.r.kvmu.Lock()
	defer fc.r.kvmu.Unlock()
	if old, ok := fc.r.kv[key]; ok {
		return old, true
	}
	if fc.r.kv == nil {
		fc.r.kv = map[string]any{}
	}
	fc.r.kv[key] = v
	return v, false
}

// Emit sends a domain event (node_delta, tool_call...) for this node. It
// fails with ErrReservedEvent for the kernel's own types and with
// ErrEmitClosed once the node has ended (or from a link producer's
// context, which belongs to no executing node).
func (fc *FlowContext) Emit(t EventType, data any) error {
	_, err := fc.EmitOrMerge(t, data, nil)
	return err
}

// EmitOrMerge is Emit for events a node may fold together, such as
// streamed text. When the run's last event is this node attempt's event
// of type t and is still waiting for its commit — the run has not handed
// it to the store, so no subscriber has seen it (commit, then publish) —
// merge(its data) replaces that event's data and no event is added;
// merge returning false, or any other last event, emits data as Emit
// does (a nil merge never merges). merged says which happened. Under load, when commits come slower
// than a node emits, a run so writes and sends fewer, larger events with
// the same concatenation, instead of queueing one per emit.
func (fc *FlowContext) EmitOrMerge(t EventType, data any, merge func(prev any) (any, bool)) (merged bool, err error) {
	if t.Reserved() {
		return false, fmt.Errorf("%w: %s", ErrReservedEvent, t)
	}
	r := fc.r
	r.emu.Lock()
	defer r.emu.Unlock()
	if fc.closed || len(fc.chain()) > 0 {
		return false, ErrEmitClosed
	}
	if merge != nil && r.mergeLocked(t, fc.node, fc.attempt, merge) {
		if r.tap != nil {
			// The part, under the seq of the event it joined.
			r.tap(Event{Seq: r.seq, RunID: r.rec.ID, ChatID: r.rec.ChatID, Type: t, NodeID: r.p.nodes[fc.node].node.ID,
				Attempt: fc.attempt, Time: r.lastAt, Data: data})
		}
		return true, nil
	}
	r.emitLocked(time.Time{}, t, fc.node, fc.attempt, data)
	return false, nil
}

type linkKey struct {
	node   int32
	handle string
}

type linkEntry struct {
	done chan struct{}
	val  any
	err  error
}

func (r *run) materialize(ctx context.Context, n int32, handle string, chain []int32) (any, error) {
	for i, c := range chain {
		if c == n {
			ids := make([]string, 0, len(chain)-i+1)
			for _, x := range chain[i:] {
				ids = append(ids, r.p.nodes[x].node.ID)
			}
			ids = append(ids, r.p.nodes[n].node.ID)
			return nil, Errorf(ErrCodeLinkCycle, "link cycle: %s", strings.Join(ids, " -> "))
		}
	}
	k := linkKey{n, handle}
	r.lmu.Lock()
	if r.links == nil {
		r.links = map[linkKey]*linkEntry{}
	}
	ent, ok := r.links[k]
	if !ok {
		ent = &linkEntry{done: make(chan struct{})}
		r.links[k] = ent
	}
	r.lmu.Unlock()
	if ok {
		select {
		case <-ent.done:
			return ent.val, ent.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	ent.val, ent.err = r.produce(ctx, n, handle, chain)
	if ent.err != nil {
		// Failures are not cached: a later resolution may succeed.
		r.lmu.Lock()
		delete(r.links, k)
		r.lmu.Unlock()
	}
	close(ent.done)
	return ent.val, ent.err
}

func (r *run) produce(ctx context.Context, n int32, handle string, chain []int32) (v any, err error) {
	pn := &r.p.nodes[n]
	if pn.mat == nil {
		return nil, fmt.Errorf("node %q (%s) has no link artifact to give", pn.node.ID, pn.typ.Name)
	}
	defer func() {
		if p := recover(); p != nil {
			r.e.log.Error("link producer panicked", "node", pn.node.ID, "panic", p, "stack", string(debug.Stack()))
			v, err = nil, &CodedError{Code: ErrCodePanic, Err: fmt.Errorf("materialize %q panicked: %v", pn.node.ID, p)}
		}
	}()
	fc := &FlowContext{r: r, node: n, attempt: 1, begin: time.Now(), more: &fcMore{chain: chain}}
	return pn.mat.Materialize(ctx, pn.node, handle, fc)
}
