package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrLeaseLost is the cause a run's context gets when its lease could not
// be renewed: another process may own the run now, so this one stops.
var ErrLeaseLost = errors.New("run lease lost")

// ErrPlanChanged is returned when a run is recovered with a plan version
// other than the one it started with.
var ErrPlanChanged = errors.New("plan version changed since the run started")

// RecoverRequest continues a run that was running when its process died
// (its lease expired). It is the same run: its log goes on from the last
// seq, events already in the log are not emitted again, succeeded nodes are
// not executed again, and a node that was in flight runs again with the
// same attempt number and attempt id (a node_retrying with code
// stale_running marks it).
type RecoverRequest struct {
	RunID string
	// Plan or Graph at the run's plan version.
	Plan     *Plan
	Graph    *Graph
	Services any
	Sink     EventSink
	// Joined, as a run's request has it: Writes go in the recovery's
	// first commit, EndWrites with its end, and Tap is handed the events
	// the log already holds (as the store returns them) before those the
	// run emits.
	Joined
}

// CodeStaleRunning is the node_retrying code of a node re-executed after
// its process was lost mid-attempt.
const CodeStaleRunning = "stale_running"

// Recover continues a run whose process was lost (see RecoverRequest). With
// a Leaser store it first claims the run's lease (ErrLeaseHeld when
// another live process holds it).
func (e *Engine) Recover(ctx context.Context, req RecoverRequest) (*RunResult, error) {
	r, err := e.recoverRun(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return r.execute()
}

// recoverRun prepares the recovery of a run; rec, when given, is its
// record as just read (it is read again under the claim anyway).
func (e *Engine) recoverRun(ctx context.Context, req RecoverRequest, rec *RunRecord) (*run, error) {
	return e.recoverClaimed(ctx, req, rec, nil)
}

// recoverClaimed is recoverRun; claimed, when set, is the lease already
// taken for the run (a bulk claim), so the run is not claimed again.
//
// A ctx already cancelled (a cancel the run's binding carried when it was
// launched: one sent while its process was down) does not stop the
// recovery: the run is read and claimed under a context that a cancel does
// not end, then executes under ctx, so it ends cancelled — its end
// written — instead of failing to start and being recovered again with
// the cancel forgotten.
func (e *Engine) recoverClaimed(runCtx context.Context, req RecoverRequest, rec *RunRecord, claimed *Lease) (*run, error) {
	if e.store == nil {
		return nil, fmt.Errorf("%w: the engine has no store", ErrRunNotResumable)
	}
	ctx := context.WithoutCancel(runCtx)
	var err error
	if rec == nil {
		if rec, err = e.store.GetRun(ctx, req.RunID); err != nil {
			return nil, err
		}
	}
	if rec.Status != RunRunning {
		return nil, fmt.Errorf("%w: run %s is %s", ErrRunNotResumable, rec.ID, rec.Status)
	}
	if !req.Joined.empty() && !e.JoinsWrites() {
		return nil, errCannotJoin
	}
	p, err := e.plan(req.Plan, req.Graph)
	if err != nil {
		return nil, err
	}
	if p.GraphID != rec.GraphID || p.PlanVersion != rec.PlanVersion {
		return nil, fmt.Errorf("%w: run %s started on %s v%d", ErrPlanChanged, rec.ID, rec.GraphID, rec.PlanVersion)
	}
	as := p.active(rec.EntryNodeIDs)
	if as.err != nil {
		return nil, as.err
	}
	var lease *Lease
	if l := e.store.leaser; l != nil {
		got := Lease{}
		if claimed != nil {
			// A bulk claim took only running runs, and rec was read under it.
			got = *claimed
		} else {
			if got, err = l.ClaimRun(ctx, rec.ID, e.owner, e.leaseTTL); err != nil {
				return nil, err
			}
			// The run may have finished between the read above and the
			// claim (its holder writes the final status before releasing
			// the lease): read it again under the claim.
			if rec, err = e.store.GetRun(ctx, req.RunID); err != nil || rec.Status != RunRunning {
				_ = l.ReleaseLease(ctx, got)
				if err == nil {
					err = fmt.Errorf("%w: run %s is %s", ErrRunNotResumable, rec.ID, rec.Status)
				}
				return nil, err
			}
		}
		lease = &got
		rec.Token = got.Token
	}
	cps, err := e.store.Checkpoints(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	evs, err := e.store.Events(ctx, rec.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	base, err := e.continuedFrom(ctx, rec)
	if err != nil {
		return nil, err
	}
	prev := make(map[string]*Checkpoint, len(cps))
	var stale []*Checkpoint
	for _, cp := range cps {
		if cp.Status == NodeRunning && cp.NextAttemptAt.IsZero() {
			mark := *cp
			mark.Status = NodeStaleRunning
			mark.Token, mark.UpdatedAt = rec.Token, time.Now()
			stale = append(stale, &mark)
			cp = &mark
		}
		prev[cp.NodeID] = cp
	}
	r, err := e.newRunState(runCtx, p, as, rec, time.Now(), req.Services, req.Sink, lease)
	if err != nil {
		return nil, err
	}
	// The stale marks go out with the run's first flush (before any node
	// executes); a crash before it leaves them running, to be marked again.
	r.wb.cps = stale
	r.prev, r.base, r.answers, r.recovering = prev, base, rec.Answers, true
	r.logged = newLogged(p, evs)
	if n := len(evs); n > 0 {
		r.seq = evs[n-1].Seq
	}
	r.wb.writes, r.endWrites, r.tap = req.Writes, req.EndWrites, req.Tap
	if r.tap != nil {
		for _, ev := range evs {
			r.tap(ev)
		}
	}
	return r, nil
}

// continuedFrom is the starting point of a recovered run that continues
// another (startingPoint), for the nodes with no checkpoint of their own:
// what the run started from is not its progress, so a run whose writes
// do not hold it (an exit-mode run writes no checkpoint before its end)
// would otherwise execute its parent's succeeded nodes again and ask its
// answered interrupts anew. A fresh run, or one whose parent is gone
// (deleted by retention), has none (nil).
func (e *Engine) continuedFrom(ctx context.Context, rec *RunRecord) (map[string]*Checkpoint, error) {
	if rec.ParentID == "" {
		return nil, nil
	}
	parent, err := e.store.GetRun(ctx, rec.ParentID)
	if errors.Is(err, ErrRunNotFound) {
		e.log.Warn("recovered run's parent is gone: its nodes execute again", "run", rec.ID, "parent", rec.ParentID)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.startingPoint(ctx, parent, rec.Options.ForkAtSeq)
}

// logged is what a recovered run's log already holds, so the run does not
// emit it again.
type logged struct {
	runStarted bool
	runEnded   bool
	started    map[string]bool
	terminal   map[string]bool
	skipped    map[string]bool
	retrying   map[string]int // highest attempt announced
	taken      map[string]bool
}

func newLogged(p *Plan, evs []Event) *logged {
	l := &logged{started: map[string]bool{}, terminal: map[string]bool{}, skipped: map[string]bool{},
		retrying: map[string]int{}, taken: map[string]bool{}}
	for _, ev := range evs {
		switch ev.Type {
		case EventRunStarted:
			l.runStarted = true
		case EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunInterrupted:
			l.runEnded = true
		case EventNodeStarted:
			l.started[ev.NodeID] = true
		case EventNodeCompleted, EventNodeFailed, EventNodeCancelled, EventNodeInterrupted:
			l.terminal[ev.NodeID] = true
		case EventNodeSkipped:
			l.skipped[ev.NodeID] = true
		case EventNodeRetrying:
			if ev.Attempt > l.retrying[ev.NodeID] {
				l.retrying[ev.NodeID] = ev.Attempt
			}
		case EventEdgeTaken:
			if id := edgeIDOf(ev.Data); id != "" {
				l.taken[id] = true
			}
		}
	}
	return l
}

func edgeIDOf(data any) string {
	switch d := data.(type) {
	case *EdgeTakenData:
		return d.EdgeID
	case EdgeTakenData:
		return d.EdgeID
	case json.RawMessage:
		var x EdgeTakenData
		if json.Unmarshal(d, &x) == nil {
			return x.EdgeID
		}
	case map[string]any:
		s, _ := d["edgeId"].(string)
		return s
	}
	return ""
}

// has reports whether an event like this one is already in the log.
func (l *logged) has(t EventType, node string, attempt int, data any) bool {
	switch t {
	case EventRunStarted:
		return l.runStarted
	case EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunInterrupted:
		return l.runEnded
	case EventNodeStarted:
		return l.started[node]
	case EventNodeCompleted, EventNodeFailed, EventNodeCancelled, EventNodeInterrupted:
		return l.terminal[node]
	case EventNodeSkipped:
		return l.skipped[node]
	case EventNodeRetrying:
		if d, ok := data.(*NodeRetryingData); ok && d.Code == CodeStaleRunning {
			return false // each recovery of an in-flight node is a new fact
		}
		return attempt <= l.retrying[node]
	case EventEdgeTaken:
		return l.taken[edgeIDOf(data)]
	}
	return false
}

// RecoveryConfig drives RecoverExpired and RecoveryLoop.
type RecoveryConfig struct {
	// Interval between passes of the loop (default 5s).
	Interval time.Duration
	// Batch is how many expired runs one pass takes at most (default 100).
	Batch int
	// Prepare supplies the plan (or graph), services and sink to recover a
	// run with. Required: the kernel keeps no graphs. An error gives the
	// claim back; one that is ErrRecoverLater does so without a warning.
	Prepare func(ctx context.Context, rec *RunRecord) (RecoverRequest, error)
	// Launch, when set, starts each claimed and prepared run instead of
	// the engine: it must call run.Start exactly once (typically in a
	// goroutine of its own, after whatever admission the caller needs),
	// or run.GiveBack when it cannot start it after all. An error from
	// Launch (with neither called) gives the claim back. Without Launch
	// the engine executes the run under the pass's ctx and reports to
	// Done.
	Launch func(rec *RunRecord, run *ClaimedRun) error
	// Done, when set, is called with each recovered run's outcome (runs
	// started by the engine, not by Launch).
	Done func(rec *RunRecord, res *RunResult, err error)
}

// ErrRecoverLater is what a RecoveryConfig.Prepare that does not want a
// run now wraps: RecoverExpired gives the claim back quietly, and a later
// pass (of this process or another) claims the run again.
var ErrRecoverLater = errors.New("runtime: recover the run later")

// ClaimedRun is a run a recovery pass claimed and prepared, handed to
// RecoveryConfig.Launch. Its claim is renewed while it waits to start,
// so neither another process nor a later pass claims it again.
type ClaimedRun struct {
	e      *Engine
	req    RecoverRequest
	rec    *RunRecord
	claim  *waitingClaim // nil: the store has no leases
	unhold func()        // drops the pass's hold on the run id
	once   atomic.Bool
}

// RunID is the claimed run's id.
func (c *ClaimedRun) RunID() string { return c.rec.ID }

// Start continues the run under ctx and returns its outcome. Only the
// first call of Start or GiveBack counts.
func (c *ClaimedRun) Start(ctx context.Context) (*RunResult, error) {
	if !c.once.CompareAndSwap(false, true) {
		return nil, errors.New("runtime: a recovered run was started twice")
	}
	var lease *Lease
	if c.claim != nil {
		got, err := c.claim.take()
		if err != nil {
			c.unhold() // lost: whoever holds the lease now recovers the run
			return nil, err
		}
		lease = &got
	}
	r, err := c.e.recoverClaimed(ctx, c.req, c.rec, lease)
	if err != nil {
		if lease != nil {
			_ = c.e.store.leaser.ReleaseLease(context.WithoutCancel(ctx), *lease)
		}
		c.unhold()
		return nil, err
	}
	c.unhold() // the run holds itself now
	return r.execute()
}

// GiveBack gives the claim back (a later pass, of this process or
// another, recovers the run) unless Start was called.
func (c *ClaimedRun) GiveBack() {
	if !c.once.CompareAndSwap(false, true) {
		return
	}
	if c.claim != nil {
		if got, err := c.claim.take(); err == nil {
			_ = c.e.store.leaser.ReleaseLease(context.Background(), got)
		}
	}
	c.unhold()
}

// RecoverExpired makes one pass: it claims every run whose lease expired
// (up to Batch) and continues it in the background. With an OwnerLister
// store it first takes back, at once, the running runs whose lease names
// this engine's owner but that this engine does not hold: the runs of an
// earlier process with the same Config.Owner (a restart). Their claim
// bumps the token, so that earlier process, were it still alive, is
// fenced. It returns how many runs it started; runs another process
// claimed first, and runs that ended between the listing and the claim,
// are skipped. It first renews the leases of this engine's own runs whose
// renewals fell behind, so that it claims none of them.
func (e *Engine) RecoverExpired(ctx context.Context, cfg RecoveryConfig) (int, error) {
	if e.store == nil || e.store.leaser == nil {
		return 0, fmt.Errorf("runtime: recovery needs a store with leases")
	}
	l := e.store.leaser
	e.renewals.renewLate()
	batch := cfg.Batch
	if batch <= 0 {
		batch = 100
	}
	var ids []string
	leases := map[string]*Lease{}
	if o := e.store.owned; o != nil {
		mine, err := o.OwnedRuns(ctx, e.owner, batch)
		if err != nil {
			return 0, err
		}
		for _, id := range mine {
			if e.holds(id) {
				continue // executing here
			}
			got, err := l.ClaimRun(ctx, id, e.owner, e.leaseTTL)
			if err != nil {
				// Taken by another process or deleted meanwhile. One that
				// ended is claimed (a claim does not look at the status)
				// and given back below.
				continue
			}
			ids = append(ids, id)
			leases[id] = &got
		}
	}
	if bc := e.store.bulk; bc != nil {
		// One write claims the whole batch.
		got, err := bc.ClaimExpired(ctx, e.owner, e.leaseTTL, time.Now(), batch)
		if err != nil {
			e.releaseAll(ctx, leases)
			return 0, err
		}
		for i := range got {
			if leases[got[i].RunID] == nil {
				ids = append(ids, got[i].RunID)
			}
			leases[got[i].RunID] = &got[i] // the newer claim
		}
	} else {
		expired, err := l.ExpiredRuns(ctx, time.Now(), batch)
		if err != nil {
			e.releaseAll(ctx, leases)
			return 0, err
		}
		for _, id := range expired {
			if leases[id] == nil {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		e.hold(id) // until the run ends or the claim is given back
	}
	started := 0
	for _, id := range ids {
		var unholdOnce sync.Once
		unhold := func() { unholdOnce.Do(func() { e.unhold(id) }) }
		release := func() {
			if lease := leases[id]; lease != nil {
				_ = l.ReleaseLease(ctx, *lease) // let another process take it
			}
			unhold()
		}
		rec, err := e.store.GetRun(ctx, id)
		if err != nil || rec.Status != RunRunning {
			// Gone, or ended between the listing and the claim: its
			// process ran it to the end (a claim does not look at the
			// status).
			release()
			continue
		}
		req, err := cfg.Prepare(ctx, rec)
		if err != nil {
			if errors.Is(err, ErrRecoverLater) {
				e.log.Debug("run recovered later", "run", id, "err", err)
			} else {
				e.log.Warn("cannot prepare run for recovery", "run", id, "err", err)
			}
			release()
			continue
		}
		req.RunID = id
		if cfg.Launch != nil {
			cr := &ClaimedRun{e: e, req: req, rec: rec, unhold: unhold}
			if lease := leases[id]; lease != nil {
				// Until Launch starts the run (after its chat's turn, say),
				// the claim is renewed like a run's lease.
				cr.claim = e.renewWaiting(*lease)
			}
			if err := cfg.Launch(rec, cr); err != nil {
				e.log.Warn("recovered run not launched", "run", id, "err", err)
				cr.GiveBack()
				continue
			}
			started++
			continue
		}
		r, err := e.recoverClaimed(ctx, req, rec, leases[id])
		if err != nil {
			if !errors.Is(err, ErrLeaseHeld) {
				e.log.Warn("recover run", "run", id, "err", err)
			}
			release()
			continue
		}
		unhold() // the run holds itself now
		started++
		e.recovering.Add(1)
		go func() {
			defer e.recovering.Done()
			res, err := r.execute()
			if cfg.Done != nil {
				cfg.Done(rec, res, err)
			}
		}()
	}
	return started, nil
}

// RecoveryLoop runs RecoverExpired at once and then every Interval until
// ctx ends. Recovered runs get ctx as their parent: cancelling it stops
// them (use WaitRecovered to wait for them to end).
func (e *Engine) RecoveryLoop(ctx context.Context, cfg RecoveryConfig) {
	every := cfg.Interval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := e.RecoverExpired(ctx, cfg); err != nil && ctx.Err() == nil {
			e.log.Warn("recovery pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// WaitRecovered blocks until every run started by recovery has ended.
func (e *Engine) WaitRecovered() { e.recovering.Wait() }

// releaseAll gives back claims a failed pass took.
func (e *Engine) releaseAll(ctx context.Context, leases map[string]*Lease) {
	for _, l := range leases {
		_ = e.store.leaser.ReleaseLease(ctx, *l)
	}
}
