package transport

import (
	"context"
	"errors"
	"strings"
	"time"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/transport/chatstore"
)

// recoveryInterval is how often Start looks for runs whose process died.
const recoveryInterval = 5 * time.Second

// Start begins the server's background work and returns how many runs its
// first pass took over:
//
//   - runs whose process died mid-run (their lease expired, with a store
//     that has leases) continue as the same run, under run control, at
//     once and then every few seconds;
//   - runs the previous process cancelled at shutdown (message error
//     "shutdown") are continued in new runs, once, at start.
//
// The work stops at Shutdown (or when ctx ends).
func (s *Server) Start(ctx context.Context) int {
	n := s.recoverExpired(ctx)
	n += s.continueShutdownRuns(ctx)
	s.settleLostMessages(ctx)
	if _, ok := s.store.(runtime.Leaser); ok {
		loopCtx, cancel := context.WithCancel(s.base)
		stop := context.AfterFunc(ctx, cancel)
		go func() {
			defer stop()
			t := time.NewTicker(recoveryInterval)
			defer t.Stop()
			for {
				select {
				case <-loopCtx.Done():
					return
				case <-t.C:
					s.recoverExpired(loopCtx)
				}
			}
		}()
	}
	if in, ok := s.store.(runtime.Inspector); ok && s.cfg.Retention > 0 {
		loopCtx, cancel := context.WithCancel(s.base)
		stop := context.AfterFunc(ctx, cancel)
		go func() {
			defer stop()
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

// retain deletes finished runs older than the retention age, and runs
// interrupted for longer than theirs.
func (s *Server) retain(ctx context.Context, in runtime.Inspector) {
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

// recoverExpired continues every run whose lease expired; it returns how
// many it took over.
func (s *Server) recoverExpired(ctx context.Context) int {
	l, ok := s.store.(runtime.Leaser)
	if !ok {
		return 0
	}
	ids, err := l.ExpiredRuns(ctx, time.Now(), 100)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: listing expired runs", "err", err)
		}
		return 0
	}
	n := 0
	for _, id := range ids {
		if s.liveRun(id) != nil {
			continue
		}
		if err := s.recoverRun(ctx, id); err != nil {
			if !errors.Is(err, runtime.ErrLeaseHeld) && !errors.Is(err, runcontrol.ErrAlreadyBound) {
				s.log.Warn("recovery: run not recovered", "run", id, "err", err)
			}
			continue
		}
		n++
	}
	return n
}

// recoverRun continues one run whose process died, as the same run: bound
// under run control, holding its chat's turn, with its events going to
// the hub, and its message written when it ends.
func (s *Server) recoverRun(ctx context.Context, id string) error {
	rec, err := s.store.GetRun(ctx, id)
	if err != nil {
		return err
	}
	grec, err := s.chats.GetGraphVersion(ctx, rec.GraphID, rec.PlanVersion)
	if err != nil {
		return err
	}
	g, err := loadGraph(grec)
	if err != nil {
		return err
	}
	t := &turn{req: chatRequest{Kind: rec.Kind, ChatID: rec.ChatID, Strategy: runcontrol.Enqueue}, graph: g, entries: rec.EntryNodeIDs,
		chat: &chatstore.Chat{ID: rec.ChatID, GraphID: rec.GraphID}}
	if crid, _ := rec.Attrs["clientRequestId"].(string); crid != "" {
		t.req.ClientRequestID = crid
	}
	if mid, _ := rec.Attrs["messageId"].(string); mid != "" && rec.ChatID != "" {
		if m, err := s.chats.GetMessage(ctx, rec.ChatID, mid); err == nil {
			t.assistant = m
		}
	}
	if t.assistant == nil {
		t.assistant = &chatstore.Message{ID: "", ChatID: rec.ChatID}
	}
	lr := &liveRun{id: id, chatID: rec.ChatID, messageID: t.assistant.ID, nodeTypes: map[string]string{}, done: make(chan struct{})}
	for _, n := range g.Nodes {
		lr.nodeTypes[n.ID] = n.Type
	}
	if err := s.admit(lr); err != nil {
		return err
	}
	scopes := []runcontrol.Scope{}
	if rec.ChatID != "" {
		scopes = append(scopes, runcontrol.ChatScope(rec.ChatID))
	}
	if t.req.ClientRequestID != "" {
		scopes = append(scopes, runcontrol.RequestScope(t.req.ClientRequestID))
	}
	bound, release, err := s.ctl.Bind(s.base, id, scopes...)
	if err != nil {
		s.retire(lr)
		return err
	}
	s.hub.open(id, rec.LastSeq)
	ready := make(chan error, 1)
	go func() {
		defer s.retire(lr)
		defer release()
		if rec.ChatID != "" {
			held, err := s.queue.Acquire(bound, rec.ChatID, id, runcontrol.Enqueue)
			if err == nil {
				defer held.Release()
			}
		}
		hold := &terminalHold{s: s, lr: lr}
		defer hold.flush()
		sink := runtime.SinkFunc(hold.emit)
		res, err := s.engine.Recover(bound, runtime.RecoverRequest{RunID: id, Graph: g,
			Services: &nodes.Services{Scope: chatscope.New(g, rec.EntryNodeIDs)}, Sink: sink})
		if res == nil && err != nil {
			ready <- err
			return
		}
		ready <- nil
		s.log.Info("recovered run ended", "run", id, "status", res.Status)
		if t.assistant.ID != "" {
			s.finishMessage(context.WithoutCancel(bound), t, res, err)
		}
	}()
	// The first store writes of Recover (the lease claim) decide whether
	// this process took the run; wait for that outcome only briefly.
	select {
	case err := <-ready:
		return err
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

// continueShutdownRuns continues, in new runs, the chat runs the previous
// process cancelled when it shut down.
func (s *Server) continueShutdownRuns(ctx context.Context) int {
	ins, ok := s.raw.(runtime.Inspector)
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
		if err != nil || m.RunID != rec.ID || m.Status != chatstore.StatusCancelled || m.Error != runcontrol.Code(runcontrol.ErrShutdown) {
			continue
		}
		ticket, err := s.startChatRun(ctx, chatRequest{Kind: KindContinueMessage, FromRunID: rec.ID})
		if err != nil {
			s.log.Warn("recovery: continuing a run cancelled at shutdown", "run", rec.ID, "err", err)
			continue
		}
		s.log.Info("continued a run cancelled at shutdown", "run", rec.ID, "newRun", ticket.RunID)
		n++
	}
	return n
}

// settleLostMessages fails the assistant messages whose run never began:
// their process died while they waited for the chat's turn, so no run
// record exists and nothing else would ever settle them. A run still
// bound to a scope (waiting in a live process, with shared run control)
// is left alone. It scans the chats once, at start.
func (s *Server) settleLostMessages(ctx context.Context) int {
	graphs, err := s.chats.ListGraphs(ctx)
	if err != nil {
		s.log.Warn("recovery: listing graphs", "err", err)
		return 0
	}
	n := 0
	for _, g := range graphs {
		chats, err := s.chats.ListChats(ctx, g.ID)
		if err != nil {
			continue
		}
		for _, c := range chats {
			msgs, err := s.chats.Messages(ctx, c.ID)
			if err != nil {
				continue
			}
			for _, m := range msgs {
				if m.Role != chatstore.RoleAssistant || m.RunID == "" ||
					(m.Status != chatstore.StatusPending && m.Status != chatstore.StatusRunning) || s.liveRun(m.RunID) != nil {
					continue
				}
				if _, err := s.store.GetRun(ctx, m.RunID); !errors.Is(err, runtime.ErrRunNotFound) {
					continue // the run exists: recovery owns it
				}
				if ids, err := s.ctl.Active(ctx, runcontrol.RunScope(m.RunID)); err != nil || len(ids) > 0 {
					continue // waiting in a live process
				}
				m.Status, m.Error = chatstore.StatusFailed, "lost: the server stopped before the run started"
				if err := s.chats.UpdateMessage(ctx, m); err != nil {
					s.log.Warn("recovery: settling a lost message", "message", m.ID, "err", err)
					continue
				}
				s.log.Info("recovery: settled a message whose run never started", "message", m.ID, "run", m.RunID)
				n++
			}
		}
	}
	return n
}
