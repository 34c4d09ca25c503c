package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Durability says when a run's transitions reach the store.
type Durability string

// Durability modes. The empty value means the engine's default (sync).
const (
	// DurabilitySync commits every transition at once: the committer
	// starts a commit as soon as a run has buffered a write (the writes of
	// all runs meanwhile share it). Before a node with a write, external
	// or human effect starts, the run waits until everything before it —
	// its own running checkpoint included — is durable, so a succeeded
	// effect is durable before the next effect executes. A pure or read
	// node starts without waiting for its commit: it changes nothing
	// outside the run, and its events reach subscribers only once
	// committed, so a crash can only make it run again unseen. A run with
	// a BatchFinisher store is created in its first commit (with
	// run_started).
	DurabilitySync Durability = "sync"
	// DurabilityBatched hands writes to a group committer that flushes the
	// transitions of all runs together every few milliseconds (or every N
	// writes). A run waits for its flush only before it starts a node with
	// a write, external or human effect, and at its end. A crash loses up
	// to one flush interval of progress, which recovery re-executes.
	DurabilityBatched Durability = "batched"
	// DurabilityExit persists a run's start (run_started) and its end
	// (completed, failed, cancelled or interrupted), nothing between.
	// Cheapest; a crash loses the whole run's progress, and recovery
	// starts its work over. Subscribers get run_started at once and the
	// rest when the run ends (commit, then publish).
	DurabilityExit Durability = "exit"
)

// WriteBatch is one run's buffered writes, applied in order: checkpoints,
// then events (whose seqs continue the log).
type WriteBatch struct {
	RunID       string
	Token       int64
	Checkpoints []*Checkpoint
	Events      []Event
	// Finish, when set, then replaces the run record as UpdateRun does
	// (fenced by its Token), and Release gives up the run's lease: the end
	// of a run in the same transaction as its last writes. Only a
	// BatchFinisher is handed them; for other stores the kernel makes the
	// two calls itself.
	Finish  *RunRecord
	Release *Lease
	// Create, when set, first inserts the run record with Lease as its
	// first lease (Lease.Token = Create.Token): a batched run's creation
	// joins the group commit. As CreateRun, it replaces a pending record
	// and is ErrRunExists over any other. Only a BatchFinisher is handed it.
	Create *RunRecord
	Lease  *Lease
	// Writes are an application's own writes (Joined), applied last, in
	// the same transaction. Each is a value of a type the store defines;
	// a store fails the call on a type it does not know. Only a
	// BatchFinisher is handed them.
	Writes []any
}

// BatchFinisher is a BatchWriter whose WriteBatches also applies Create
// (with its Lease), Finish, Release and Writes, in the same transaction
// as the batch's other writes.
type BatchFinisher interface {
	BatchWriter
	FinishesBatches()
}

// RunStarter is implemented by stores that create a run record and claim
// its lease in one write (instead of CreateRun then ClaimRun). Like
// CreateRun, CreateClaimed replaces a pending record (a reservation) and
// fails with ErrRunExists over any other.
type RunStarter interface {
	CreateClaimed(ctx context.Context, r *RunRecord, owner string, ttl time.Duration) (Lease, error)
}

// BatchWriter is implemented by stores that apply several runs' writes in
// one transaction (one fsync). Each batch is fenced by its token; an error
// wrapping ErrFenced or ErrSeqConflict rejects the whole call.
type BatchWriter interface {
	WriteBatches(ctx context.Context, batches []WriteBatch) error
}

// writeBuf holds a run's writes not yet handed to the store (under run.emu).
type writeBuf struct {
	cps     []*Checkpoint
	evs     []Event
	finish  *RunRecord
	release *Lease
	create  *RunRecord
	lease   *Lease
	writes  []any
}

func (b *writeBuf) empty() bool {
	return len(b.cps) == 0 && len(b.evs) == 0 && b.finish == nil && b.release == nil && b.create == nil && len(b.writes) == 0
}

// maxBuffered bounds a run's buffer in sync and batched modes (a node
// streaming many deltas waits for its commits as it goes).
const maxBuffered = 256

// latestPerNode keeps, for each node, only its last checkpoint in the
// buffer (at the position of its first one, so first-save order holds):
// the store keeps only the latest anyway.
func latestPerNode(cps []*Checkpoint) []*Checkpoint {
	if len(cps) < 2 {
		return cps
	}
	out := make([]*Checkpoint, 0, len(cps))
	if len(cps) <= 16 {
		// A flush usually holds a handful: a scan beats a map.
	next:
		for _, cp := range cps {
			for i := range out {
				if out[i].NodeID == cp.NodeID {
					out[i] = cp
					continue next
				}
			}
			out = append(out, cp)
		}
		return out
	}
	pos := make(map[string]int, len(cps))
	for _, cp := range cps {
		if i, ok := pos[cp.NodeID]; ok {
			out[i] = cp
			continue
		}
		pos[cp.NodeID] = len(out)
		out = append(out, cp)
	}
	return out
}

// applyBatches writes batches to st: in one call when it is a BatchWriter,
// else write by write. No batches, no call (a commit whose runs were all
// refused before it took their buffers opens no empty transaction).
func applyBatches(ctx context.Context, st *storeView, batches []WriteBatch) error {
	if len(batches) == 0 {
		return nil
	}
	if st.finisher != nil {
		return st.finisher.WriteBatches(ctx, batches)
	}
	if st.batcher != nil {
		plain := make([]WriteBatch, len(batches))
		for i, b := range batches {
			b.Finish, b.Release = nil, nil
			plain[i] = b
		}
		if err := st.batcher.WriteBatches(ctx, plain); err != nil {
			return err
		}
	} else {
		for _, b := range batches {
			for _, cp := range b.Checkpoints {
				if err := st.SaveCheckpoint(ctx, cp); err != nil {
					return err
				}
			}
			if len(b.Events) > 0 {
				if err := st.AppendEvents(ctx, b.RunID, b.Token, b.Events); err != nil {
					return err
				}
			}
		}
	}
	for _, b := range batches {
		if b.Finish != nil {
			if err := st.UpdateRun(ctx, b.Finish); err != nil {
				return err
			}
		}
		if st.leaser != nil && b.Release != nil {
			_ = st.leaser.ReleaseLease(ctx, *b.Release) // an expired lease needs no release
		}
	}
	return nil
}

// takeLocked hands over the run's buffer as one batch (under emu) and
// wakes an emitter waiting for room.
func (r *run) takeLocked() WriteBatch {
	if r.store.jsonEvents {
		r.sealLastLocked()
	}
	b := WriteBatch{RunID: r.rec.ID, Token: r.rec.Token, Checkpoints: latestPerNode(r.wb.cps), Events: r.wb.evs,
		Finish: r.wb.finish, Release: r.wb.release, Create: r.wb.create, Lease: r.wb.lease, Writes: r.wb.writes}
	r.wb = writeBuf{}
	r.roomLocked()
	return b
}

// roomLocked wakes an emitter waiting for the buffer to be taken.
func (r *run) roomLocked() {
	if r.twait != nil {
		close(r.twait)
		r.twait = nil
	}
}

// bufferedLocked notes one more buffered write (under emu): a sync or
// batched run is put on its committer's list, and a run whose buffer is
// full waits until its committer takes it (emu is released meanwhile),
// so a fast emitter never outruns the store by more than two buffers. A run
// without a committer flushes when its buffer is full (never in exit
// mode).
func (r *run) bufferedLocked() {
	r.wgen++
	if r.cm != nil {
		if r.held && len(r.wb.evs)+len(r.wb.cps) >= maxBuffered {
			r.held = false
		}
		if !r.queued && !r.held {
			r.queued = true
			r.cm.add(r)
		}
		r.cm.grow()
		for len(r.wb.evs)+len(r.wb.cps) >= maxBuffered && r.storeErr == nil {
			// Wait until the committer takes the buffer (not until it
			// commits it): the run fills the next one meanwhile.
			r.cm.hurryUp()
			if r.twait == nil {
				r.twait = make(chan struct{})
			}
			ch := r.twait
			r.emu.Unlock()
			<-ch
			r.emu.Lock()
		}
		return
	}
	if r.durability != DurabilityExit && len(r.wb.evs)+len(r.wb.cps) >= maxBuffered {
		r.flushLocked(false)
	}
}

// release lists the writes the run's first step held back (see run.held).
// Only the dispatcher calls it; after the first time it costs nothing.
func (r *run) release() {
	if r.released {
		return
	}
	r.released = true
	r.emu.Lock()
	r.held = false
	if r.storeErr == nil && !r.wb.empty() && !r.queued {
		r.queued = true
		r.cm.add(r)
	}
	r.emu.Unlock()
}

// publish hands committed events to the run's sink, in seq order. Only
// the run's committer (or, without one, the run itself under emu) calls
// it, so the sink gets one call at a time.
func (r *run) publish(evs []Event) {
	if r.sink == nil {
		return
	}
	for _, ev := range evs {
		r.sink.Emit(ev)
	}
}

// flushLocked makes the run's buffered writes durable: it writes them now
// and publishes their events (a run without a committer: exit mode), or,
// for a sync or batched run, waits (with wait) until its committer has
// committed and published them. The caller holds emu; it is released
// while waiting and taken again.
func (r *run) flushLocked(wait bool) {
	if r.store == nil {
		return
	}
	if r.cm != nil {
		if wait {
			r.held = false
		}
		if r.storeErr == nil && !r.wb.empty() && !r.queued && !r.held {
			r.bufferedLocked()
		}
		if wait {
			// Even after a store failure: a commit in flight publishes
			// before the run may end.
			r.awaitLocked(r.wgen)
		}
		return
	}
	if r.storeErr != nil || r.wb.empty() {
		return
	}
	b := r.takeLocked()
	if err := applyBatches(r.bg, r.store, []WriteBatch{b}); err != nil {
		r.failLocked(err)
		return
	}
	if b.Create != nil {
		r.bornInBatch = false // created: its lease may be renewed (no committer counts cgen)
	}
	r.publish(b.Events)
}

// awaitLocked waits (releasing emu meanwhile) until the committer has
// committed and published (or refused) the run's writes up to gen. Every
// buffered write lists the run, so the committer always gets there.
func (r *run) awaitLocked(gen uint64) {
	for r.cgen < gen {
		if r.cwait == nil {
			r.cwait = make(chan struct{})
		}
		ch := r.cwait
		r.emu.Unlock()
		<-ch
		r.emu.Lock()
	}
}

// committed records that the run's writes up to gen are committed and
// published (or refused), waking whoever waits for them.
func (r *run) committed(gen uint64) {
	r.emu.Lock()
	if gen > r.cgen {
		r.cgen = gen
	}
	ch := r.cwait
	r.cwait = nil
	r.emu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// flush is flushLocked for callers that do not hold emu.
func (r *run) flush(wait bool) {
	r.emu.Lock()
	r.flushLocked(wait)
	r.emu.Unlock()
}

// beforeExecute makes the run's transitions durable as its mode requires
// before an executor attempt starts: in sync and batched mode a node with
// a write, external or human effect waits until everything buffered
// before it is committed; a pure or read node only hands its writes to
// the committer (the modes differ in when the committer commits).
func (r *run) beforeExecute(pn *pnode) {
	if r.store == nil {
		return
	}
	switch r.durability {
	case DurabilitySync, DurabilityBatched:
		r.flush(pn.opts.Effect.Sticky())
	}
}

// committer commits the buffered writes of sync or batched runs and then
// publishes their events: the log is the source of truth, and a live
// subscriber only ever sees what the store holds (commit-then-publish).
// Runs put themselves on its list when they buffer a write; the loop
// takes every listed run's buffer and applies them all in one
// WriteBatches call (one transaction, one fsync), so the token deltas of
// all streaming runs share a commit. A store that syncs after it commits
// hands back the wait for the sync (DeferSync): the publishing waits for
// it on a goroutine of its own (after), and the sync loop gathers the
// next group while the disk syncs the last and commits it once that sync
// has returned (gather), as the publisher publishes. The sync committer
// otherwise commits as soon as something is listed (a commit in progress
// gathers the next group); the batched one waits one interval (or until
// maxSize writes) first.
// Its goroutine runs while runs are listed and waits for the next for
// up to committerIdle before it exits: a goroutine started afresh for
// each commit of a lightly loaded server would grow its stack anew in
// SQLite's deep calls every time.
type committer struct {
	mode    Durability
	observe func(GroupCommit) // Config.CommitObserver (nil: none)
	lag     *commitLag        // the engine's CommitLag
	st      *storeView
	group   *atomic.Pointer[func(publish func())] // the engine's SetPublishGroup
	every   time.Duration                         // 0: commit at once
	maxSize int64

	mu      sync.Mutex
	dirty   []*run
	running bool         // the loop goroutine is up
	size    atomic.Int64 // writes buffered since the last take

	// unpublished are the commits handed to after and not yet published,
	// in commit order; publishing says the publisher goroutine is up (it
	// empties the list before it exits).
	pmu         sync.Mutex
	unpublished []unpublished
	publishing  bool

	hurry  chan struct{} // maxSize (batched) or gatherMax (sync) writes are waiting (cap 1)
	synced chan struct{} // no commit waits for its sync any more (cap 1)
	// unsynced counts the commits handed to the publisher whose sync has
	// not returned (gather).
	unsynced atomic.Int64
	wake     chan struct{} // the list is no longer empty (cap 1)
	quit     chan struct{} // closed by Engine.Close: stop waiting out intervals
	wg       sync.WaitGroup
}

// SetPublishGroup makes fn wrap the publishing of every group commit:
// fn must call publish once, which hands the commit's events, of all its
// runs, to the runs' sinks. A sink shared by many runs can then deliver
// the events of one commit together (the transport writes a WebSocket
// connection's frames of a commit with one system call, not one per
// frame). Events published outside a group commit (exit mode, a run
// without a store) are not wrapped. Safe for concurrent use; nil removes
// it.
func (e *Engine) SetPublishGroup(fn func(publish func())) {
	if fn == nil {
		e.publishGroup.Store(nil)
		return
	}
	e.publishGroup.Store(&fn)
}

// committerFor returns the engine's committer for a durability mode (nil
// for exit mode: the run writes at its own flush points).
func (e *Engine) committerFor(d Durability) *committer {
	if d == DurabilityExit {
		return nil
	}
	e.cmu.Lock()
	defer e.cmu.Unlock()
	c := e.commits[d]
	if c == nil {
		c = &committer{st: e.store, group: &e.publishGroup, maxSize: int64(e.batchSize), hurry: make(chan struct{}, 1),
			wake: make(chan struct{}, 1), quit: e.quit, synced: make(chan struct{}, 1), mode: d, observe: e.observeCommit, lag: &e.lag}
		if d == DurabilityBatched {
			c.every = e.batchEvery
		}
		if e.commits == nil {
			e.commits = map[Durability]*committer{}
		}
		e.commits[d] = c
	}
	return c
}

// add lists r (called under r.emu, once until its buffer is taken) and
// starts the loop if it is not running.
func (c *committer) add(r *run) {
	c.mu.Lock()
	c.dirty = append(c.dirty, r)
	switch {
	case !c.running:
		c.running = true
		c.wg.Add(1)
		go c.loop()
	case len(c.dirty) == 1:
		// The loop may be waiting for the list.
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
}

// committerIdle is how long the committer's goroutine waits for a run to
// be listed before it exits.
const committerIdle = time.Second

// grow counts one buffered write; at maxSize the batched loop commits
// without waiting out its interval, at gatherMax the sync loop without
// waiting for the last commit's sync.
func (c *committer) grow() {
	if n := c.size.Add(1); n == c.maxSize || (c.every == 0 && n == gatherMax) {
		c.hurryUp()
	}
}

// hurryUp makes the batched loop commit without waiting out its interval.
func (c *committer) hurryUp() {
	select {
	case c.hurry <- struct{}{}:
	default:
	}
}

// loop commits listed runs until none has been listed for committerIdle,
// or none is left once the engine closes.
func (c *committer) loop() {
	defer c.wg.Done()
	var timer *time.Timer
	idle := time.NewTimer(committerIdle)
	defer idle.Stop()
	for {
		if c.every > 0 && c.size.Load() < c.maxSize {
			if timer == nil {
				timer = time.NewTimer(c.every)
			} else {
				timer.Reset(c.every)
			}
			select {
			case <-timer.C:
			case <-c.hurry:
				timer.Stop()
			case <-c.quit:
				timer.Stop()
			}
		}
		c.commit()
		if !c.waitListed(idle) {
			return
		}
		if c.every == 0 {
			c.gather()
		}
	}
}

// gatherMax bounds the writes a sync commit gathers while the sync of
// the commits before it is in flight (gather): at 50,000 deltas a second
// about a millisecond's worth.
const gatherMax = 64

// gather waits, before a sync commit, while commits before it wait for
// their sync and fewer than gatherMax writes are buffered. The events of
// a commit written while a sync is in flight are published only once the
// next sync, which begins when this one ends, is done: written then, the
// commit would wait for the sync all the same, and one commit gathers
// what would have been several (a commit costs tens of microseconds on
// top of its writes: BEGIN, COMMIT, its first read). The commit is then
// written while the publisher publishes the synced ones, and the next
// sync covers it. Measured on SQLite at 1,000 streaming runs: a commit
// per sync instead of four to five, a third less of the committer's
// time, and a lower median (docs/benchmarks.md).
func (c *committer) gather() {
	for c.size.Load() < gatherMax && c.unsynced.Load() > 0 {
		select {
		case <-c.synced:
		case <-c.hurry:
			return
		case <-c.quit:
			return
		}
	}
}

// waitListed waits until a run is listed, and reports true, or until
// none has been for committerIdle (on the loop's timer idle), or the
// engine has closed with none listed, when it reports false: the loop
// has ended (running is false).
func (c *committer) waitListed(idle *time.Timer) bool {
	timedOut := false
	for {
		c.mu.Lock()
		switch {
		case len(c.dirty) > 0:
			c.mu.Unlock()
			return true
		case timedOut || closed(c.quit):
			c.running = false
			c.mu.Unlock()
			return false
		}
		c.mu.Unlock()
		idle.Reset(committerIdle)
		select {
		case <-c.wake:
		case <-c.quit:
		case <-idle.C:
			timedOut = true
		}
	}
}

// commit takes the buffers of every listed run, applies them in one call,
// publishes the events of each run whose writes were committed, and then
// wakes the runs' waiters.
func (c *committer) commit() {
	bufs := commitBufPool.Get().(*commitBufs)
	c.mu.Lock()
	runs := c.dirty
	c.dirty = bufs.runs[:0] // the list the next commit takes
	c.mu.Unlock()
	bufs.runs = runs
	c.size.Store(0)
	select {
	case <-c.hurry:
	default:
	}
	if len(runs) == 0 {
		bufs.put()
		return
	}
	gens := append(bufs.gens[:0], make([]uint64, len(runs))...)
	batches := bufs.batches[:0]
	owners := bufs.owners[:0]
	for i, r := range runs {
		r.emu.Lock()
		r.queued = false
		gens[i] = r.wgen
		if r.storeErr == nil && !r.wb.empty() {
			batches = append(batches, r.takeLocked())
			owners = append(owners, r)
		}
		r.emu.Unlock()
	}
	refused := append(bufs.refused[:0], make([]bool, len(batches))...)
	bufs.gens, bufs.batches, bufs.owners, bufs.refused = gens, batches, owners, refused
	began := time.Now()
	var gc *GroupCommit
	if c.observe != nil {
		gc = newGroupCommit(c.mode, batches, began)
	}
	ctx, deferred := withSyncDeferral(context.Background())
	if err := applyBatches(ctx, c.st, batches); err != nil {
		if len(batches) == 1 {
			refused[0] = true
			owners[0].fail(err)
		} else {
			// Find whose writes were refused: apply run by run.
			for i := range batches {
				if e := applyBatches(context.Background(), c.st, batches[i:i+1]); e != nil {
					refused[i] = true
					owners[i].fail(e)
				}
			}
		}
	}
	if gc != nil {
		gc.Written = time.Since(gc.Began)
	}
	c.after(deferred, func(err error) {
		if gc != nil {
			gc.Durable = time.Since(gc.Began)
		}
		if err != nil {
			// Not known to be durable: none of it may be published.
			for i := range batches {
				if !refused[i] {
					refused[i] = true
					owners[i].fail(err)
				}
			}
		}
		publish := func() {
			for i, b := range batches {
				if !refused[i] {
					owners[i].publish(b.Events)
				}
			}
		}
		if group := c.group.Load(); group != nil {
			(*group)(publish)
		} else {
			publish()
		}
		now := time.Now()
		c.lag.note(now, now.Sub(began))
		if gc != nil {
			gc.Published = now.Sub(gc.Began)
			for i := range batches {
				if refused[i] {
					gc.Refused++
				}
			}
		}
		for i, r := range runs {
			r.committed(gens[i])
		}
		bufs.put()
		if gc != nil {
			c.observe(*gc)
		}
	})
}

// GroupCommit is what Config.CommitObserver learns of one group commit:
// the writes the committer took together (one WriteBatches call, one
// transaction for the stores that support it) and the time from its
// taking them (Began) to each stage — the store returning (Written,
// waiting for the store's writer included), the commit being durable
// (Durable: the store's deferred sync returned; Written for a store that
// returns durable), and its events handed to the runs' sinks (Published).
// A delta's wait for its commit is about Published plus the time it
// waited to be taken.
type GroupCommit struct {
	Durability Durability
	Began      time.Time
	Written    time.Duration
	Durable    time.Duration
	Published  time.Duration
	// Runs is the runs whose writes the commit carried, Creates and
	// Finishes those it created and ended, Events the events it appended.
	Runs, Creates, Finishes, Events int
	// Refused is how many runs' writes the store refused (fenced, or not
	// durable): their events were not published.
	Refused int
}

// newGroupCommit begins the record of a commit of batches in mode d, taken at began.
func newGroupCommit(d Durability, batches []WriteBatch, began time.Time) *GroupCommit {
	gc := &GroupCommit{Durability: d, Began: began, Runs: len(batches)}
	for i := range batches {
		b := &batches[i]
		if b.Create != nil {
			gc.Creates++
		}
		if b.Finish != nil {
			gc.Finishes++
		}
		gc.Events += len(b.Events)
	}
	return gc
}

// commitBufs are a commit's lists: the runs it took, their write
// generations, their batches and owners, and which were refused. A
// commit's lists go back to commitBufPool once it has been published, and
// its list of runs becomes the committer's list for a later commit, so
// that a commit of a thousand streaming runs allocates none of them anew.
type commitBufs struct {
	runs    []*run
	gens    []uint64
	batches []WriteBatch
	owners  []*run
	refused []bool
}

var commitBufPool = sync.Pool{New: func() any { return new(commitBufs) }}

// put clears b (it keeps no run or event alive) and returns it to the
// pool.
func (b *commitBufs) put() {
	clear(b.runs)
	clear(b.batches)
	clear(b.owners)
	b.runs, b.batches, b.owners = b.runs[:0], b.batches[:0], b.owners[:0]
	commitBufPool.Put(b)
}

// after runs finish — a commit's publishing — with the outcome of d's
// waits (the deferred sync of a commit the store has not yet made
// durable), once the finish of every earlier commit has run, so that each
// run's events reach its sink in order: at once when the commit is
// durable and no earlier finish is pending, else on the committer's
// publisher goroutine, so that the loop gathers the next commit while the
// store syncs this one.
func (c *committer) after(d *syncDeferral, finish func(error)) {
	c.pmu.Lock()
	if len(d.waits) == 0 && !c.publishing {
		c.pmu.Unlock()
		finish(nil)
		return
	}
	c.unpublished = append(c.unpublished, unpublished{d, finish})
	c.unsynced.Add(1)
	if !c.publishing {
		c.publishing = true
		c.wg.Add(1)
		go c.publish()
	}
	c.pmu.Unlock()
}

// unpublished is a commit waiting for its sync and its publishing.
type unpublished struct {
	d      *syncDeferral
	finish func(error)
}

// publish is the publisher goroutine: it takes every commit listed so far
// and, in commit order, waits for each one's sync and publishes it, until
// none is left. One goroutine does it all, so that a commit costs no
// goroutine of its own and no hand-over between the goroutines of
// consecutive commits; and since a store's sync makes durable every
// commit written before it began (as the SQLite store's does), the first
// wait of a batch usually syncs the whole batch, and the others return at
// once.
func (c *committer) publish() {
	defer c.wg.Done()
	var batch []unpublished
	for {
		c.pmu.Lock()
		if len(c.unpublished) == 0 {
			c.publishing = false
			c.pmu.Unlock()
			return
		}
		batch, c.unpublished = c.unpublished, batch[:0]
		c.pmu.Unlock()
		for _, u := range batch {
			err := u.d.wait()
			if c.unsynced.Add(-1) == 0 {
				select {
				case c.synced <- struct{}{}:
				default:
				}
			}
			u.finish(err)
		}
		clear(batch) // keep no commit alive
	}
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A store may make a commit visible before it is durable and sync it
// afterwards, off the path of its next write (the SQLite store syncs its
// WAL once the writer is free). The committer asks such a store, through
// the context of WriteBatches, to return as soon as the commit is written
// and to hand back the wait for its sync: it then gathers the next
// commit while the disk syncs the last, and publishes each commit's
// events, in order, only once its wait has returned. The request rides in
// the context so that it passes through stores that wrap another.
type syncDeferral struct{ waits []func() error }

type syncDeferralKey struct{}

// withSyncDeferral returns ctx asking the store to defer its syncs, and
// the holder of the waits the store hands back.
func withSyncDeferral(ctx context.Context) (context.Context, *syncDeferral) {
	d := &syncDeferral{}
	return context.WithValue(ctx, syncDeferralKey{}, d), d
}

// DeferSync is for stores: when ctx asks for deferred syncs (the
// committer's WriteBatches), it keeps wait — which returns once the
// write just made is durable, or fails if it cannot be made so — and
// reports true, and the store returns without waiting. Otherwise it
// reports false, and the store must wait itself before returning.
func DeferSync(ctx context.Context, wait func() error) bool {
	d, ok := ctx.Value(syncDeferralKey{}).(*syncDeferral)
	if !ok {
		return false
	}
	d.waits = append(d.waits, wait)
	return true
}

// wait runs the waits handed back, in order.
func (d *syncDeferral) wait() error {
	for _, w := range d.waits {
		if err := w(); err != nil {
			return err
		}
	}
	return nil
}
