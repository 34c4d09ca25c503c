package chat

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// CancelRequest names what to cancel: one run (RunID), the run of one
// client request (ClientRequestID; it may not exist yet), or whatever
// runs in a chat (ChatID alone). A client request id is the client's
// name for a call in its chat, not across chats: it needs the ChatID
// (an existing chat) or, from the connection the call came on (or will
// come on), the Conn of Request.Conn.
//
// Rollback undoes what the cancel stops, as the rollback strategy of a
// newer message does (runcontrol.Rollback): each run it reaches ends
// cancelled (cause runcontrol.ErrUserRollback), then the messages its
// turn wrote and the run itself are deleted. A kept intent keeps the
// cause: the run it stops later is undone too.
type CancelRequest struct {
	ChatID          string
	RunID           string
	ClientRequestID string
	Conn            string
	Rollback        bool
}

// cause is the cancel cause the request asks for.
func (r CancelRequest) cause() error {
	if r.Rollback {
		return runcontrol.ErrUserRollback
	}
	return runcontrol.ErrUserCancel
}

// requestScopes are the cancel scopes of a call's client request id
// (none without one): the id within its chat, and within the client
// connection it came on. Chat and connection ids hold no '/', so a
// scope names one pair.
func requestScopes(chatID, conn, crid string) []runcontrol.Scope {
	if crid == "" {
		return nil
	}
	scopes := []runcontrol.Scope{chatRequestScope(chatID, crid)}
	if conn != "" {
		scopes = append(scopes, connRequestScope(conn, crid))
	}
	return scopes
}

func chatRequestScope(chatID, crid string) runcontrol.Scope {
	return runcontrol.RequestScope("chat/" + chatID + "/" + crid)
}

func connRequestScope(conn, crid string) runcontrol.Scope {
	return runcontrol.RequestScope("conn/" + conn + "/" + crid)
}

// CancelResult is the outcome of a cancel: runcontrol.StatusCancelled
// with the runs it reached, or runcontrol.StatusPending when the intent
// is kept for a run that has not bound yet.
type CancelResult struct {
	Status string   `json:"status"`
	RunIDs []string `json:"runIds,omitempty"`
}

// Cancel cancels with the user cause. Cancel wins every race: a cancel
// for a chat or request before its run exists is kept and stops the run
// before any node starts. A run waiting for a human (interrupted) has its
// wait ended. Cancelling a run that already ended, or that no process
// holds, is a conflict naming its status.
func (s *Service) Cancel(ctx context.Context, req CancelRequest) (*CancelResult, error) {
	res, err := s.cancel(ctx, req)
	if err == nil && req.Rollback && req.RunID == "" && res.Status == runcontrol.StatusCancelled {
		// A rollback answers once the turns it undoes are gone, as a
		// run's cancel does (cancelRun).
		var wg sync.WaitGroup
		for _, id := range res.RunIDs {
			wg.Go(func() { s.awaitCancelled(ctx, id, runcontrol.ErrUserRollback) })
		}
		wg.Wait()
	}
	return res, err
}

func (s *Service) cancel(ctx context.Context, req CancelRequest) (*CancelResult, error) {
	switch {
	case req.RunID != "":
		return s.cancelRun(ctx, req.RunID, req.cause())
	case req.ClientRequestID != "" && req.ChatID != "":
		if _, err := s.chats.GetChat(ctx, req.ChatID); err != nil {
			return nil, err
		}
		return s.cancelScope(chatRequestScope(req.ChatID, req.ClientRequestID), req.cause())
	case req.ClientRequestID != "" && req.Conn != "":
		return s.cancelScope(connRequestScope(req.Conn, req.ClientRequestID), req.cause())
	case req.ClientRequestID != "":
		return nil, invalid("a clientRequestId names a call in its chat: cancel it with the chatId too")
	case req.ChatID != "":
		if _, err := s.chats.GetChat(ctx, req.ChatID); err != nil {
			return nil, err
		}
		return s.cancelChat(ctx, req.ChatID, req.cause())
	}
	return nil, invalid("cancel needs chatId, runId or clientRequestId")
}

// cancelRun cancels one run: bound (executing or queued), or waiting for
// a human.
func (s *Service) cancelRun(ctx context.Context, id string, cause error) (*CancelResult, error) {
	res, err := s.cancelScope(runcontrol.RunScope(id), cause)
	if err != nil {
		return nil, err
	}
	if res.Status == runcontrol.StatusCancelled {
		s.awaitCancelled(ctx, id, cause)
	}
	rec, err := s.runs.GetRun(ctx, id)
	if res.Status == runcontrol.StatusCancelled {
		switch {
		case err != nil, !rec.Status.Finished(), rec.Status == runtime.RunCancelled:
			return res, nil
		case rec.Status == runtime.RunInterrupted:
			// A run that just ended waiting for a human commits its end
			// before it lets go of its binding: the cancel reached a run
			// that no longer acts on it, so end its wait as well (as
			// cancelChat).
			s.cancelWaitingRun(ctx, rec, cause)
			return res, nil
		}
		// It had decided its end before the cancel came (its terminal
		// event was on its way while it still held its binding): it is
		// finished, not cancelled.
	}
	if err != nil {
		return nil, err
	}
	if ids := s.cancelWaitingRun(ctx, rec, cause); len(ids) > 0 {
		return &CancelResult{Status: runcontrol.StatusCancelled, RunIDs: ids}, nil
	}
	if rec.Status == runtime.RunRunning || rec.Status == runtime.RunPending {
		// Its process died and recovery has not taken it back (or, a
		// queued turn, started it) yet: the cancel waits for its next
		// Bind (at most the intent's TTL) — or, bound by recovery since
		// the look-up above, it is cancelled now.
		res, err := s.ctl.CancelOrphan(s.base, id, cause)
		if err != nil {
			return nil, err
		}
		if res.Status == runcontrol.StatusCancelled {
			s.awaitCancelled(ctx, id, cause)
		}
		return cancelResult(res), nil
	}
	e := conflict("run %s is not bound to any server process", id)
	if rec.Status.Finished() {
		e = conflict("run %s already ended %s", id, rec.Status)
	}
	e.Details = map[string]any{"status": rec.Status}
	return nil, e
}

// awaitCancelled waits until a run that a cancel reached has ended (at
// most the engine's cancel grace and a second: a cancelled run ends
// within the grace), so that the cancel answers with the run's real end:
// a run of this process until it is done, a run of another process until
// the store has its end (read every awaitPoll) and its answer is final
// (AwaitAnswer) — or, for a rollback (cause runcontrol.ErrUserRollback),
// until the store no longer has it.
func (s *Service) awaitCancelled(ctx context.Context, id string, cause error) {
	rollback := errors.Is(cause, runcontrol.ErrUserRollback)
	t := time.NewTimer(s.engine.CancelGrace() + time.Second)
	defer t.Stop()
	if lr := s.Live(id); lr != nil {
		select {
		case <-lr.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		return
	}
	tick := time.NewTicker(awaitPoll)
	defer tick.Stop()
	for {
		rec, err := s.runs.GetRun(ctx, id)
		if err != nil {
			return
		}
		if rec.Status.Finished() {
			// Its process writes the answer with the end or just after it
			// — and, for a rollback, then deletes the run, unless it
			// wrote no message of its own (undoIfRolledBack).
			_ = s.AwaitAnswer(ctx, rec)
			if !rollback || rec.Kind == string(KindContinueMessage) {
				return
			}
		}
		select {
		case <-tick.C:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// awaitPoll is how often awaitCancelled reads the end of a run that
// another process holds.
const awaitPoll = 10 * time.Millisecond

// cancelChat cancels what runs in a chat — bound runs (executing or
// queued) and runs waiting for a human (interrupted: the wait ends, their
// messages become cancelled). When nothing of either kind exists the
// intent is kept for the chat's next run.
func (s *Service) cancelChat(ctx context.Context, chatID string, cause error) (*CancelResult, error) {
	waiting := s.waitingMessages(ctx, chatID)
	if len(waiting) > 0 {
		if active, err := s.ctl.Active(ctx, runcontrol.ChatScope(chatID)); err == nil && len(active) == 0 {
			return &CancelResult{Status: runcontrol.StatusCancelled, RunIDs: s.cancelWaiting(ctx, waiting, cause)}, nil
		}
	}
	res, err := s.cancelScope(runcontrol.ChatScope(chatID), cause)
	if err != nil {
		return nil, err
	}
	if res.Status == runcontrol.StatusCancelled {
		// A run that has just begun to wait may still hold its binding:
		// the cancel reached it, and its wait ends too. It is one run.
		for _, id := range s.cancelWaiting(ctx, waiting, cause) {
			if !slices.Contains(res.RunIDs, id) {
				res.RunIDs = append(res.RunIDs, id)
			}
		}
	}
	return res, nil
}

// waitingMessages returns the assistant messages of a chat whose run
// waits for a human (interrupted).
func (s *Service) waitingMessages(ctx context.Context, chatID string) []*Message {
	msgs, err := s.chats.Messages(ctx, chatID)
	if err != nil {
		return nil
	}
	var out []*Message
	for _, m := range msgs {
		if m.Role == RoleAssistant && m.Status == StatusInterrupted && m.RunID != "" {
			out = append(out, m)
		}
	}
	return out
}

// cancelWaitingRun ends the human wait of an interrupted run; nil when
// the run is not waiting.
func (s *Service) cancelWaitingRun(ctx context.Context, rec *runtime.RunRecord, cause error) []string {
	if rec.Status != runtime.RunInterrupted {
		return nil
	}
	mid, _ := rec.Attrs["messageId"].(string)
	m, err := s.chats.GetMessage(ctx, rec.ChatID, mid)
	if err == nil && m.RunID != rec.ID {
		return nil // continued by a newer run: nothing waits on this one
	}
	if err != nil {
		if _, err := s.engine.CancelInterrupted(ctx, rec.ID, cause); err != nil {
			return nil
		}
		s.undoIfRolledBack(ctx, rec.ChatID, rec.ID, cause)
		return []string{rec.ID}
	}
	return s.cancelWaiting(ctx, []*Message{m}, cause)
}

// cancelWaiting ends the human waits of interrupted runs (with cause, a
// user's cancel or rollback), marks their messages cancelled — or, for a
// rollback, undoes their turns — and returns the runs it cancelled.
func (s *Service) cancelWaiting(ctx context.Context, msgs []*Message, cause error) []string {
	var ids []string
	for _, m := range msgs {
		if _, err := s.engine.CancelInterrupted(ctx, m.RunID, cause); err != nil {
			continue // resumed or cancelled meanwhile
		}
		m.Status, m.Error = StatusCancelled, runcontrol.Code(cause)
		if err := s.chats.FinishMessage(ctx, m); err != nil {
			s.log.Warn("cancel: writing the message", "message", m.ID, "err", err)
		}
		s.log.Info("run waiting for a human cancelled", "run", m.RunID, "chat", m.ChatID)
		s.undoIfRolledBack(ctx, m.ChatID, m.RunID, cause)
		ids = append(ids, m.RunID)
	}
	return ids
}

// undoIfRolledBack undoes the turn of run runID in chatID when it was
// cancelled with runcontrol.ErrUserRollback (undo, which leaves a run
// that wrote no message of its own as the cancel left it).
func (s *Service) undoIfRolledBack(ctx context.Context, chatID, runID string, cause error) {
	if chatID != "" && errors.Is(cause, runcontrol.ErrUserRollback) {
		s.undo(ctx, chatID, []string{runID}, "")
	}
}

// cancelScope cancels a scope with cause (a user's cancel or rollback).
func (s *Service) cancelScope(scope runcontrol.Scope, cause error) (*CancelResult, error) {
	res, err := s.ctl.Cancel(s.base, scope, cause)
	if err != nil {
		return nil, err
	}
	return cancelResult(res), nil
}

// cancelResult is run control's answer as the service's (a cancelled
// answer always lists its runs, if none).
func cancelResult(res runcontrol.CancelResult) *CancelResult {
	out := &CancelResult{Status: res.Status, RunIDs: res.RunIDs}
	if out.Status == runcontrol.StatusCancelled && out.RunIDs == nil {
		out.RunIDs = []string{}
	}
	return out
}
