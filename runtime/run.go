package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// stop says why a run stopped early.
type stop uint8

const (
	stopNone stop = iota
	stopFailed
	stopCancelled
)

// run is one execution. The dispatcher goroutine (execute) owns the node
// state; executors run in their own goroutines (or inline, when a node is
// the only thing that can run) and report back on done.
type run struct {
	e        *Engine
	p        *Plan
	as       *activeSet
	rec      *RunRecord
	store    *storeView // the engine's (nil: no store)
	services any
	maxPar   int

	ctx     context.Context // cancelled on user cancel or fail-fast
	cancel  context.CancelCauseFunc
	bg      context.Context // for store writes: outlives cancellation
	started time.Time

	// Event emission: seq order, store append and sink delivery happen
	// under emu so the log and every subscriber see one order.
	emu      sync.Mutex
	seq      int64
	sink     EventSink
	storeErr error

	// Dispatcher-owned state, indexed by plan node or edge: the edge
	// counters, edge values and ready heap are *dispatch's (reused by the
	// plan's later runs once this one has ended); state, outputs (both
	// the result's) and fcs have an allocation each.
	*dispatch
	state   []NodeStatus
	outputs []any
	fcs     []FlowContext // a node's context, once it starts
	ins     []Input       // carved into the nodes' Inputs (inputs)
	// completedBuf holds the node_completed payloads still to hand out.
	completedBuf []NodeCompletedData
	// clock is the time of the dispatcher's current step, shared by the
	// events it emits and the nodes it starts (zero: not read yet). A step
	// ends when the dispatcher waits or a node ran on it.
	clock time.Time
	// lastAt (under emu) is the last event's time: events read the clock
	// at different moments, and their times never go back.
	lastAt    time.Time
	workers   *workers // made with the first node that goes to a worker
	inflight  int
	slot      bool // a global slot is held for the next launch
	stopping  stop
	failed    []string
	firstErr  error
	interrupt []InterruptInfo

	// Resume state: the parent run's checkpoints and the answers to its
	// interrupts. A recovered run has its own checkpoints in prev and,
	// when it continues another run, its starting point in base (the
	// parent's, startingPoint): a node with no checkpoint of its own
	// starts as the continuation first started it.
	prev    map[string]*Checkpoint
	base    map[string]*Checkpoint
	answers map[string]any

	// Durability: the run's lease (with a Leaser store), and for a
	// recovered run what its log already holds.
	lease      *Lease
	durability Durability
	wb         writeBuf // guarded by emu
	endWrites  func(*RunResult) []any
	tap        func(Event) // Joined.Tap, called under emu
	// bornInBatch: the run's record is created by its first group commit
	// (its lease is renewed only once that commit is done). Under emu once
	// the run executes.
	bornInBatch bool
	// With a committer (sync and batched runs with a store), events reach
	// the sink only once committed: wgen counts buffered writes, cgen those
	// committed and published, cwait is closed when cgen advances, queued
	// says the run is on cm's list. All under emu.
	cm     *committer
	queued bool
	// held: the run's first step is under way, and its writes (from
	// run_started on) wait to be listed with cm, so that they make one
	// commit with the step's (emu). The dispatcher clears it (release)
	// before it waits for anything; a wait for a commit or a full buffer
	// clears it too. released mirrors it for the dispatcher, without emu.
	held, released bool
	wgen, cgen     uint64
	cwait          chan struct{}
	twait          chan struct{} // closed when the buffer is taken (emu)
	ending         bool          // the run's end is buffered (emu)
	logged         *logged
	recovering     bool
	dead           atomic.Bool // the store refused a write: write nothing more

	lmu   sync.Mutex
	links map[linkKey]*linkEntry
	kvmu  sync.Mutex
	kv    map[string]any
}

// completion is an execution's outcome, as a worker hands it to the
// dispatcher; the attempt and its start are the node's FlowContext's.
type completion struct {
	node  int32
	res   Result
	err   error
	trace string
}

func (e *Engine) plan(p *Plan, g *Graph) (*Plan, error) {
	if p != nil {
		return p, nil
	}
	return e.Compile(g)
}

func (e *Engine) newRun(ctx context.Context, req RunRequest) (*run, error) {
	p, err := e.plan(req.Plan, req.Graph)
	if err != nil {
		return nil, err
	}
	as := p.activeFrom(req.EntryNodeIDs)
	if as.err != nil {
		return nil, as.err
	}
	id := req.RunID
	if id == "" {
		id = e.newRunID()
	}
	now := time.Now()
	rec := &RunRecord{ID: id, RootID: id, ChatID: req.ChatID, GraphID: p.GraphID, PlanVersion: p.PlanVersion,
		Kind: req.Kind, Attrs: req.Attrs, EntryNodeIDs: as.entryIDs, Input: req.Input, Options: req.Options,
		Status: RunRunning, CreatedAt: now, UpdatedAt: now}
	return e.startRun(ctx, p, as, rec, req.Services, req.Sink, req.Joined)
}

func (e *Engine) resumeRun(ctx context.Context, req ResumeRequest) (*run, error) {
	if e.store == nil {
		return nil, fmt.Errorf("%w: the engine has no store", ErrRunNotResumable)
	}
	parent, err := e.store.GetRun(ctx, req.RunID)
	if err != nil {
		return nil, err
	}
	switch {
	case req.AtSeq > 0 && parent.Status.Finished():
		// A fork may start from any finished run.
	case parent.Status == RunInterrupted || parent.Status == RunCancelled || parent.Status == RunFailed:
	default:
		return nil, fmt.Errorf("%w: run %s is %s", ErrRunNotResumable, parent.ID, parent.Status)
	}
	var answers map[string]any
	if req.AtSeq == 0 {
		if answers, err = matchAnswers(parent, req); err != nil {
			return nil, err
		}
	}
	p, err := e.plan(req.Plan, req.Graph)
	if err != nil {
		return nil, err
	}
	if p.GraphID != parent.GraphID {
		return nil, fmt.Errorf("%w: run %s belongs to graph %q, not %q", ErrRunNotResumable, parent.ID, parent.GraphID, p.GraphID)
	}
	as := p.active(parent.EntryNodeIDs)
	if as.err != nil {
		return nil, as.err
	}
	prev, err := e.startingPoint(ctx, parent, req.AtSeq)
	if err != nil {
		return nil, err
	}
	id := req.NewRunID
	if id == "" {
		id = e.newRunID()
	}
	attrs := make(map[string]any, len(parent.Attrs)+len(req.Attrs))
	for k, v := range parent.Attrs {
		attrs[k] = v
	}
	for k, v := range req.Attrs {
		attrs[k] = v
	}
	now := time.Now()
	kind := parent.Kind
	if req.Kind != "" {
		kind = req.Kind
	}
	rec := &RunRecord{ID: id, ParentID: parent.ID, RootID: parent.RootID, ChatID: parent.ChatID,
		GraphID: p.GraphID, PlanVersion: p.PlanVersion, Kind: kind, Attrs: attrs,
		EntryNodeIDs: parent.EntryNodeIDs, Input: parent.Input, Options: parent.Options, Answers: answers,
		Status: RunRunning, CreatedAt: now, UpdatedAt: now}
	rec.Options.ForkAtSeq = req.AtSeq
	r, err := e.startRun(ctx, p, as, rec, req.Services, req.Sink, req.Joined)
	if err != nil {
		return nil, err
	}
	r.prev, r.answers = prev, answers
	return r, nil
}

// startingPoint is what a run continuing parent starts from: the
// parent's checkpoints by node, or with atSeq > 0 (a fork) those of the
// nodes that had succeeded by event seq atSeq. Its succeeded nodes
// replay; its interrupted nodes take the run's answers.
func (e *Engine) startingPoint(ctx context.Context, parent *RunRecord, atSeq int64) (map[string]*Checkpoint, error) {
	cps, err := e.store.Checkpoints(ctx, parent.ID)
	if err != nil {
		return nil, err
	}
	prev := make(map[string]*Checkpoint, len(cps))
	for _, cp := range cps {
		prev[cp.NodeID] = cp
	}
	if atSeq > 0 {
		return e.forkPoint(ctx, parent, prev, atSeq)
	}
	return prev, nil
}

// forkPoint keeps, of a run's checkpoints, the nodes whose success was
// recorded at or before checkpoint seq atSeq (a node's checkpoint id is
// the seq of its transition's event).
func (e *Engine) forkPoint(ctx context.Context, parent *RunRecord, prev map[string]*Checkpoint, atSeq int64) (map[string]*Checkpoint, error) {
	if atSeq > parent.LastSeq {
		return nil, fmt.Errorf("%w: run %s has no checkpoint %d (last is %d)", ErrCheckpointNotFound, parent.ID, atSeq, parent.LastSeq)
	}
	evs, err := e.store.Events(ctx, parent.ID, 0, int(atSeq))
	if err != nil {
		return nil, err
	}
	keep := make(map[string]*Checkpoint)
	for _, ev := range evs {
		if ev.Type == EventNodeCompleted {
			if cp := prev[ev.NodeID]; cp != nil && cp.Status == NodeSucceeded {
				keep[ev.NodeID] = cp
			}
		}
	}
	return keep, nil
}

// matchAnswers maps the resume values of req onto the parent's pending
// interrupts; a value for an unknown interrupt is an error.
func matchAnswers(parent *RunRecord, req ResumeRequest) (map[string]any, error) {
	pending := map[string]bool{}
	for _, in := range parent.Interrupts {
		pending[in.ID] = true
	}
	answers := map[string]any{}
	for id, v := range req.Values {
		if !pending[id] {
			return nil, fmt.Errorf("%w: %q is not pending in run %s", ErrInterruptNotFound, id, parent.ID)
		}
		answers[id] = v
	}
	switch {
	case req.InterruptID != "":
		if !pending[req.InterruptID] {
			return nil, fmt.Errorf("%w: %q is not pending in run %s", ErrInterruptNotFound, req.InterruptID, parent.ID)
		}
		answers[req.InterruptID] = req.Value
	case req.Value != nil:
		if len(parent.Interrupts) == 0 {
			return nil, fmt.Errorf("%w: run %s has no pending interrupt (it is %s)", ErrInterruptNotFound, parent.ID, parent.Status)
		}
		if len(parent.Interrupts) != 1 {
			return nil, fmt.Errorf("%w: run %s has %d pending interrupts: name the one the value answers", ErrInterruptNotFound, parent.ID, len(parent.Interrupts))
		}
		answers[parent.Interrupts[0].ID] = req.Value
	}
	return answers, nil
}

// activeFrom is active with empty entryIDs meaning the default entries.
func (p *Plan) activeFrom(entryIDs []string) *activeSet {
	if len(entryIDs) > 0 {
		return p.active(entryIDs)
	}
	if as := p.actives.defaults.Load(); as != nil {
		return as
	}
	as := p.active(p.defaultEntries())
	p.actives.defaults.Store(as)
	return as
}

func (p *Plan) defaultEntries() []string {
	var ids []string
	for i := range p.nodes {
		if p.nodes[i].typ.Entry {
			ids = append(ids, p.nodes[i].node.ID)
		}
	}
	return ids
}

func (e *Engine) startRun(ctx context.Context, p *Plan, as *activeSet, rec *RunRecord, services any, sink EventSink, j Joined) (*run, error) {
	if !j.empty() && !e.JoinsWrites() {
		return nil, errCannotJoin
	}
	// Held from before its record exists: recovery never takes it back.
	e.hold(rec.ID)
	defer e.unhold(rec.ID)
	var lease *Lease
	mode := rec.Options.Durability
	if mode == "" {
		mode = e.durability
	}
	if e.store != nil && e.store.finisher != nil && (mode != DurabilityExit || len(j.Writes) > 0) {
		// The record and its first lease join the run's first group commit
		// (with run_started and the Joined writes). An exit-mode run does
		// so only with joined writes, so that their refusal leaves nothing
		// of the run behind (its first commit is then its own, made by
		// flushLocked).
		rec.Token = 1
		lease = &Lease{RunID: rec.ID, Owner: e.owner, Token: 1, ExpiresAt: time.Now().Add(e.leaseTTL)}
		r, err := e.newRunState(ctx, p, as, rec, rec.CreatedAt, services, sink, lease)
		if err != nil {
			return nil, err
		}
		created, l := *rec, *lease
		r.wb.create, r.wb.lease, r.bornInBatch = &created, &l, true
		r.wb.writes, r.endWrites, r.tap = j.Writes, j.EndWrites, j.Tap
		return r, nil
	}
	if e.store != nil && e.store.starter != nil {
		got, err := e.store.starter.CreateClaimed(ctx, rec, e.owner, e.leaseTTL)
		if err != nil {
			return nil, err
		}
		lease = &got
		rec.Token = got.Token
	} else if e.store != nil {
		if err := e.store.CreateRun(ctx, rec); err != nil {
			return nil, err
		}
		if e.store.leaser != nil {
			got, err := e.store.leaser.ClaimRun(ctx, rec.ID, e.owner, e.leaseTTL)
			if err != nil {
				return nil, err
			}
			lease = &got
			rec.Token = got.Token
		}
	}
	r, err := e.newRunState(ctx, p, as, rec, rec.CreatedAt, services, sink, lease)
	if err != nil {
		return nil, err
	}
	r.wb.writes, r.endWrites, r.tap = j.Writes, j.EndWrites, j.Tap
	return r, nil
}

// newRunState makes the run's state; started is when its clock starts
// (the durations of run events count from it).
func (e *Engine) newRunState(ctx context.Context, p *Plan, as *activeSet, rec *RunRecord, started time.Time, services any, sink EventSink, lease *Lease) (*run, error) {
	n := len(p.nodes)
	r := &run{e: e, p: p, as: as, rec: rec, store: e.store, services: services, sink: sink, lease: lease,
		maxPar: rec.Options.MaxParallel, started: started}
	if r.store != nil {
		r.bg = context.WithoutCancel(ctx)
	}
	if r.maxPar <= 0 {
		r.maxPar = e.maxPar
	}
	r.durability = rec.Options.Durability
	switch r.durability {
	case DurabilitySync, DurabilityBatched, DurabilityExit:
	case "":
		r.durability = e.durability
	default:
		return nil, fmt.Errorf("runtime: unknown durability %q", r.durability)
	}
	if r.store != nil {
		r.cm = e.committerFor(r.durability)
	}
	e.hold(rec.ID) // until execute returns
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	// The channels of workers come with the first node that goes to one
	// (a chain of Inline nodes never does).
	r.dispatch = p.takeDispatch()
	r.outputs = make([]any, n)
	r.state = make([]NodeStatus, n)
	r.fcs = make([]FlowContext, n)
	return r, nil
}

// execute is the dispatcher loop. It returns when the run has ended.
func (r *run) execute() (*RunResult, error) {
	defer r.e.unhold(r.rec.ID)
	defer r.cancel(context.Canceled)
	defer r.stopWorkers()
	if r.e.maxRun > 0 {
		clock := time.AfterFunc(r.e.maxRun, func() { r.cancel(ErrRunTimeLimit) })
		defer clock.Stop()
	}
	defer r.renewLease()() // nothing to renew without a lease
	// With a committer (sync, batched), run_started waits for the run's
	// first step and is committed with it: the entry nodes that need no
	// wait (pure ones, run on the dispatcher) run meanwhile, and the first
	// node that waits for its commit — or the dispatcher, before it waits
	// for anything — lists the writes. So run_started is durable and
	// published before any node with an effect starts, and a sink that
	// reacts to it (linking a cancel, say) does so before such work
	// begins; a chat turn's creation, its pure start and its agent's
	// running checkpoint cost one commit, not two. Exit mode writes
	// run_started alone, before any node starts.
	r.emu.Lock()
	r.held = r.cm != nil
	r.released = !r.held
	r.emu.Unlock()
	r.emitAt(r.started, EventRunStarted, -1, 0, &RunStartedData{Kind: r.rec.Kind, GraphID: r.p.GraphID,
		PlanVersion: r.p.PlanVersion, EntryNodeIDs: r.as.entryIDs, ActiveNodeIDs: r.as.ids,
		ParentRunID: r.rec.ParentID, Resumed: r.rec.ParentID != "", Attrs: r.rec.Attrs})
	if s, ok := r.sink.(StartSink); ok {
		s.Started(r.rec.ID)
	}
	if r.cm == nil {
		r.flush(true)
	}
	for _, i := range r.as.nodes {
		r.state[i] = NodePending
		r.pending[i] = r.as.inCount[i]
	}
	for _, i := range r.as.entries {
		if r.pending[i] == 0 {
			r.settle(i)
		}
	}
	var ctxDone <-chan struct{}
	watching := false // ctxDone is set (nil again once the cancel is seen)
	var grace <-chan time.Time
	for {
		r.launch()
		if r.inflight == 0 {
			if r.ready.len() == 0 || r.stopping != stopNone {
				break
			}
			continue
		}
		if !watching {
			// Only now: a run whose nodes all ran on the dispatcher
			// never makes its context's channel.
			ctxDone, watching = r.ctx.Done(), true
		}
		if r.stopping != stopNone && grace == nil {
			grace = time.After(r.e.grace)
		}
		if r.slot && !r.canLaunch() {
			<-r.e.sem // nothing to start with it: never wait holding a slot
			r.slot = false
		}
		var slot chan<- struct{}
		if r.canLaunch() && !r.slot {
			slot = r.e.sem
		}
		if r.drain() {
			continue // completions were waiting: no need to wait
		}
		r.clock = time.Time{} // the dispatcher waits: its next step reads the clock
		r.release()
		select {
		case <-r.workers.wake:
			r.drain()
		case slot <- struct{}{}:
			r.slot = true
		case <-ctxDone:
			ctxDone = nil
			r.halt()
		case <-grace:
			r.abandon()
		}
	}
	if r.slot {
		<-r.e.sem
		r.slot = false
	}
	res, err := r.finish()
	r.giveBackDispatch()
	return res, err
}

// dispatch is the part of a run's state that only its dispatcher
// goroutine touches: per node the unresolved and the taken incoming flow
// edges, per edge whether it was taken and its value, the ready heap's
// array and evalEdges' answer. Nothing else ever refers to it — executors
// get copies of their inputs, and the run's outputs, states and event
// payloads live elsewhere — so once the dispatcher is done (finish has
// written the run's end), the plan's next run can take it over, cleared:
// W2 (50 nodes) saves 2.9 KB and two allocations a run.
type dispatch struct {
	pending  []int32 // per node: unresolved active incoming flow edges
	live     []int32 // per node: taken incoming flow edges
	edgeLive []int32 // per edge: 1 when it was taken
	edgeVal  []any   // per edge: the value it carries
	ready    rankHeap
	liveBuf  []bool  // evalEdges' answer, read before its next call
	ints     []int32 // the array under pending, live, edgeLive and ready.h
}

// takeDispatch returns a cleared dispatch sized for p's runs.
func (p *Plan) takeDispatch() *dispatch {
	if d, ok := p.dispatches.Get().(*dispatch); ok {
		return d
	}
	n, m := len(p.nodes), len(p.edges)
	out := 0
	for i := range p.nodes {
		out = max(out, len(p.nodes[i].flowOut))
	}
	ints := make([]int32, 3*n+m)
	return &dispatch{pending: ints[:n:n], live: ints[n : 2*n : 2*n], edgeLive: ints[2*n : 2*n+m : 2*n+m],
		edgeVal: make([]any, m),
		ready:   rankHeap{rank: p.nodes, h: ints[2*n+m : 2*n+m]}, // a node is pushed once at most
		liveBuf: make([]bool, out), ints: ints}
}

// giveBackDispatch clears the run's dispatch state and hands it to the
// plan's next run. The run drops it first, so a (wrong) later use by
// this run fails at once instead of reading another run's state.
func (r *run) giveBackDispatch() {
	d := r.dispatch
	r.dispatch = nil
	clear(d.ints)
	d.ready.h = d.ready.h[:0]
	clear(d.edgeVal) // the values also belong to the outputs: keep none alive
	r.p.dispatches.Put(d)
}

// drain handles every completion waiting, so a burst of parallel nodes
// costs one wake-up of the dispatcher rather than one each. It reports
// whether there were any.
func (r *run) drain() bool {
	w := r.workers
	w.mu.Lock()
	cs := w.done
	w.done, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	if len(cs) > 0 {
		r.clock = time.Time{} // a new step, whose one reading the batch shares
	}
	for i := range cs {
		r.inflight--
		r.complete(cs[i])
		cs[i] = completion{}
	}
	w.spare = cs[:0]
	return len(cs) > 0
}

func (r *run) canLaunch() bool {
	return r.stopping == stopNone && r.ready.len() > 0 && r.inflight < r.maxPar
}

// launch starts ready nodes while slots allow. When nothing is in flight
// it waits for a global slot (or the end of the run).
func (r *run) launch() {
	for r.canLaunch() {
		if r.ctx.Err() != nil {
			r.halt() // a cancel before or between nodes: start nothing more
			return
		}
		if !r.slot {
			select {
			case r.e.sem <- struct{}{}:
			default:
				if r.inflight > 0 {
					return // wait in the main select
				}
				r.clock = time.Time{}
				r.release()
				select {
				case r.e.sem <- struct{}{}:
				case <-r.ctx.Done():
					r.halt()
					return
				}
			}
		}
		r.slot = false
		r.start(r.ready.pop())
	}
}

// halt records why the run context ended.
func (r *run) halt() {
	if r.stopping != stopNone {
		return
	}
	if errors.Is(context.Cause(r.ctx), ErrSiblingFailed) {
		r.stopping = stopFailed
	} else {
		r.stopping = stopCancelled
	}
}

// failRun stops a fail_fast run: in-flight nodes are cancelled through
// their context, the rest will be skipped.
func (r *run) failRun() {
	if r.stopping == stopNone {
		r.stopping = stopFailed
		r.cancel(ErrSiblingFailed)
	}
}

// start prepares node n: replays it from the parent run's checkpoint when
// allowed, or executes it. The caller holds a global slot for it.
func (r *run) start(n int32) {
	pn := &r.p.nodes[n]
	in := r.inputs(n)
	var hash string
	if r.store != nil {
		hash = inputsHash(r.rec.RootID, r.p, n, in)
	}
	prev, own := r.prev[pn.node.ID], r.recovering
	if prev == nil && r.base != nil {
		prev, own = r.base[pn.node.ID], false
	}
	now := r.now()
	// A node starts once per run: its FlowContext is still zero.
	fc := &r.fcs[n]
	fc.r, fc.node, fc.attempt, fc.inputsHash, fc.begin = r, n, 1, hash, now
	switch {
	case own && prev != nil:
		if r.restore(n, prev, fc) {
			return
		}
	case prev != nil && prev.Status == NodeSucceeded &&
		((prev.PlanVersion == r.p.PlanVersion && prev.InputsHash == hash) || pn.opts.Effect.Sticky()):
		<-r.e.sem
		r.replay(n, prev, hash)
		return
	case prev != nil:
		// The count survives cancelled and failed runs too, so interrupt
		// ids never repeat within a lineage.
		if prev.Resumes != 0 {
			fc.extra().resumes = prev.Resumes
		}
		if prev.Status == NodeInterrupted && prev.Interrupt != nil {
			r.answer(fc, prev.Interrupt.ID)
		}
	}
	r.state[n] = NodeRunning
	var details map[string]any
	if pn.desc != nil {
		details = pn.desc.Describe(r.ctx, pn.node, in, fc)
	}
	if fc.wait().IsZero() {
		r.checkpoint(fc, NodeRunning)
	}
	var data any
	if details != nil {
		data = &NodeStartedData{Details: details}
	}
	r.emitAt(now, EventNodeStarted, n, 1, data)
	switch {
	case fc.more != nil && fc.more.stale:
		r.emit(EventNodeRetrying, n, fc.attempt, &NodeRetryingData{Attempt: fc.attempt, Code: CodeStaleRunning,
			Error: "the process running this attempt was lost; it runs again with the same attempt id"})
	case !fc.wait().IsZero():
		prev := r.prev[pn.node.ID]
		r.emit(EventNodeRetrying, n, fc.attempt+1, &NodeRetryingData{Attempt: fc.attempt + 1,
			DelayMs: max(time.Until(fc.wait()), 0).Milliseconds(), Error: prev.Error, Code: prev.ErrorCode})
	}
	if r.store != nil {
		r.beforeExecute(pn)
		r.clock = time.Time{} // the flush may have waited
	}
	if r.ctx.Err() != nil {
		// Cancelled (or the store failed) while flushing: never start the handler.
		<-r.e.sem
		r.cancelNode(n, fc, causeText(r.ctx))
		return
	}
	if pn.typ.Inline && r.inflight == 0 && r.ready.len() == 0 && pn.opts.TimeoutMs == 0 {
		// Nothing else can run until this node ends, and its type promises
		// not to block: run it here and save a goroutine and two channel
		// hand-offs.
		c, held := r.exec(n, in, fc)
		// The slot passes to the node the dispatcher starts next (launch),
		// if any: a chain of such nodes takes one slot, not one each.
		r.slot = held
		r.clock = time.Time{} // the node ran: a new step
		r.complete(c)
		return
	}
	// On a worker, not on the dispatcher: a cancel must end the run even
	// when the executor ignores its context.
	r.inflight++
	if r.workers == nil {
		r.workers = r.p.takeWorkers(min(r.maxPar, len(r.as.nodes)))
	}
	// A node of an Inline type that cannot wait (no timeout, no retry
	// backoff, no link to materialize) may share a worker with others
	// like it.
	brief := pn.typ.Inline && pn.opts.TimeoutMs == 0 && pn.opts.Retry.MaxAttempts <= 1 && fc.wait().IsZero() && len(pn.linkIn) == 0
	if r.workers.give(job{n: n, in: in, brief: brief}) {
		go r.worker()
	}
}

// stopWorkers lets the run's idle workers exit once it has ended.
func (r *run) stopWorkers() {
	if w := r.workers; w != nil {
		// Broadcast before unlocking: once unlocked, the last worker may
		// exit and hand w to another run (recycle), which this run must
		// not touch.
		w.mu.Lock()
		w.closed = true
		w.more.Broadcast()
		w.mu.Unlock()
	}
}

// now is the time of the dispatcher's current step, read once per step.
func (r *run) now() time.Time {
	if r.clock.IsZero() {
		r.clock = time.Now()
	}
	return r.clock
}

// job is a node execution handed to a worker goroutine (the node's
// FlowContext is the run's fcs[n]).
type job struct {
	n int32
	// brief: the executor never blocks (an Inline type, no timeout, no
	// retry, no links), so the job may wait for a worker to finish another.
	brief bool
	in    Inputs
}

// workers are a run's worker goroutines and what passes between them and
// the dispatcher, under one lock: jobs not taken yet (first in, first
// out), and completions the dispatcher has not taken yet. A worker takes
// the next job as soon as it is done with one, so a burst of parallel
// nodes reuses goroutines (and their grown stacks), and the dispatcher
// wakes once per batch of completions, not once per node.
//
// No job waits behind an executor that may block: every job that is not
// brief has a worker of its own (avail >= blocking), and while a brief
// job waits one more worker will come back to the queue. Brief jobs share
// workers: up to GOMAXPROCS run at once, the rest queue behind them.
type workers struct {
	mu       sync.Mutex
	jobs     []job
	head     int // jobs[head:] are waiting
	blocking int // waiting jobs that are not brief
	briefs   int // waiting jobs that are brief
	avail    int // workers not executing a job that is not brief
	free     int // of those, waiting for a job and not yet signalled
	procs    int
	more     sync.Cond // signalled once per job given to a waiting worker
	done     []completion
	spare    []completion  // the dispatcher's last batch, reused
	wake     chan struct{} // cap 1: done has completions
	closed   bool          // the run has ended: idle workers exit
	alive    int           // worker goroutines that have not exited
	home     *sync.Pool    // the plan's: where recycle leaves w
}

// newWorkers sizes its queues for k jobs in flight.
func newWorkers(k int) *workers {
	w := &workers{wake: make(chan struct{}, 1), procs: goruntime.GOMAXPROCS(0), jobs: make([]job, 0, k)}
	cs := make([]completion, 2*k)
	w.done, w.spare = cs[:0:k], cs[k:k]
	w.more.L = &w.mu
	return w
}

// takeWorkers returns workers for a run of p sized for k jobs in flight:
// a set an earlier run left (see recycle), or a new one.
func (p *Plan) takeWorkers(k int) *workers {
	if w, ok := p.workerSets.Get().(*workers); ok {
		w.procs = goruntime.GOMAXPROCS(0)
		return w
	}
	w := newWorkers(k)
	w.home = &p.workerSets
	return w
}

// recycle clears w and leaves it for the plan's next run. Its last
// goroutine calls it as it exits: the run has ended (closed), every
// worker is gone and the dispatcher touches w no more, so nothing can
// read w's state again — a completion an abandoned executor delivered
// after its run ended included.
func (w *workers) recycle() {
	clear(w.jobs[:cap(w.jobs)])
	w.jobs, w.head = w.jobs[:0], 0
	clear(w.done[:cap(w.done)])
	clear(w.spare[:cap(w.spare)])
	w.done, w.spare = w.done[:0], w.spare[:0]
	w.blocking, w.briefs, w.avail, w.free = 0, 0, 0, 0
	w.closed = false
	select {
	case <-w.wake:
	default:
	}
	w.home.Put(w)
}

// give queues j. It reports whether a new worker must start for it.
func (w *workers) give(j job) bool {
	w.mu.Lock()
	if w.head > 0 && len(w.jobs) == cap(w.jobs) {
		k := copy(w.jobs, w.jobs[w.head:])
		clear(w.jobs[k:])
		w.jobs, w.head = w.jobs[:k], 0
	}
	w.jobs = append(w.jobs, j)
	need := w.blocking
	if j.brief {
		w.briefs++
	} else {
		w.blocking++
		need++
	}
	if w.briefs > 0 {
		need++
	}
	spawn := w.avail < need || j.brief && w.free == 0 && w.avail-w.blocking < w.procs
	if spawn {
		w.avail++
		w.alive++
	}
	signal := w.free > 0
	if signal {
		w.free--
	}
	w.mu.Unlock()
	if signal {
		w.more.Signal()
	}
	return spawn
}

// worker executes jobs of its run until the run ends.
func (r *run) worker() {
	w := r.workers
	w.mu.Lock()
	for {
		for w.head == len(w.jobs) {
			if w.closed {
				w.avail--
				w.alive--
				last := w.alive == 0
				w.mu.Unlock()
				if last {
					w.recycle()
				}
				return
			}
			w.free++
			w.more.Wait() // whoever signals counts free down
		}
		j := w.jobs[w.head]
		w.jobs[w.head] = job{}
		if w.head++; w.head == len(w.jobs) {
			w.jobs, w.head = w.jobs[:0], 0
		}
		if j.brief {
			w.briefs--
		} else {
			w.blocking--
			w.avail--
		}
		w.mu.Unlock()
		fc := &r.fcs[j.n]
		c, held := r.exec(j.n, j.in, fc)
		if held {
			<-r.e.sem
		}
		fc.guard.returned(r.e)
		w.mu.Lock()
		if !j.brief {
			w.avail++
		}
		w.done = append(w.done, c)
		if len(w.done) == 1 {
			select {
			case w.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}
}

// answer gives fc the resume value for interrupt id, if the run has one.
func (r *run) answer(fc *FlowContext, id string) {
	if v, ok := r.answers[id]; ok {
		m := fc.extra()
		m.resume, m.hasResume, m.answers = v, true, id
		m.resumes++
	}
}

// restore re-establishes node n of a recovered run from its own
// checkpoint. It returns false when the node must execute (again), after
// setting fc up for that: a node lost mid-attempt reruns the same attempt;
// a node lost during a retry backoff waits out the persisted nextAttemptAt.
func (r *run) restore(n int32, prev *Checkpoint, fc *FlowContext) bool {
	fc.attempt = max(prev.Attempt, 1)
	if prev.Resumes != 0 {
		fc.extra().resumes = prev.Resumes
	}
	if !prev.StartedAt.IsZero() {
		fc.begin = prev.StartedAt
	}
	switch prev.Status {
	case NodeSucceeded:
		<-r.e.sem
		r.replay(n, prev, prev.InputsHash)
		return true
	case NodeFailed:
		<-r.e.sem
		r.state[n] = NodeRunning
		err := &CodedError{Code: prev.ErrorCode, Err: errors.New(prev.Error)}
		r.failNode(n, fc, completion{node: n, err: err, trace: prev.ErrorTrace}, 0)
		return true
	case NodeInterrupted:
		<-r.e.sem
		r.state[n] = NodeInterrupted
		info := *prev.Interrupt
		r.interrupt = append(r.interrupt, info)
		r.terminal(fc, EventNodeInterrupted, &info)
		return true
	case NodeCancelled:
		// The run was being cancelled when its process was lost: finish that.
		<-r.e.sem
		r.state[n] = NodeRunning
		if r.ctx.Err() == nil {
			r.cancel(errors.New("cancelled before the run's process was lost"))
		}
		r.halt()
		r.cancelNode(n, fc, prev.Error)
		return true
	case NodeRunning, NodeStaleRunning:
		if prev.Interrupt != nil {
			r.answer(fc, prev.Interrupt.ID)
			fc.extra().resumes = prev.Resumes // the answer was counted when first given
		}
		if prev.Status == NodeRunning && !prev.NextAttemptAt.IsZero() {
			fc.extra().wait = prev.NextAttemptAt
		} else {
			fc.extra().stale = true
		}
	}
	return false
}

// exec runs node n's attempts with its retry policy. It holds a global slot
// while an attempt runs and releases it for backoff delays. It reports
// whether it still holds the slot (not when the run stopped during a
// backoff): the caller releases it or passes it on.
func (r *run) exec(n int32, in Inputs, fc *FlowContext) (completion, bool) {
	pn := &r.p.nodes[n]
	pol := &pn.opts.Retry
	if wait := fc.wait(); !wait.IsZero() {
		if c, ok := r.backoff(n, fc, wait); !ok {
			return c, false
		}
	}
	for {
		c := r.attempt(pn, n, in, fc)
		var next time.Time
		if c.err != nil && r.ctx.Err() == nil {
			next = r.retry(pol, fc, &c)
		}
		if next.IsZero() {
			return c, true
		}
		if c, ok := r.backoff(n, fc, next); !ok {
			return c, false
		}
	}
}

// retry decides whether a failed attempt runs again; if so it records the
// failure and returns when the next attempt is due (zero: no retry). Apart
// from exec, so the worker's common path keeps a small stack.
func (r *run) retry(pol *RetryPolicy, fc *FlowContext, c *completion) time.Time {
	if interruptOf(c.err) != nil {
		return time.Time{}
	}
	code := ErrorCode(c.err)
	if fc.attempt >= pol.MaxAttempts || !pol.Retryable(code) {
		return time.Time{}
	}
	delay := pol.Delay(fc.attempt, rand.Float64())
	next := time.Now().Add(delay)
	r.retrying(fc, *c, next, delay, code)
	return next
}

// backoff waits until the next attempt is due without holding a global
// slot, then moves fc to that attempt and checkpoints it running. It fails
// (returning the cancelled completion) when the run stops meanwhile.
func (r *run) backoff(n int32, fc *FlowContext, until time.Time) (completion, bool) {
	<-r.e.sem
	cancelled := completion{node: n, err: context.Cause(r.ctx)}
	t := time.NewTimer(max(time.Until(until), 0))
	select {
	case <-t.C:
	case <-r.ctx.Done():
		t.Stop()
		cancelled.err = context.Cause(r.ctx)
		return cancelled, false
	}
	select {
	case r.e.sem <- struct{}{}:
	case <-r.ctx.Done():
		cancelled.err = context.Cause(r.ctx)
		return cancelled, false
	}
	fc.setAttempt(fc.attempt + 1)
	if fc.more != nil {
		fc.more.wait = time.Time{}
	}
	r.checkpoint(fc, NodeRunning)
	r.beforeExecute(&r.p.nodes[n])
	if r.ctx.Err() != nil {
		<-r.e.sem
		cancelled.err = context.Cause(r.ctx)
		return cancelled, false
	}
	return completion{}, true
}

// retrying records a failed attempt and the scheduled next one, then
// announces it.
func (r *run) retrying(fc *FlowContext, c completion, next time.Time, delay time.Duration, code string) {
	if r.store != nil {
		cp := r.newCheckpoint(fc, NodeRunning)
		cp.Error, cp.ErrorCode, cp.ErrorTrace, cp.NextAttemptAt = c.err.Error(), code, c.trace, next
		r.save(cp)
	}
	r.emit(EventNodeRetrying, fc.node, fc.attempt+1, &NodeRetryingData{Attempt: fc.attempt + 1,
		DelayMs: delay.Milliseconds(), Error: c.err.Error(), Code: code})
	// A node with an effect has the schedule durable before the wait, so
	// a crash during it neither retries early nor forgets the retry; a
	// pure or read node's joins the next commit (a crash may make it run
	// again early).
	r.beforeExecute(&r.p.nodes[fc.node])
}

// attempt runs the executor once, with the node's timeout, recovering panics.
func (r *run) attempt(pn *pnode, n int32, in Inputs, fc *FlowContext) completion {
	if pn.opts.TimeoutMs <= 0 {
		return r.call(r.ctx, pn, n, in, fc)
	}
	return r.attemptTimed(pn, n, in, fc)
}

// attemptTimed is attempt for a node with a timeout: the executor runs on
// its own goroutine, given up at its deadline plus a grace.
func (r *run) attemptTimed(pn *pnode, n int32, in Inputs, fc *FlowContext) completion {
	d := time.Duration(pn.opts.TimeoutMs) * time.Millisecond
	ctx, cancel := context.WithTimeoutCause(r.ctx, d, ErrNodeTimeout)
	defer cancel()
	ch := make(chan completion, 1)
	g := new(execGuard)
	go func() {
		c := r.call(ctx, pn, n, in, fc)
		g.returned(r.e)
		ch <- c
	}()
	select {
	case c := <-ch:
		if c.err != nil && ctx.Err() != nil && r.ctx.Err() == nil {
			c.err = ErrNodeTimeout
		}
		return c
	case <-ctx.Done():
	}
	// Give the executor a moment to notice, then abandon it.
	t := time.NewTimer(min(r.e.grace, time.Second))
	defer t.Stop()
	select {
	case c := <-ch:
		if c.err != nil && r.ctx.Err() == nil {
			c.err = ErrNodeTimeout
		}
		return c
	case <-t.C:
		g.abandon(r.e)
		if r.ctx.Err() != nil {
			return completion{node: n, err: context.Cause(r.ctx)}
		}
		return completion{node: n, err: ErrNodeTimeout}
	}
}

func (r *run) call(ctx context.Context, pn *pnode, n int32, in Inputs, fc *FlowContext) (c completion) {
	c.node = n
	defer func() {
		if p := recover(); p != nil {
			c.err = &CodedError{Code: ErrCodePanic, Err: fmt.Errorf("panic: %v", p)}
			c.trace = string(debug.Stack())
		}
	}()
	if fc.attempt > 1 {
		in = in.clone() // every attempt gets a pristine copy
	}
	c.res, c.err = pn.exec.Execute(ctx, pn.node, in, fc)
	return c
}

// complete records a node's outcome, emits its terminal event and routes
// its outgoing flow edges.
func (r *run) complete(c completion) {
	n := c.node
	if r.state[n] != NodeRunning {
		return // abandoned after the grace period
	}
	fc := &r.fcs[n]
	pn := &r.p.nodes[n]
	now := r.now()
	dur := float64(now.Sub(fc.begin).Microseconds()) / 1000
	switch ie := interruptOf(c.err); {
	case c.err == nil:
		out := c.res.Output
		live, err := r.evalEdges(n, WhenOnSuccess, out)
		if err != nil {
			c.err, c.trace = err, ""
			r.failNode(n, fc, c, dur)
			return
		}
		r.state[n] = NodeSucceeded
		r.outputs[n] = out
		if r.store != nil {
			cp := r.newCheckpoint(fc, NodeSucceeded)
			cp.Output, cp.Summary = out, c.res.Summary
			if cp.Summary == "" {
				cp.Summary = summarize(out)
			}
			r.save(cp)
		}
		d := r.completedData()
		d.Output, d.DurationMs = out, dur
		r.terminalAt(now, fc, EventNodeCompleted, d)
		// An effect that happened must never be repeated: no node with
		// an effect starts before this success is durable (beforeExecute
		// waits for every write buffered so far), so the dispatcher need
		// not wait for it here: the next node's start joins the same
		// commit when it can. A pure node may run before it is durable:
		// a crash only makes it run again, unseen.
		if r.stopping == stopNone {
			r.routeAt(now, n, live, out)
		}
	case ie != nil:
		info := InterruptInfo{ID: fc.InterruptID(),
			NodeID: pn.node.ID, Reason: ie.Reason, Payload: ie.Payload}
		r.state[n] = NodeInterrupted
		r.interrupt = append(r.interrupt, info)
		if r.store != nil {
			cp := r.newCheckpoint(fc, NodeInterrupted)
			cp.Interrupt = &info
			r.save(cp)
		}
		r.terminal(fc, EventNodeInterrupted, &info)
	case r.ctx.Err() != nil && !errors.Is(c.err, ErrNodeTimeout):
		r.cancelNode(n, fc, causeText(r.ctx))
	default:
		r.failNode(n, fc, c, dur)
	}
}

// interruptOf returns err's *InterruptError, if it has one.
func interruptOf(err error) *InterruptError {
	if err == nil {
		return nil
	}
	var ie *InterruptError
	if errors.As(err, &ie) {
		return ie
	}
	return nil
}

// completedData returns a node_completed payload from one array per run
// (a node completes once).
func (r *run) completedData() *NodeCompletedData {
	if len(r.completedBuf) == 0 {
		r.completedBuf = make([]NodeCompletedData, len(r.as.nodes))
	}
	d := &r.completedBuf[0]
	r.completedBuf = r.completedBuf[1:]
	return d
}

func (r *run) cancelNode(n int32, fc *FlowContext, cause string) {
	r.state[n] = NodeCancelled
	if r.store != nil {
		cp := r.newCheckpoint(fc, NodeCancelled)
		cp.Error = cause
		r.save(cp)
	}
	r.terminal(fc, EventNodeCancelled, &NodeCancelledData{Cause: cause})
}

// failNode records a final failure. Failure edges (on_failure, always) and,
// with continueOnError, success edges carry the error onwards; a failure
// nothing handles fails the run.
func (r *run) failNode(n int32, fc *FlowContext, c completion, dur float64) {
	pn := &r.p.nodes[n]
	code := ErrorCode(c.err)
	payload := map[string]any{"error": c.err.Error(), "code": code, "nodeId": pn.node.ID}
	live, err := r.evalEdges(n, WhenOnFailure, payload)
	if err != nil {
		live = nil // a broken failure condition: nothing handles the failure
		payload["conditionError"] = err.Error()
	}
	handled := len(live) > 0 || pn.opts.ContinueOnError
	r.state[n] = NodeFailed
	if r.store != nil {
		cp := r.newCheckpoint(fc, NodeFailed)
		cp.Error, cp.ErrorCode, cp.ErrorTrace = c.err.Error(), code, c.trace
		r.save(cp)
	}
	r.terminal(fc, EventNodeFailed, &NodeFailedData{Error: c.err.Error(), Code: code, Attempts: fc.attempt, Handled: handled, DurationMs: dur})
	if !handled {
		r.failed = append(r.failed, pn.node.ID)
		if r.firstErr == nil {
			r.firstErr = &NodeError{NodeID: pn.node.ID, Attempt: fc.attempt, Code: code, Err: c.err}
		}
		opts := r.rec.Options
		if opts.FailurePolicy != FailOpen || (opts.MaxNodeFailures > 0 && len(r.failed) >= opts.MaxNodeFailures) {
			r.failRun()
		}
	}
	if r.stopping == stopNone {
		r.route(n, live, payload)
	}
}

// evalEdges returns which outgoing flow edges of n fire for an outcome.
// For a success: on_success and always edges whose condition holds; for a
// failure: on_failure and always edges (and, with continueOnError,
// on_success edges) whose condition holds. The answer is the run's scratch
// slice: use it before the next call.
func (r *run) evalEdges(n int32, outcome When, v any) ([]bool, error) {
	pn := &r.p.nodes[n]
	if len(pn.flowOut) == 0 {
		return nil, nil
	}
	var live []bool
	for k, ei := range pn.flowOut {
		pe := &r.p.edges[ei]
		fires := pe.when == WhenAlways || pe.when == outcome ||
			(outcome == WhenOnFailure && pe.when == WhenOnSuccess && pn.opts.ContinueOnError)
		if fires && pe.cond != nil {
			ok, err := evalCondition(r.ctx, pe.cond, v)
			if err != nil {
				return nil, Errorf(ErrCodeCondition, "condition of edge %s: %v", pe.edge.ID, err)
			}
			fires = ok
		}
		if fires {
			if live == nil {
				if cap(r.liveBuf) < len(pn.flowOut) {
					r.liveBuf = make([]bool, len(pn.flowOut))
				}
				live = r.liveBuf[:len(pn.flowOut)]
				clear(live)
			}
			live[k] = true
		}
	}
	return live, nil
}

// route resolves the outgoing flow edges of n: taken edges carry v and are
// announced with edge_taken; targets whose edges are all resolved become
// ready or are skipped.
func (r *run) route(n int32, live []bool, v any) { r.routeAt(time.Time{}, n, live, v) }

func (r *run) routeAt(at time.Time, n int32, live []bool, v any) {
	pn := &r.p.nodes[n]
	for k, ei := range pn.flowOut {
		if live != nil && live[k] {
			r.edgeLive[ei], r.edgeVal[ei] = 1, v
			r.emitAt(at, EventEdgeTaken, -1, 0, r.p.edges[ei].taken)
		}
	}
	r.resolve(pn.flowOut)
}

// resolve counts edges as resolved at their targets and settles targets
// with nothing left to wait for. Skips propagate iteratively.
func (r *run) resolve(edges []int32) {
	for _, ei := range edges {
		d := r.p.edges[ei].dst
		if r.edgeLive[ei] != 0 {
			r.live[d]++
		}
		if r.pending[d]--; r.pending[d] == 0 {
			r.settle(d)
		}
	}
}

// settle decides a node whose incoming edges are all resolved: ready, or
// skipped (and its own edges dead).
func (r *run) settle(n int32) {
	stack := []int32{n}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if r.runnable(u) {
			r.ready.push(u)
			continue
		}
		r.skip(u, SkipDeadEdges)
		for _, ei := range r.p.nodes[u].flowOut {
			d := r.p.edges[ei].dst
			if r.pending[d]--; r.pending[d] == 0 {
				stack = append(stack, d)
			}
		}
	}
}

func (r *run) runnable(n int32) bool {
	in, live := r.as.inCount[n], r.live[n]
	if r.as.isEntry[n] {
		in, live = in+1, live+1
	}
	if r.p.nodes[n].opts.Join == JoinAny {
		return live > 0
	}
	return live == in
}

func (r *run) skip(n int32, reason string) {
	r.state[n] = NodeSkipped
	if r.store != nil {
		cp := &Checkpoint{RunID: r.rec.ID, NodeID: r.p.nodes[n].node.ID, Status: NodeSkipped,
			PlanVersion: r.p.PlanVersion, Effect: r.p.nodes[n].opts.Effect, SkipReason: reason,
			UpdatedAt: time.Now(), Token: r.rec.Token}
		r.save(cp)
	}
	r.emitAt(r.now(), EventNodeSkipped, n, 0, &NodeSkippedData{Reason: reason})
}

// endLoggedStarts gives a terminal event to each node of a recovered run
// that its log shows started but not ended and that this process stopped
// before reaching (a cancel or a failure before it, say a cancel sent
// while the run's process was down): completed from its checkpoint when
// it succeeded (nothing executes), cancelled otherwise. Without this such
// a node would be skipped after its start.
func (r *run) endLoggedStarts() {
	if !r.recovering {
		return
	}
	for _, n := range r.as.nodes {
		id := r.p.nodes[n].node.ID
		if r.state[n] != NodePending || !r.logged.started[id] {
			continue
		}
		prev := r.prev[id]
		switch {
		case prev != nil && prev.Status == NodeSucceeded:
			r.replay(n, prev, prev.InputsHash) // what the log holds is not emitted again
			continue
		case r.logged.terminal[id]:
			// Ended in the log, its checkpoint not succeeded (failed,
			// cancelled): nothing to add.
			r.state[n] = NodeCancelled
			if prev != nil && (prev.Status == NodeFailed || prev.Status == NodeInterrupted) {
				r.state[n] = prev.Status
			}
			continue
		}
		fc := &r.fcs[n]
		*fc = FlowContext{r: r, node: n, attempt: 1, begin: time.Now()}
		if prev != nil {
			fc.attempt, fc.inputsHash = max(prev.Attempt, 1), prev.InputsHash
		}
		r.cancelNode(n, fc, "the run stopped before the node, lost with its process, went on")
	}
}

// replay completes n from the parent run's checkpoint without executing it.
func (r *run) replay(n int32, prev *Checkpoint, hash string) {
	fc := &r.fcs[n]
	*fc = FlowContext{r: r, node: n, attempt: prev.Attempt, inputsHash: hash, begin: time.Now(), replayed: true}
	if fc.attempt == 0 {
		fc.attempt = 1
	}
	r.state[n] = NodeRunning
	r.emit(EventNodeStarted, n, fc.attempt, replayedStart)
	out := prev.Output
	live, err := r.evalEdges(n, WhenOnSuccess, out)
	if err != nil {
		r.failNode(n, fc, completion{node: n, err: err}, 0)
		return
	}
	r.state[n] = NodeSucceeded
	r.outputs[n] = out
	if r.store != nil && !r.recovering {
		cp := r.newCheckpoint(fc, NodeSucceeded)
		cp.Output, cp.Summary, cp.Replayed = out, prev.Summary, true
		cp.StartedAt, cp.AttemptID = prev.StartedAt, prev.AttemptID
		r.save(cp)
	}
	d := r.completedData()
	d.Output, d.Replayed = out, !r.recovering
	r.terminal(fc, EventNodeCompleted, d)
	if r.stopping == stopNone {
		r.route(n, live, out)
	}
}

var replayedStart = &NodeStartedData{Replayed: true}

// abandon gives up on executors that ignored cancellation past the grace
// period: they are reported cancelled and their late results dropped.
func (r *run) abandon() {
	for _, n := range r.as.nodes {
		if r.state[n] == NodeRunning {
			r.fcs[n].guard.abandon(r.e)
			r.cancelNode(n, &r.fcs[n], causeText(r.ctx)+" (executor did not stop within the grace period)")
			r.inflight--
		}
	}
}

// finish skips what never ran, writes the terminal run event and record.
func (r *run) finish() (*RunResult, error) {
	if r.ctx.Err() != nil {
		r.halt()
	}
	status := RunCompleted
	reason := ""
	switch {
	case r.stopping == stopCancelled:
		status, reason = RunCancelled, SkipRunCancelled
	case r.stopping == stopFailed || len(r.failed) > 0:
		status, reason = RunFailed, SkipRunFailed
	case len(r.interrupt) > 0:
		status = RunInterrupted
	}
	if status != RunInterrupted {
		if reason == "" {
			reason = SkipDeadEdges
		}
		r.endLoggedStarts()
		for _, n := range r.as.nodes {
			if r.state[n] == NodePending {
				r.skip(n, reason)
			}
		}
	}
	now := r.now()
	dur := float64(now.Sub(r.started).Microseconds()) / 1000
	res := &RunResult{RunID: r.rec.ID, Status: status, Interrupts: r.interrupt, plan: r.p, outputs: r.outputs, states: r.state}
	var (
		endAt   time.Time // zero: now
		endType EventType
		endData any
	)
	switch status {
	case RunCompleted:
		endAt, endType, endData = now, EventRunCompleted, &RunCompletedData{DurationMs: dur}
	case RunFailed:
		d := &RunFailedData{FailedNodes: r.failed, DurationMs: dur}
		if r.firstErr != nil {
			var ne *NodeError
			errors.As(r.firstErr, &ne)
			d.Error, d.Code, d.NodeID = ne.Err.Error(), ne.Code, ne.NodeID
		} else {
			d.Error = causeText(r.ctx)
		}
		res.Err = r.firstErr
		r.rec.Error = d.Error
		endType, endData = EventRunFailed, d
	case RunCancelled:
		res.Err = context.Cause(r.ctx)
		r.rec.Error = causeText(r.ctx)
		endType, endData = EventRunCancelled, &RunCancelledData{Cause: r.rec.Error, DurationMs: dur}
	case RunInterrupted:
		endType, endData = EventRunInterrupted, &RunInterruptedData{Interrupts: r.interrupt}
	}
	// The run's terminal event and its end (record and lease) go in its
	// last batch, buffered in one critical section so that the committer
	// cannot take the event without the end: a client that acts on the
	// event (continues an interrupted run, reads the chat) finds the run
	// ended in the store.
	r.emu.Lock()
	r.emitLocked(endAt, endType, -1, 0, endData)
	res.LastSeq = r.seq
	if r.store != nil && r.storeErr == nil {
		r.rec.Status, r.rec.Interrupts, r.rec.LastSeq, r.rec.UpdatedAt = status, r.interrupt, res.LastSeq, time.Now()
		final := *r.rec
		r.wb.finish = &final
		if r.endWrites != nil {
			r.wb.writes = append(r.wb.writes, r.endWrites(res)...)
		}
		r.ending = true
		if r.lease != nil {
			l := *r.lease
			r.wb.release = &l
		}
		r.bufferedLocked()
	}
	r.flushLocked(true)
	storeErr := r.storeErr
	r.emu.Unlock()
	if storeErr != nil {
		return res, fmt.Errorf("runtime: run %s: store: %w", r.rec.ID, storeErr)
	}
	return res, nil
}

func causeText(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil {
		return c.Error()
	}
	return "cancelled"
}

// inputs builds node n's own copy of its routed inputs.
func (r *run) inputs(n int32) Inputs {
	pn := &r.p.nodes[n]
	size := int(r.live[n])
	if r.as.isEntry[n] {
		size++
	}
	if size == 0 {
		return nil
	}
	// Each node's inputs are carved from one array per run (each taken edge
	// feeds one node, once), capped so an executor's append copies.
	if len(r.ins) < size {
		r.ins = make([]Input, max(size, r.as.inputs))
	}
	// The array is fresh (zero), so the fields are set one by one: cheaper
	// than copying whole Input values in while the GC marks.
	in := Inputs(r.ins[:size:size])
	r.ins = r.ins[size:]
	k := 0
	if r.as.isEntry[n] {
		in[0].Value = cloneValue(r.rec.Input)
		k++
	}
	for _, ei := range pn.flowIn {
		if r.edgeLive[ei] != 0 {
			pe, x := &r.p.edges[ei], &in[k]
			x.EdgeID, x.Source, x.Handle, x.Value = pe.edge.ID, pe.edge.Source, pe.edge.TargetHandle, cloneValue(r.edgeVal[ei])
			k++
		}
	}
	return in
}

// emit assigns the next seq and buffers the event for the store, under
// one lock so the log and every reader see the same order; the sink gets
// it once it is committed (without a store: at once).
func (r *run) emit(t EventType, n int32, attempt int, data any) {
	r.emitAt(time.Time{}, t, n, attempt, data)
}

// emitAt is emit with the event's time given (a dispatcher step stamps
// the events it emits together once; zero means now).
func (r *run) emitAt(at time.Time, t EventType, n int32, attempt int, data any) {
	r.emu.Lock()
	r.emitLocked(at, t, n, attempt, data)
	r.emu.Unlock()
}

func (r *run) emitLocked(at time.Time, t EventType, n int32, attempt int, data any) {
	if r.storeErr != nil {
		return
	}
	if r.logged != nil {
		id := ""
		if n >= 0 {
			id = r.p.nodes[n].node.ID
		}
		if r.logged.has(t, id, attempt, data) {
			return
		}
	}
	r.seq++
	if at.IsZero() {
		at = time.Now()
	}
	if at.Before(r.lastAt) {
		at = r.lastAt
	}
	r.lastAt = at
	ev := Event{Seq: r.seq, RunID: r.rec.ID, ChatID: r.rec.ChatID, Type: t, Attempt: attempt, Time: at, Data: data}
	if n >= 0 {
		ev.NodeID = r.p.nodes[n].node.ID
	}
	if r.tap != nil {
		r.tap(ev)
	}
	if r.store == nil {
		if r.sink != nil {
			r.sink.Emit(ev)
		}
		return
	}
	if r.store.jsonEvents {
		r.sealLastLocked()
		ev.encodeData()
	}
	// Commit, then publish: the sink gets the event once the store holds
	// it (flushLocked, committer.commit).
	r.wb.evs = append(r.wb.evs, ev)
	r.bufferedLocked()
}

// mergeLocked folds an event into the run's last buffered one (under
// emu): only when that event is node n's, of attempt and type t, and
// merge accepts it. A buffered event is neither stored nor published yet:
// the committer takes the whole buffer under emu, so what is merged here
// is what the log and every subscriber will see. The merged event keeps
// its seq and time (its first part's emit).
func (r *run) mergeLocked(t EventType, n int32, attempt int, merge func(prev any) (any, bool)) bool {
	if r.storeErr != nil || r.store == nil || len(r.wb.evs) == 0 || n < 0 {
		return false
	}
	last := &r.wb.evs[len(r.wb.evs)-1]
	if last.Type != t || last.Attempt != attempt || last.NodeID != r.p.nodes[n].node.ID {
		return false
	}
	data, ok := merge(last.Data)
	if !ok {
		return false
	}
	// Encoded once no more can be merged into it (sealLastLocked), not
	// at every merge: a delta grown from a thousand chunks is encoded once.
	last.Data, last.data = data, nil
	return true
}

// sealLastLocked encodes the data of the run's last buffered event if a
// merge left it unencoded (under emu, for a JSONEventStore): called when
// the event can take no more merges — another event follows it, or the
// buffer is taken.
func (r *run) sealLastLocked() {
	if n := len(r.wb.evs); n > 0 && r.wb.evs[n-1].data == nil {
		r.wb.evs[n-1].encodeData()
	}
}

// terminal emits a node's terminal event and closes its FlowContext in the
// same critical section, so nothing the executor emits can follow it.
func (r *run) terminal(fc *FlowContext, t EventType, data any) {
	r.terminalAt(time.Time{}, fc, t, data)
}

func (r *run) terminalAt(at time.Time, fc *FlowContext, t EventType, data any) {
	r.emu.Lock()
	fc.closed = true
	r.emitLocked(at, t, fc.node, fc.attempt, data)
	r.emu.Unlock()
}

func (r *run) newCheckpoint(fc *FlowContext, s NodeStatus) *Checkpoint {
	pn := &r.p.nodes[fc.node]
	now := time.Now()
	cp := &Checkpoint{RunID: r.rec.ID, NodeID: pn.node.ID, Status: s, PlanVersion: r.p.PlanVersion,
		InputsHash: fc.inputsHash, Effect: pn.opts.Effect, Attempt: fc.attempt, AttemptID: fc.AttemptID(),
		Resumes: fc.resumes(), StartedAt: fc.begin, UpdatedAt: now, Token: r.rec.Token}
	if s == NodeRunning && fc.answers() != "" {
		cp.Interrupt = &InterruptInfo{ID: fc.answers(), NodeID: pn.node.ID, Reason: "answered"}
	}
	return cp
}

func (r *run) checkpoint(fc *FlowContext, s NodeStatus) {
	if r.store != nil {
		r.save(r.newCheckpoint(fc, s))
	}
}

// save buffers a checkpoint write; it reaches the store at the run's next
// flush point (see Durability).
func (r *run) save(cp *Checkpoint) {
	if r.dead.Load() {
		return
	}
	r.emu.Lock()
	if r.storeErr == nil {
		r.wb.cps = append(r.wb.cps, cp)
		r.bufferedLocked()
	}
	r.emu.Unlock()
}

// fail stops all writes of the run after a store error (a fenced write: a
// newer lease holder owns the run) and cancels it.
func (r *run) fail(err error) {
	r.emu.Lock()
	r.failLocked(err)
	r.emu.Unlock()
}

func (r *run) failLocked(err error) {
	if r.storeErr != nil {
		return
	}
	r.storeErr = err
	r.wb = writeBuf{}
	r.roomLocked()
	r.dead.Store(true)
	if errors.Is(err, ErrLeaseLost) {
		r.cancel(err)
	} else {
		r.cancel(fmt.Errorf("store failed: %w", err))
	}
}

// rankHeap is a min-heap of node indexes ordered by plan rank.
type rankHeap struct {
	rank []pnode
	h    []int32
}

func (q *rankHeap) len() int { return len(q.h) }

func (q *rankHeap) less(i, j int) bool { return q.rank[q.h[i]].rank < q.rank[q.h[j]].rank }

func (q *rankHeap) push(n int32) {
	q.h = append(q.h, n)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *rankHeap) pop() int32 {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	for i := 0; ; {
		l, s := 2*i+1, i
		if l < last && q.less(l, s) {
			s = l
		}
		if l+1 < last && q.less(l+1, s) {
			s = l + 1
		}
		if s == i {
			break
		}
		q.h[i], q.h[s] = q.h[s], q.h[i]
		i = s
	}
	return top
}
