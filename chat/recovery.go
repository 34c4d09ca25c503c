package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"chatgraph/chatscope"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// errLost is why a reserved run whose process died before it began is
// failed when it cannot be started again (see settleReservations).
var errLost = errors.New("lost: the server stopped before the run started")

// Start begins the service's background work and returns how many runs
// its first pass took over:
//
//   - first, once per database, chat runs stored with their history
//     inline (by an older build) are rewritten to reference it (see
//     HistoryMigrator);
//   - runs whose process died mid-run (their lease expired) continue as
//     the same run through the kernel's recovery (Engine.RecoverExpired,
//     one bulk claim per pass) and the service's launch path, at once and
//     then every RecoveryInterval;
//   - runs reserved by a turn whose process died before they began
//     (queued in their chat) are started, as the same run answering the
//     same message, in the order they were sent and behind whatever
//     holds their chat (settleReservations); a reservation of an older
//     build, or whose turn is gone, is failed with code lost (its
//     message too);
//   - messages of runs whose process died after the run ended and before
//     it wrote them are written from the run's record and checkpoints;
//   - a chat turn whose holder ended in a process that died before it
//     released the turn is freed when runs of this process wait for it
//     (sweepEndedHolders; a queue that keeps turns past their process);
//   - runs the previous process cancelled at shutdown are continued in
//     new runs, once;
//   - finished runs older than Retention are deleted, at once and every
//     RetentionInterval.
//
// The work stops at Shutdown (or when ctx ends).
func (s *Service) Start(ctx context.Context) int {
	loopCtx, cancel := context.WithCancel(s.base)
	context.AfterFunc(ctx, cancel)
	n := 0
	s.migrateHistory(loopCtx)
	if _, ok := s.runs.(runtime.Leaser); ok {
		n += s.recoverExpired(loopCtx)
	}
	s.settleReservations(loopCtx)
	s.settleMessages(loopCtx)
	n += s.continueShutdownRuns(loopCtx)
	if _, ok := s.runs.(runtime.Leaser); ok {
		go func() {
			t := time.NewTicker(s.cfg.RecoveryInterval)
			defer t.Stop()
			for {
				select {
				case <-loopCtx.Done():
					return
				case <-t.C:
				}
				s.recoverExpired(loopCtx)
				s.settleReservations(loopCtx)
				s.settleMessages(loopCtx)
				s.sweepEndedHolders(loopCtx)
			}
		}()
	}
	if in, ok := s.runs.(runtime.Inspector); ok && s.cfg.Retention > 0 {
		go func() {
			t := time.NewTicker(s.cfg.RetentionInterval)
			defer t.Stop()
			for {
				s.retain(loopCtx, in)
				select {
				case <-loopCtx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return n
}

// recoveryBatch is how many expired runs one claim takes.
const recoveryBatch = 100

// recoverExpired takes back every run whose lease expired, a batch per
// claim, until a claim comes back short (no more expired runs, or this
// process admits no more runs); it returns how many it took.
func (s *Service) recoverExpired(ctx context.Context) int {
	cfg := s.recovery()
	n := 0
	for {
		got, err := s.engine.RecoverExpired(ctx, cfg)
		n += got
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("recovery pass", "err", err)
			}
			return n
		}
		if got < cfg.Batch {
			return n
		}
	}
}

// recovery is the hook the kernel's recovery hands each claimed run to:
// the run continues through the service's launch path.
func (s *Service) recovery() runtime.RecoveryConfig {
	plans := map[string]*runtime.Plan{}
	prepared := map[string]*recovered{}
	var mu sync.Mutex // Prepare and Launch run in the pass; start in the run's goroutine
	return runtime.RecoveryConfig{Batch: recoveryBatch,
		Prepare: func(ctx context.Context, rec *runtime.RunRecord) (runtime.RecoverRequest, error) {
			if err := s.refused.wait(rec.ID, time.Now()); err != nil {
				return runtime.RecoverRequest{}, err
			}
			p, err := s.planOf(ctx, rec, plans)
			if err != nil {
				return runtime.RecoverRequest{}, err
			}
			r := &recovered{graph: p.Graph()}
			mu.Lock()
			prepared[rec.ID] = r
			mu.Unlock()
			services, _ := s.services(chatscope.New(p, rec.EntryNodeIDs))
			req := runtime.RecoverRequest{Plan: p, Services: services,
				Sink: runtime.SinkFunc(func(ev runtime.Event) { r.sink.Emit(ev) })}
			if s.join != nil {
				// Its answer joins its end's commit, as a turn's does.
				req.Joined = s.endAnswer(r.graph, rec.EntryNodeIDs, func() *Message {
					if r.msg == nil || r.msg.RunID != rec.ID {
						return nil
					}
					return r.msg
				})
			}
			return req, nil
		},
		Launch: func(rec *runtime.RunRecord, claimed *runtime.ClaimedRun) error {
			mu.Lock()
			r := prepared[rec.ID]
			delete(prepared, rec.ID)
			mu.Unlock()
			return s.launchRecovered(rec, r, claimed)
		},
	}
}

// planOf loads and compiles the graph version rec runs, through a cache
// of one pass.
func (s *Service) planOf(ctx context.Context, rec *runtime.RunRecord, cache map[string]*runtime.Plan) (*runtime.Plan, error) {
	key := fmt.Sprintf("%s@%d", rec.GraphID, rec.PlanVersion)
	if p := cache[key]; p != nil {
		return p, nil
	}
	grec, err := s.chats.GetGraphVersion(ctx, rec.GraphID, rec.PlanVersion)
	if err != nil {
		return nil, err
	}
	g, err := s.graphOf(grec)
	if err != nil {
		return nil, err
	}
	p, err := s.engine.Compile(g)
	if err != nil {
		return nil, err
	}
	cache[key] = p
	return p, nil
}

// recovered is a run the kernel claimed for recovery: its graph, and the
// sink its events go to once launched.
type recovered struct {
	graph *runtime.Graph
	sink  runtime.EventSink
	// msg is the run's answer as launchRecovered read it (nil: none to
	// write), for the commit of its end (endAnswer).
	msg *Message
}

// launchRecovered continues a run whose process died, as the same run:
// bound under run control, holding its chat's turn, with its events going
// to the publisher after the last seq in its log, and its message written
// when it ends.
func (s *Service) launchRecovered(rec *runtime.RunRecord, r *recovered, claimed *runtime.ClaimedRun) error {
	mid, _ := rec.Attrs["messageId"].(string)
	var msg *Message
	if mid != "" && rec.ChatID != "" {
		if m, err := s.chats.GetMessage(context.Background(), rec.ChatID, mid); err == nil {
			msg = m
		}
	}
	r.msg = msg // before the run starts: its end reads it
	lr := newLiveRun(rec.ID, rec.ChatID, mid, r.graph)
	var scopes []runcontrol.Scope
	if rec.ChatID != "" {
		scopes = append(scopes, runcontrol.ChatScope(rec.ChatID))
	}
	if crid, _ := rec.Attrs["clientRequestId"].(string); crid != "" {
		// Its connection, if it had one, is gone with its process.
		scopes = append(scopes, requestScopes(rec.ChatID, "", crid)...)
	}
	return s.launch(context.Background(), launch{
		// tryTurn: it takes its chat's turn now if it is free, before a
		// reservation of the chat this pass starts again (relaunch) can.
		run: lr, scopes: scopes, strategy: runcontrol.Enqueue, tryTurn: true, afterSeq: rec.LastSeq, linkNow: true,
		exec: func(ctx context.Context, sink runtime.EventSink, _ []any) (*runtime.RunResult, error) {
			r.sink = sink // set before start: no event comes earlier
			return claimed.Start(ctx)
		},
		failStart: func(_ context.Context, cause error) {
			// Its chat's queue failed it before it started: a later
			// recovery pass takes it up again.
			s.log.Warn("recovered run could not start: given back", "run", rec.ID, "err", cause)
			claimed.GiveBack()
		},
		finish: func(ctx context.Context, res *runtime.RunResult, err error) {
			if res == nil {
				// Not taken over (another process was first, say): the
				// message belongs to whoever runs it.
				s.log.Warn("recovered run did not start", "run", rec.ID, "err", err)
				return
			}
			s.log.Info("recovered run ended", "run", rec.ID, "status", res.Status)
			if err == nil && s.join != nil {
				return // the answer was written in the commit of the run's end
			}
			if msg != nil && msg.RunID == rec.ID {
				s.finishMessage(ctx, msg, r.graph, rec.EntryNodeIDs, res, err)
			}
		},
	})
}

// settleMessages writes the answers of runs that ended while their
// message did not: the process that ran them died between the run's end
// and the message's write. The message is written from the run's record
// and checkpoints, as that process would have written it. Runs bound
// somewhere (live, about to write their message) are left to their
// process.
func (s *Service) settleMessages(ctx context.Context) int {
	msgs, err := s.chats.Unsettled(ctx, 500)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: listing unsettled messages", "err", err)
		}
		return 0
	}
	plans := map[string]*runtime.Plan{}
	n := 0
	for _, m := range msgs {
		if s.Live(m.RunID) != nil {
			continue // running here: its process writes the message
		}
		rec, err := s.runs.GetRun(ctx, m.RunID)
		if err != nil || !rec.Status.Finished() {
			continue // not ended (recovery or the reservation pass has it)
		}
		if bound, err := s.Bound(ctx, rec.ID); bound || err != nil {
			continue // its process writes the message (or a later pass looks)
		}
		p, err := s.planOf(ctx, rec, plans)
		if err != nil {
			s.log.Warn("recovery: loading the graph of an ended run", "run", rec.ID, "err", err)
			continue
		}
		res, err := s.resultOf(ctx, rec, p.Graph())
		if err != nil {
			s.log.Warn("recovery: reading the outcome of an ended run", "run", rec.ID, "err", err)
			continue
		}
		s.finishMessage(ctx, m, p.Graph(), rec.EntryNodeIDs, res, nil)
		s.log.Info("recovery: wrote the message of an ended run", "run", rec.ID, "message", m.ID, "status", rec.Status)
		n++
	}
	return n
}

// resultOf is the outcome of an ended run, as its process had it.
func (s *Service) resultOf(ctx context.Context, rec *runtime.RunRecord, g *runtime.Graph) (*runtime.RunResult, error) {
	res, err := s.engine.Result(ctx, rec, g)
	if err != nil {
		return nil, err
	}
	if ce := runcontrol.ParseCancelError(rec.Error); ce != nil && rec.Status == runtime.RunCancelled {
		res.Err = ce
	}
	return res, nil
}

// continueShutdownRuns continues, in new runs, the chat runs the previous
// process cancelled when it shut down.
func (s *Service) continueShutdownRuns(ctx context.Context) int {
	ins, ok := s.runs.(runtime.Inspector)
	if !ok {
		return 0
	}
	recs, err := ins.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunCancelled},
		After: time.Now().Add(-24 * time.Hour), Limit: 500})
	if err != nil {
		s.log.Warn("recovery: listing cancelled runs", "err", err)
		return 0
	}
	n := 0
	for _, rec := range recs {
		if rec.ChatID == "" || !strings.Contains(rec.Error, "shutdown") {
			continue
		}
		mid, _ := rec.Attrs["messageId"].(string)
		m, err := s.chats.GetMessage(ctx, rec.ChatID, mid)
		if err != nil || m.RunID != rec.ID || m.Status != StatusCancelled || m.Error != runcontrol.Code(runcontrol.ErrShutdown) {
			continue
		}
		ticket, err := s.Send(ctx, Request{Kind: KindContinueMessage, FromRunID: rec.ID})
		if err != nil {
			s.log.Warn("recovery: continuing a run cancelled at shutdown", "run", rec.ID, "err", err)
			continue
		}
		s.log.Info("continued a run cancelled at shutdown", "run", rec.ID, "newRun", ticket.RunID)
		n++
	}
	return n
}

// retain deletes finished runs older than the retention age, and runs
// interrupted for longer than theirs.
func (s *Service) retain(ctx context.Context, in runtime.Inspector) {
	n, err := in.DeleteFinishedBefore(ctx, time.Now().Add(-s.cfg.Retention))
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("retention: deleting finished runs", "err", err)
	case n > 0:
		s.log.Info("retention: deleted finished runs", "runs", n, "older_than", s.cfg.Retention)
	}
	if s.cfg.InterruptedRetention > 0 {
		n, err := DeleteInterruptedBefore(ctx, in, time.Now().Add(-s.cfg.InterruptedRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("retention: deleting expired interrupted runs", "err", err)
		case n > 0:
			s.log.Info("retention: deleted expired interrupted runs", "runs", n, "older_than", s.cfg.InterruptedRetention)
		}
	}
}

// DeleteInterruptedBefore deletes runs still interrupted (waiting for a
// human) whose wait began before t; it returns how many it deleted.
func DeleteInterruptedBefore(ctx context.Context, in runtime.Inspector, t time.Time) (int, error) {
	n := 0
	for {
		// CreatedAt <= UpdatedAt, so listing by creation finds every
		// candidate; the wait's start (UpdatedAt) decides.
		recs, err := in.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunInterrupted}, Before: t, Limit: 500})
		if err != nil {
			return n, err
		}
		deleted := 0
		for _, r := range recs {
			if !r.UpdatedAt.Before(t) {
				continue
			}
			if err := in.DeleteRun(ctx, r.ID); err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				return n, err
			}
			n++
			deleted++
		}
		if len(recs) < 500 || deleted == 0 {
			return n, nil
		}
	}
}
