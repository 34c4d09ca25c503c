package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures an Engine. Zero fields take the documented defaults.
type Config struct {
	// Registry holds the node types graphs may use. Required.
	Registry *Registry
	// Store persists run records, checkpoints and events. Nil: nothing is
	// persisted, nothing is replayed and Resume is unavailable.
	Store Store
	// MaxParallel bounds the nodes one run executes at once (default 16).
	MaxParallel int
	// GlobalMaxParallel bounds the nodes all runs of this engine execute at
	// once (default 1024).
	GlobalMaxParallel int
	// Limits bound graph size (see Limits for defaults).
	Limits Limits
	// PlanCacheSize is how many compiled plans are kept (default 256).
	PlanCacheSize int
	// CancelGrace is how long a stopping run waits for in-flight executors
	// that ignore their context before it abandons them as cancelled
	// (default 5s). A node with timeoutMs is abandoned at its deadline plus
	// at most this grace.
	CancelGrace time.Duration
	// MaxRunDuration bounds one run's wall-clock time; a run still going
	// then is cancelled with cause ErrRunTimeLimit (0: no bound). Time
	// spent interrupted (waiting for a human) does not count: the run has
	// ended, and its resume is a new run with a new clock.
	MaxRunDuration time.Duration
	// Logger receives run transitions at debug level (default: discard).
	Logger *slog.Logger
	// Owner names this process in run leases (default: a random id).
	Owner string
	// Durability is the default durability mode of runs (default sync).
	Durability Durability
	// BatchInterval and BatchSize drive the group committer of batched
	// runs: a flush every interval or every that many writes (defaults 2ms
	// and 512).
	BatchInterval time.Duration
	BatchSize     int
	// LeaseTTL is how long a run's lease lasts without renewal; the holder
	// renews it every third of that (default 15s). Only with a Leaser store.
	LeaseTTL time.Duration
	// StoreObserver, when set, is called after every store call the engine
	// makes, with the call's name, duration and error (see StoreObserver).
	// Default: none, and the engine calls the store directly.
	StoreObserver StoreObserver
	// CommitObserver, when set, is called once for every group commit of
	// the sync and batched modes' committers, after its events were handed
	// to the runs' sinks, with what it carried and how long each of its
	// stages took (GroupCommit). It is called on the committer's
	// publishing path, in commit order: it must return quickly. Default:
	// none.
	CommitObserver func(GroupCommit)
}

// Engine compiles graphs and executes runs. It is safe for concurrent use.
type Engine struct {
	reg        *Registry
	raw        Store      // as configured: what Store returns
	store      *storeView // what the kernel calls (nil: no store)
	lim        Limits
	conds      *conditions
	plans      planCache
	sem        chan struct{}
	maxPar     int
	grace      time.Duration
	maxRun     time.Duration
	log        *slog.Logger
	idPrefix   string
	idSeq      atomic.Uint64
	owner      string
	leaseTTL   time.Duration
	recovering sync.WaitGroup
	abandoned  atomic.Int64 // executor calls still running after being given up

	durability Durability
	batchEvery time.Duration
	batchSize  int
	cmu        sync.Mutex
	commits    map[Durability]*committer
	// publishGroup wraps each group commit's publishing
	// (SetPublishGroup; nil: none).
	publishGroup atomic.Pointer[func(publish func())]
	// observeCommit is Config.CommitObserver (nil: none).
	observeCommit func(GroupCommit)
	lag           commitLag     // CommitLag
	quit          chan struct{} // closed by Close
	closeOnce     sync.Once
	renewals      leaseRenewals // the leases of the engine's runs

	// held counts, per run id, the reasons this engine holds the run
	// (starting, executing, claimed by a recovery pass): recovery never
	// takes back a run this engine holds.
	hmu  sync.Mutex
	held map[string]int
}

// NewEngine returns an engine for cfg.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("runtime: Config.Registry is required")
	}
	lim := cfg.Limits.withDefaults()
	conds, err := newConditions(lim.MaxConditionCost)
	if err != nil {
		return nil, fmt.Errorf("runtime: condition environment: %w", err)
	}
	e := &Engine{reg: cfg.Registry, raw: cfg.Store, lim: lim, conds: conds,
		maxPar: cfg.MaxParallel, grace: cfg.CancelGrace, maxRun: cfg.MaxRunDuration, log: cfg.Logger, quit: make(chan struct{}), held: map[string]int{}}
	e.renewals.e = e
	// The store's capabilities are probed here, once; the kernel uses
	// e.store's fields and never type-asserts the store again.
	e.store = newStoreView(cfg.Store, cfg.StoreObserver)
	if e.maxPar <= 0 {
		e.maxPar = 16
	}
	g := cfg.GlobalMaxParallel
	if g <= 0 {
		g = 1024
	}
	e.sem = make(chan struct{}, g)
	if e.grace <= 0 {
		e.grace = 5 * time.Second
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	size := cfg.PlanCacheSize
	if size <= 0 {
		size = 256
	}
	e.plans.init(size)
	var b [6]byte
	_, _ = rand.Read(b[:])
	e.idPrefix = "r_" + hex.EncodeToString(b[:])
	e.owner = cfg.Owner
	if e.owner == "" {
		e.owner = "engine-" + hex.EncodeToString(b[:])
	}
	e.durability, e.batchEvery, e.batchSize = cfg.Durability, cfg.BatchInterval, cfg.BatchSize
	e.observeCommit = cfg.CommitObserver
	switch e.durability {
	case "":
		e.durability = DurabilitySync
	case DurabilitySync, DurabilityBatched, DurabilityExit:
	default:
		return nil, fmt.Errorf("runtime: unknown durability %q", e.durability)
	}
	if e.batchEvery <= 0 {
		e.batchEvery = 2 * time.Millisecond
	}
	if e.batchSize <= 0 {
		e.batchSize = 512
	}
	e.leaseTTL = cfg.LeaseTTL
	if e.leaseTTL <= 0 {
		e.leaseTTL = 15 * time.Second
	}
	return e, nil
}

// Registry returns the engine's node type registry.
func (e *Engine) Registry() *Registry { return e.reg }

// Close stops the engine's background work (the group committers,
// flushing what they hold, and the lease renewals). Call it after every
// run has ended.
func (e *Engine) Close() {
	e.closeOnce.Do(func() { close(e.quit) })
	e.renewals.wait()
	e.cmu.Lock()
	commits := make([]*committer, 0, len(e.commits))
	for _, c := range e.commits {
		commits = append(commits, c)
	}
	e.cmu.Unlock()
	for _, c := range commits {
		c.wg.Wait()
	}
}

// Owner is the name this engine's leases carry.
func (e *Engine) Owner() string { return e.owner }

// Store returns the engine's store as configured (nil when none): calls
// made on it are not reported to the StoreObserver, and it has its own
// capabilities, for callers to find by type assertion.
func (e *Engine) Store() Store { return e.raw }

// Capabilities names the optional store interfaces (Leaser, BulkClaimer,
// Inspector, BatchWriter, BatchFinisher, RunStarter, EffectLedger,
// OwnerLister, LeaseRenewer) the engine found on its store when it was
// made: the ones it uses, timed when a StoreObserver is set. Empty without
// a store.
func (e *Engine) Capabilities() []string { return e.store.names() }

// Validate returns every diagnostic of g (errors and warnings) without
// caching anything.
func (e *Engine) Validate(g *Graph) Diagnostics {
	_, ds := compile(g, e.reg, e.lim, e.conds)
	if ds == nil {
		ds = Diagnostics{}
	}
	return ds
}

// Compile validates g and returns its plan, from the cache when a plan for
// (g.ID, g.PlanVersion) exists. Graphs without an id are never cached. A
// graph with errors returns a *GraphError.
func (e *Engine) Compile(g *Graph) (*Plan, error) {
	if g != nil {
		if p := e.CachedPlan(g.ID, g.PlanVersion); p != nil {
			return p, nil
		}
	}
	p, ds := compile(g, e.reg, e.lim, e.conds)
	if p == nil {
		return nil, &GraphError{Diagnostics: ds}
	}
	if g.ID != "" {
		e.plans.put(p)
	}
	return p, nil
}

// CachedPlan returns the plan the engine keeps for a graph's id and
// planVersion, or nil. With it, a caller that has read a saved graph's
// id and version finds the graph it was compiled from (Plan.Graph)
// without decoding the graph's body again.
func (e *Engine) CachedPlan(graphID string, planVersion int64) *Plan {
	if graphID == "" {
		return nil
	}
	return e.plans.get(graphID, planVersion)
}

func (e *Engine) newRunID() string {
	var b [32]byte
	return string(strconv.AppendUint(append(b[:0], e.idPrefix...), e.idSeq.Add(1), 36))
}

// planCache keeps the most recently added plans, evicting the oldest.
type planCache struct {
	mu    sync.Mutex
	max   int
	m     map[planKey]*Plan
	order []planKey
}

type planKey struct {
	id string
	v  int64
}

func (c *planCache) init(max int) { c.max, c.m = max, make(map[planKey]*Plan, max) }

func (c *planCache) get(id string, v int64) *Plan {
	c.mu.Lock()
	p := c.m[planKey{id, v}]
	c.mu.Unlock()
	return p
}

func (c *planCache) put(p *Plan) {
	k := planKey{p.GraphID, p.PlanVersion}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		c.m[k] = p
		return
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[k] = p
	c.order = append(c.order, k)
}

// activeSet is the part of a plan a set of entry nodes reaches by flow
// edges. It is computed once per (plan, entries) and shared by runs.
type activeSet struct {
	entries  []int32
	isEntry  []bool
	isActive []bool
	nodes    []int32 // active nodes in rank order
	inCount  []int32 // per node: active incoming flow edges
	inputs   int     // entries plus active incoming flow edges: a run's Input count at most
	ids      []string
	entryIDs []string
	err      error
}

// activeCache keeps the active set of the plan's default entries; those
// of other entries are memoized with the plan (Plan.Memo, activeKey).
type activeCache struct {
	defaults atomic.Pointer[activeSet]
}

// activeKey keys a plan's active set by its entries (Plan.Memo).
type activeKey string

func (p *Plan) active(entryIDs []string) *activeSet {
	return p.Memo(activeKey(EntriesKey(entryIDs)), func() any { return p.computeActive(entryIDs) }).(*activeSet)
}

// EntriesKey names a list of entry node ids by a string no other list
// has (each id after its length): a key for what is derived from a plan
// and a run's entries (Plan.Memo).
func EntriesKey(entryIDs []string) string {
	var b []byte
	for _, id := range entryIDs {
		b = append(strconv.AppendInt(b, int64(len(id)), 10), ':')
		b = append(b, id...)
	}
	return string(b)
}

func (p *Plan) computeActive(entryIDs []string) *activeSet {
	n := len(p.nodes)
	as := &activeSet{isEntry: make([]bool, n), isActive: make([]bool, n), inCount: make([]int32, n)}
	var stack []int32
	for _, id := range entryIDs {
		i, ok := p.index[id]
		if !ok {
			as.err = fmt.Errorf("%w: %q", ErrUnknownEntry, id)
			return as
		}
		if as.isEntry[i] {
			continue
		}
		as.isEntry[i] = true
		as.entries = append(as.entries, i)
		as.entryIDs = append(as.entryIDs, id)
		as.isActive[i] = true
		stack = append(stack, i)
	}
	if len(as.entries) == 0 {
		as.err = fmt.Errorf("%w: a run needs at least one entry node", ErrUnknownEntry)
		return as
	}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, ei := range p.nodes[u].flowOut {
			v := p.edges[ei].dst
			as.inCount[v]++
			if !as.isActive[v] {
				as.isActive[v] = true
				stack = append(stack, v)
			}
		}
	}
	as.inputs = len(as.entries)
	for _, i := range p.byRank {
		if as.isActive[i] {
			as.nodes = append(as.nodes, i)
			as.ids = append(as.ids, p.nodes[i].node.ID)
			as.inputs += int(as.inCount[i])
		}
	}
	// A run may not touch a part with warnings: check the active nodes and
	// every link producer they (transitively) use.
	seen := make([]bool, n)
	stack = append(stack[:0], as.nodes...)
	for _, i := range as.nodes {
		seen[i] = true
	}
	bad := map[int32]bool{}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p.nodes[u].problem {
			bad[u] = true
		}
		for _, ei := range p.nodes[u].linkIn {
			if s := p.edges[ei].src; !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
	}
	if len(bad) > 0 {
		var ds Diagnostics
		for _, d := range p.diags {
			if i, ok := p.index[d.ID]; ok && bad[i] {
				d.Severity = SeverityError
				ds = append(ds, d)
				continue
			}
			for _, id := range d.NodeIDs {
				if i, ok := p.index[id]; ok && bad[i] {
					d.Severity = SeverityError
					ds = append(ds, d)
					break
				}
			}
		}
		as.err = &GraphError{Diagnostics: ds}
	}
	return as
}

// RunRequest starts a run.
type RunRequest struct {
	// RunID names the run; generated when empty.
	RunID  string
	ChatID string
	// Plan or Graph (compiled through the cache) to run.
	Plan  *Plan
	Graph *Graph
	// EntryNodeIDs start the run; the run executes only what they reach by
	// flow edges. Empty: every node of an Entry type.
	EntryNodeIDs []string
	// Input reaches every entry node as its first Input.
	Input any
	// Kind and Attrs label the run (run_started carries them).
	Kind    string
	Attrs   map[string]any
	Options RunOptions
	// Services is handed to executors untouched (FlowContext.Services).
	Services any
	// Sink receives the run's events in order (optional).
	Sink EventSink
	// Writes and EndWrites join the application's own writes to the run's
	// transactions (see Joined).
	Joined
}

// ResumeRequest continues a finished (interrupted, cancelled or failed) run
// in a new run: succeeded nodes whose inputs are unchanged are replayed
// from their checkpoints, interrupted nodes get their resume values.
type ResumeRequest struct {
	// RunID is the run to continue.
	RunID string
	// NewRunID names the continuation; generated when empty.
	NewRunID string
	// Plan or Graph: the graph as it is now. A changed planVersion reruns
	// nodes (except succeeded write/external/human ones).
	Plan  *Plan
	Graph *Graph
	// InterruptID and Value answer one interrupt; InterruptID may be empty
	// when exactly one is pending. Values answers several by id.
	InterruptID string
	Value       any
	Values      map[string]any
	// AtSeq, when set, forks the run from one of its checkpoints (time
	// travel): the new run reuses the outputs of the nodes that had
	// succeeded by event seq AtSeq and executes everything after. Any
	// finished run may be forked; the original is untouched.
	AtSeq int64
	// Kind labels the continuation (default: the parent run's kind).
	Kind string
	// Attrs are merged over the parent run's.
	Attrs    map[string]any
	Services any
	Sink     EventSink
	Joined
}

// Joined are an application's own writes committed in the run's own
// transactions, so that its records and the run's never disagree after a
// crash (a chat's messages and the run that answers them, say). It needs
// a store whose WriteBatches applies them (a BatchFinisher that knows
// their type: Engine.JoinsWrites); a request that has them is refused
// otherwise. Each write is a value of a type the store defines (for
// example sqlite.Write, postgres.Write); the kernel only carries them.
type Joined struct {
	// Writes are committed in the same transaction as the run's creation
	// (in every durability mode) and its run_started event. When the store
	// refuses them (one fails), nothing of the run is written and it ends
	// with the store's error before run_started is published.
	Writes []any
	// EndWrites, when set, is called once the run's outcome is known,
	// before its end is written; the writes it returns are committed in
	// the same transaction as the run's terminal event and final record.
	// It is not called when the store failed the run before its end.
	EndWrites func(*RunResult) []any
	// Tap, when set, is handed every event the run emits, as it emits it:
	// in seq order, before the store has it, with its data as emitted (a
	// part a node folded into its last event, EmitOrMerge, comes as an
	// event of its own under that event's seq). It is called under the
	// run's emit lock, so it must not block; EndWrites may use what it
	// gathered, since every event of the run, the terminal one included,
	// has been handed to it before EndWrites is called. A recovered run
	// (RecoverRequest) hands it first the events its log already holds,
	// as the store returns them, which it does not emit again.
	Tap func(Event)
}

func (j Joined) empty() bool { return len(j.Writes) == 0 && j.EndWrites == nil }

// errCannotJoin refuses a request with joined writes on an engine whose
// store cannot commit them (Engine.JoinsWrites).
var errCannotJoin = errors.New("runtime: the engine's store cannot commit an application's writes with a run's (Joined)")

// RunResult is how a run ended.
type RunResult struct {
	RunID  string
	Status RunStatus
	// Err is the first unhandled node failure of a failed run, or the cause
	// of a cancelled one.
	Err        error
	Interrupts []InterruptInfo
	LastSeq    int64
	plan       *Plan
	outputs    []any
	states     []NodeStatus
}

// Output returns the output of node id if it succeeded in this run.
func (r *RunResult) Output(id string) (any, bool) {
	i, ok := r.plan.index[id]
	if !ok || r.states[i] != NodeSucceeded {
		return nil, false
	}
	return r.outputs[i], true
}

// NodeStatus returns the final status of node id ("" when not active).
func (r *RunResult) NodeStatus(id string) NodeStatus {
	if i, ok := r.plan.index[id]; ok {
		return r.states[i]
	}
	return ""
}

// Outputs returns the outputs of every succeeded node, keyed by node id.
func (r *RunResult) Outputs() map[string]any {
	m := map[string]any{}
	for i, s := range r.states {
		if s == NodeSucceeded {
			m[r.plan.nodes[i].node.ID] = r.outputs[i]
		}
	}
	return m
}

// NodeStatuses returns the status of every active node, keyed by node id.
func (r *RunResult) NodeStatuses() map[string]NodeStatus {
	m := map[string]NodeStatus{}
	for i, s := range r.states {
		if s != "" {
			m[r.plan.nodes[i].node.ID] = s
		}
	}
	return m
}

// Invoke runs a graph to the end (completed, failed, cancelled or
// interrupted). The error is non-nil only when the run could not start
// (invalid graph or entries, store failure) or its store failed mid-run;
// node failures are in the result.
func (e *Engine) Invoke(ctx context.Context, req RunRequest) (*RunResult, error) {
	r, err := e.newRun(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.execute()
}

// JoinsWrites reports whether runs may carry Joined writes: the engine's
// store commits them with the run's own writes.
func (e *Engine) JoinsWrites() bool { return e.store != nil && e.store.finisher != nil }

// Resume continues a finished run in a new run (see ResumeRequest).
func (e *Engine) Resume(ctx context.Context, req ResumeRequest) (*RunResult, error) {
	r, err := e.resumeRun(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.execute()
}

// Stream is a run in progress whose events arrive on a channel.
type Stream struct {
	events chan Event
	q      *eventQueue
	done   chan struct{}
	res    *RunResult
	err    error
}

// Events delivers the run's events in seq order and is closed after the
// terminal event. Events wait in memory until read, so a slow consumer
// holds neither its run nor any other.
func (s *Stream) Events() <-chan Event { return s.events }

// Wait drains any events not read yet and returns the run's result.
func (s *Stream) Wait() (*RunResult, error) {
	for range s.events {
	}
	<-s.done
	return s.res, s.err
}

// Stream starts a run and returns its live event stream. Start-up errors
// (invalid graph, unknown entries) are returned at once.
func (e *Engine) Stream(ctx context.Context, req RunRequest) (*Stream, error) {
	s := newStream()
	req.Sink = teeSink(req.Sink, s.q)
	r, err := e.newRun(ctx, req)
	if err != nil {
		return nil, err
	}
	go s.run(r)
	return s, nil
}

// StreamResume is Resume with a live event stream.
func (e *Engine) StreamResume(ctx context.Context, req ResumeRequest) (*Stream, error) {
	s := newStream()
	req.Sink = teeSink(req.Sink, s.q)
	r, err := e.resumeRun(ctx, req)
	if err != nil {
		return nil, err
	}
	go s.run(r)
	return s, nil
}

func newStream() *Stream {
	return &Stream{events: make(chan Event, 64), q: &eventQueue{more: make(chan struct{}, 1)}, done: make(chan struct{})}
}

func (s *Stream) run(r *run) {
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		s.q.forward(s.events)
	}()
	s.res, s.err = r.execute()
	s.q.close()
	<-forwarded
	close(s.events)
	close(s.done)
}

// eventQueue decouples a run's sink (called by its committer, which must
// never wait for a consumer) from a Stream's channel.
type eventQueue struct {
	mu     sync.Mutex
	evs    []Event
	closed bool
	more   chan struct{} // cap 1
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.evs = append(q.evs, e)
	q.mu.Unlock()
	q.signal()
}

func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *eventQueue) signal() {
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// forward sends every pushed event to ch until the queue is closed and empty.
func (q *eventQueue) forward(ch chan<- Event) {
	for range q.more {
		q.mu.Lock()
		evs, closed := q.evs, q.closed
		q.evs = nil
		q.mu.Unlock()
		for _, e := range evs {
			ch <- e
		}
		if closed {
			return
		}
	}
}

// teeSink gives a stream's events to the caller's sink, if any, and to
// the stream; a caller's StartSink still hears of the run's start.
func teeSink(user EventSink, q *eventQueue) EventSink {
	if user == nil {
		return SinkFunc(q.push)
	}
	t := SinkFunc(func(e Event) {
		user.Emit(e)
		q.push(e)
	})
	if s, ok := user.(StartSink); ok {
		return StartSinkFunc{SinkFunc: t, OnStart: s.Started}
	}
	return t
}

// CancelInterrupted ends the human wait of an interrupted run: its record
// becomes cancelled with the cause and its pending interrupts are void, so
// a later resume value for them is refused (ErrInterruptNotFound); a plain
// continuation may still run the graph again over its replayed work. The
// run's log is not touched: it already ended with run_interrupted. A run
// that is not interrupted gives ErrRunNotResumable.
func (e *Engine) CancelInterrupted(ctx context.Context, runID string, cause error) (*RunRecord, error) {
	if e.store == nil {
		return nil, fmt.Errorf("%w: the engine has no store", ErrRunNotResumable)
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	if rec.Status != RunInterrupted {
		return nil, fmt.Errorf("%w: run %s is %s, not waiting", ErrRunNotResumable, rec.ID, rec.Status)
	}
	rec.Status, rec.Interrupts, rec.UpdatedAt = RunCancelled, nil, time.Now()
	rec.Error = "cancelled while waiting"
	if cause != nil {
		rec.Error = cause.Error()
	}
	if err := e.store.UpdateRun(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// hold notes one more reason this engine holds run id. Only recovery asks,
// and it needs a store with leases: without one there is nothing to note.
func (e *Engine) hold(id string) {
	if e.store == nil || e.store.leaser == nil {
		return
	}
	e.hmu.Lock()
	e.held[id]++
	e.hmu.Unlock()
}

// unhold drops one reason.
func (e *Engine) unhold(id string) {
	if e.store == nil || e.store.leaser == nil {
		return
	}
	e.hmu.Lock()
	if e.held[id]--; e.held[id] <= 0 {
		delete(e.held, id)
	}
	e.hmu.Unlock()
}

func (e *Engine) holds(id string) bool {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	return e.held[id] > 0
}
