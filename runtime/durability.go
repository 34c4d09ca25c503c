package runtime

import (
	"context"
	"time"
)

// Durability says when a run's transitions reach the store.
type Durability string

// Durability modes. The empty value means the engine's default (sync).
const (
	// DurabilitySync writes every transition before the next node step
	// starts: the writes between two executor starts go in one batch, and
	// a node's running checkpoint is durable before its handler runs. A
	// succeeded write/external/human node is flushed at once.
	DurabilitySync Durability = "sync"
	// DurabilityBatched hands writes to a group committer that flushes the
	// transitions of all runs together every few milliseconds (or every N
	// writes). A run waits for its flush only before it starts a node with
	// a write, external or human effect, and at its end. A crash loses up
	// to one flush interval of progress, which recovery re-executes.
	DurabilityBatched Durability = "batched"
	// DurabilityExit persists a run only when it ends (completed, failed,
	// cancelled or interrupted). Cheapest; a crash loses the whole run's
	// progress, and recovery starts it over.
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
}

// BatchFinisher is a BatchWriter whose WriteBatches also applies Create
// (with its Lease), Finish and Release, in the same transaction as the
// batch's other writes.
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
}

func (b *writeBuf) empty() bool {
	return len(b.cps) == 0 && len(b.evs) == 0 && b.finish == nil && b.release == nil && b.create == nil
}

// maxBuffered bounds a run's buffer in sync and batched modes (a node
// streaming many deltas flushes as it goes).
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
// else write by write.
func applyBatches(ctx context.Context, st *storeView, batches []WriteBatch) error {
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

// flushLocked writes the run's buffer now (sync and exit) or hands it to
// the group committer (batched). With wait it returns once the writes are
// durable. The caller holds emu; for a batched wait it is released while
// waiting and taken again.
func (r *run) flushLocked(wait bool) {
	if r.storeErr != nil || r.wb.empty() || r.store == nil {
		return
	}
	b := WriteBatch{RunID: r.rec.ID, Token: r.rec.Token, Checkpoints: latestPerNode(r.wb.cps), Events: r.wb.evs,
		Finish: r.wb.finish, Release: r.wb.release, Create: r.wb.create, Lease: r.wb.lease}
	r.wb = writeBuf{}
	if r.durability != DurabilityBatched {
		if err := applyBatches(r.bg, r.store, []WriteBatch{b}); err != nil {
			r.failLocked(err)
		}
		return
	}
	done := r.e.committer().submit(b, r)
	if wait {
		r.emu.Unlock()
		<-done
		r.emu.Lock()
	}
}

// flush is flushLocked for callers that do not hold emu.
func (r *run) flush(wait bool) {
	r.emu.Lock()
	r.flushLocked(wait)
	r.emu.Unlock()
}

// beforeExecute makes the run's transitions durable as its mode requires
// before an executor attempt starts.
func (r *run) beforeExecute(pn *pnode) {
	if r.store == nil {
		return
	}
	switch r.durability {
	case DurabilitySync:
		r.flush(true)
	case DurabilityBatched:
		r.flush(pn.opts.Effect.Sticky())
	}
}

// committer is the engine's group commit loop for batched runs.
type committer struct {
	st      *storeView
	in      chan commitReq
	quit    chan struct{}
	stopped chan struct{}
	every   time.Duration
	maxSize int
}

type commitReq struct {
	b    WriteBatch
	r    *run
	done chan struct{}
}

func (e *Engine) committer() *committer {
	e.commitOnce.Do(func() {
		e.commit = &committer{st: e.store, in: make(chan commitReq, 4096), quit: make(chan struct{}),
			stopped: make(chan struct{}), every: e.batchEvery, maxSize: e.batchSize}
		go e.commit.loop()
	})
	return e.commit
}

func (c *committer) submit(b WriteBatch, r *run) <-chan struct{} {
	done := make(chan struct{})
	c.in <- commitReq{b: b, r: r, done: done}
	return done
}

// loop collects requests for up to one interval (or maxSize writes) and
// applies them in one batch. It runs until the engine is closed.
func (c *committer) loop() {
	defer close(c.stopped)
	var pending []commitReq
	size := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-c.quit:
			timer.Stop()
			for {
				select {
				case req := <-c.in:
					pending = append(pending, req)
					continue
				default:
				}
				break
			}
			if len(pending) > 0 {
				c.commit(pending)
			}
			return
		case req := <-c.in:
			if len(pending) == 0 {
				timer.Reset(c.every)
			}
			pending = append(pending, req)
			size += len(req.b.Checkpoints) + len(req.b.Events)
			if size < c.maxSize {
				continue
			}
			timer.Stop()
		case <-timer.C:
		}
		c.commit(pending)
		pending, size = pending[:0:0], 0
	}
}

func (c *committer) commit(reqs []commitReq) {
	// One batch per run: a run's requests arrive in order, so they merge
	// into one (its creation first, its writes in order, its end last),
	// which saves the store a fence check per request.
	var batches []WriteBatch
	var runs []*run
	at := make(map[*run]int, len(reqs))
	for _, q := range reqs {
		i, ok := at[q.r]
		if !ok {
			at[q.r] = len(batches)
			batches, runs = append(batches, q.b), append(runs, q.r)
			continue
		}
		// The committer owns handed-over slices: growing them in place is safe.
		b := &batches[i]
		b.Checkpoints = append(b.Checkpoints, q.b.Checkpoints...)
		b.Events = append(b.Events, q.b.Events...)
		if q.b.Finish != nil {
			b.Finish = q.b.Finish
		}
		if q.b.Release != nil {
			b.Release = q.b.Release
		}
	}
	for i := range batches {
		batches[i].Checkpoints = latestPerNode(batches[i].Checkpoints)
	}
	err := applyBatches(context.Background(), c.st, batches)
	if err != nil && len(batches) > 1 {
		// Find whose writes were refused: apply run by run.
		for i := range batches {
			if e := applyBatches(context.Background(), c.st, batches[i:i+1]); e != nil {
				runs[i].fail(e)
			}
		}
	} else if err != nil {
		runs[0].fail(err)
	}
	for _, q := range reqs {
		close(q.done)
	}
}
