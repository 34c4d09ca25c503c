package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// queuedTurn is what a turn's reservation keeps in its input
// (RunRecord.Input, which the run's creation replaces with the run's own)
// so that recovery can start the turn after its process died before the
// run began: only what neither the turn's messages nor the reservation's
// other fields hold. Its user message holds the content, the agent and
// the user's tools; the reservation its kind, chat, graph version, entry
// nodes, messages (attrs), parent run and client request id; a client's
// transcript was written as messages. A reservation without it (written
// by an older build) cannot be rebuilt and is failed lost.
type queuedTurn struct {
	// Queued is the form's version (1); it tells the form from any other
	// input.
	Queued      int          `json:"queued"`
	ClientTools []ClientTool `json:"clientTools,omitempty"`
	// RetryTools are a retry's own user tools (null: its user message's).
	RetryTools []string `json:"retryTools"`
	// Resume (a continue) answers the continued run's only interrupt;
	// Answers answer several, by interrupt id.
	Resume  any            `json:"resume,omitempty"`
	Answers map[string]any `json:"answers,omitempty"`
	// Strategy is how the turn waited for its chat (none: enqueue, as
	// written by builds before it was kept).
	Strategy runcontrol.Strategy `json:"strategy,omitempty"`
}

const queuedTurnForm = 1

// queued is the reservation's input: the turn as recovery rebuilds it.
func (t *turn) queued() *queuedTurn {
	q := &queuedTurn{Queued: queuedTurnForm, ClientTools: t.req.ClientTools, RetryTools: t.retryTools,
		Resume: t.value, Answers: t.values}
	if t.req.Strategy != runcontrol.Enqueue {
		q.Strategy = t.req.Strategy
	}
	return q
}

// queuedOf reads a reservation's queuedTurn (false: the reservation has
// none, an older build's).
func queuedOf(rec *runtime.RunRecord) (*queuedTurn, bool) {
	if rec.Input == nil {
		return nil, false
	}
	b, err := json.Marshal(rec.Input)
	if err != nil {
		return nil, false
	}
	var q queuedTurn
	if json.Unmarshal(b, &q) != nil || q.Queued != queuedTurnForm {
		return nil, false
	}
	return &q, true
}

// errNotReserved: a reservation recovery was to start is one no more —
// its run began, or was ended, in another process meanwhile.
var errNotReserved = errors.New("the run is no longer reserved")

// rebuild is the turn a reservation was written by, read back from the
// reservation (rec), its queuedTurn and its messages, as prepare made it
// for the call that reserved it.
func (s *Service) rebuild(ctx context.Context, rec *runtime.RunRecord, q *queuedTurn, plans map[string]*runtime.Plan) (*turn, error) {
	kind := Kind(rec.Kind)
	crid, _ := rec.Attrs["clientRequestId"].(string)
	req := Request{Kind: kind, ChatID: rec.ChatID, ClientRequestID: crid, Strategy: runcontrol.Enqueue,
		ClientTools: q.ClientTools, Resume: q.Resume}
	if q.Strategy == runcontrol.Interrupt || q.Strategy == runcontrol.Rollback {
		req.Strategy = q.Strategy
	}
	if rec.ChatID == "" {
		return nil, fmt.Errorf("reservation %s names no chat", rec.ID)
	}
	c, err := s.chats.GetChat(ctx, rec.ChatID)
	if err != nil {
		return nil, err
	}
	p, err := s.planOf(ctx, rec, plans)
	if err != nil {
		return nil, err
	}
	t := &turn{req: req, chat: c, graph: p.Graph(), plan: p, entries: rec.EntryNodeIDs, retryTools: q.RetryTools}
	mid, _ := rec.Attrs["messageId"].(string)
	if t.assistant, err = s.chats.GetMessage(ctx, c.ID, mid); err != nil {
		return nil, fmt.Errorf("its message %s: %w", mid, err)
	}
	if t.assistant.RunID != rec.ID {
		return nil, fmt.Errorf("its message %s belongs to run %s", mid, t.assistant.RunID)
	}
	switch kind {
	case KindContinueMessage:
		if t.parentRun, err = s.runs.GetRun(ctx, rec.ParentID); err != nil {
			return nil, fmt.Errorf("the continued run %s: %w", rec.ParentID, err)
		}
		t.value, t.values = q.Resume, q.Answers
	case KindStreamChat, KindStreamAgentChat, KindRetryMessage, KindEditUserMessage:
		uid, _ := rec.Attrs["userMessageId"].(string)
		if t.user, err = s.chats.GetMessage(ctx, c.ID, uid); err != nil {
			return nil, fmt.Errorf("its user message %s: %w", uid, err)
		}
		t.newUser = t.user.TurnRunID == rec.ID
	default:
		return nil, fmt.Errorf("unknown chat call %q", kind)
	}
	return t, nil
}

// relaunch starts a reserved turn whose process died before its run
// began, through the launch path of a new turn (enqueue, bound under its
// chat and request id: its connection, if it had one, is gone), as the
// same run and answering the same message. It returns once the run has
// its place in its chat's line, holds the chat's turn, or has ended
// without it (launch waits for that).
//
// Claim. Several processes may find the reservation unbound at once;
// exactly one launches it, because launch binds the run (RunScope(id))
// before its write, and the write here re-reads the record and goes on
// only if it is still pending:
//   - Bind is exclusive across the processes that share run control
//     (ErrAlreadyBound: one Redis script, or one mutex in memory), so
//     while one process holds the binding no other passes it;
//   - the holder keeps the binding from before that re-read until its
//     run has ended, and every way its launch ends after the re-read
//     leaves the record no longer pending (the run's creation replaced
//     it, or failRun ended it), so a process that binds after the holder
//     released reads a record that is not pending and stops;
//   - the exception, Bind taking over the binding of an earlier
//     incarnation of the same --instance-id (runcontrol/redis), is a
//     process that died; and whatever happens, the store creates the run
//     over a pending record once only (CreateRun, CreateClaimed:
//     ErrRunExists over any other), so a second launch never executes it.
func (s *Service) relaunch(rec *runtime.RunRecord, t *turn) error {
	lr := newLiveRun(rec.ID, t.chat.ID, t.assistant.ID, t.graph)
	scopes := append([]runcontrol.Scope{runcontrol.ChatScope(t.chat.ID)}, requestScopes(t.chat.ID, "", t.req.ClientRequestID)...)
	l := s.turnLaunch(t, rec.ID, lr, scopes, rec)
	l.strategy = t.req.Strategy
	l.write = func(ctx context.Context, _ bool) ([]any, error) {
		now, err := s.runs.GetRun(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		if now.Status != runtime.RunPending {
			return nil, fmt.Errorf("%w: run %s is %s", errNotReserved, rec.ID, now.Status)
		}
		return nil, nil // its messages are written: they were with the reservation
	}
	if err := s.launch(context.Background(), l); err != nil {
		return err
	}
	s.log.Info("recovery: started a queued turn whose process died", "run", rec.ID, "chat", rec.ChatID, "message", t.assistant.ID)
	return nil
}

// settleReservations takes up the runs reserved by turns whose process
// died before the run began (they waited in their chat's queue): no
// process has them bound, so nothing else would ever start or end them.
// (A turn binds its run before it writes the reservation, so an unbound
// reservation has no live process.) A reservation the turn can be
// rebuilt from (queuedTurn) is started again (relaunch), behind whatever
// holds its chat, and a chat's reservations one after the other in the
// order they were made (relaunchChat). A chat with a run that is running
// but bound nowhere (recovery has not taken it back yet) keeps its
// reservations for a later pass, so they never overtake it. Other
// reservations, and those whose turn is gone (the chat deleted, say),
// are failed with code lost (their messages too). It returns how many
// reservations it failed and chats whose reservations it is starting.
func (s *Service) settleReservations(ctx context.Context) int {
	ins, ok := s.runs.(runtime.Inspector)
	if !ok {
		return 0
	}
	recs, err := ins.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunPending}, Limit: 500})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: listing reserved runs", "err", err)
		}
		return 0
	}
	n := 0
	var chats []string
	for _, rec := range recs {
		if s.Live(rec.ID) != nil {
			continue
		}
		if _, ok := queuedOf(rec); !ok || rec.ChatID == "" {
			// Lost only once run control says that no process has it:
			// unsure (Redis unreachable), a later pass asks again.
			if bound, err := s.Bound(ctx, rec.ID); err == nil && !bound {
				s.failRun(ctx, nil, rec, errLost)
				n++
			}
			continue
		}
		if !slices.Contains(chats, rec.ChatID) {
			chats = append(chats, rec.ChatID)
		}
	}
	for _, chatID := range chats {
		if !s.takeRelaunch(chatID) {
			continue // this process is starting its reservations already
		}
		if s.awaitsRecovery(ctx, ins, chatID) {
			s.endRelaunch(chatID)
			continue
		}
		n++
		go s.relaunchChat(ctx, ins, chatID)
	}
	return n
}

// relaunchChat starts the reservations of one chat that no process has,
// oldest first, each once the one before has its place in the chat's
// line (or holds the chat's turn, or ended): all are in line within
// milliseconds, and a new turn of the chat waits for that
// (afterRelaunch).
// It stops at one it cannot start here (bound in another process, say):
// the later ones wait for a later pass rather than overtake it.
func (s *Service) relaunchChat(ctx context.Context, ins runtime.Inspector, chatID string) {
	defer s.endRelaunch(chatID)
	recs, err := ins.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunPending}, ChatID: chatID, Limit: 500})
	if err != nil {
		return
	}
	slices.SortFunc(recs, func(a, b *runtime.RunRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	plans := map[string]*runtime.Plan{}
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		if s.Live(rec.ID) != nil {
			continue // this process's own: in the chat's queue already
		}
		if bound, err := s.Bound(ctx, rec.ID); bound || err != nil {
			return // its process lives and starts it (not rebuilt here to learn that), or unsure
		}
		q, ok := queuedOf(rec)
		var t *turn
		if ok {
			t, err = s.rebuild(ctx, rec, q, plans)
		}
		if !ok || err != nil {
			if bound, err := s.Bound(ctx, rec.ID); bound || err != nil {
				return // bound meanwhile: its process comes first (or unsure)
			}
			cause := errLost
			if err != nil {
				cause = fmt.Errorf("%w (%v)", errLost, err)
			}
			s.failRun(ctx, nil, rec, cause)
			continue
		}
		if err := s.relaunch(rec, t); err != nil {
			// Bound elsewhere (that process starts it), started meanwhile,
			// or not admitted now: a later pass looks again.
			s.log.Debug("recovery: queued turn not started here", "run", rec.ID, "err", err)
			return
		}
	}
}

// awaitsRecovery reports whether chat chatID has a run that is running
// but bound nowhere: its process died and recovery has not taken it back.
func (s *Service) awaitsRecovery(ctx context.Context, ins runtime.Inspector, chatID string) bool {
	running, err := ins.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunRunning}, ChatID: chatID, Limit: 100})
	if err != nil {
		return true // a later pass asks again
	}
	for _, r := range running {
		if bound, err := s.Bound(ctx, r.ID); err != nil || !bound {
			return true
		}
	}
	return false
}

// takeRelaunch marks chatID's reservations as being started by this
// process (false: they are already).
func (s *Service) takeRelaunch(chatID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.relaunching[chatID]; ok {
		return false
	}
	if s.relaunching == nil {
		s.relaunching = map[string]chan struct{}{}
	}
	s.relaunching[chatID] = make(chan struct{})
	return true
}

func (s *Service) endRelaunch(chatID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.relaunching[chatID]; ok {
		close(ch)
		delete(s.relaunching, chatID)
	}
}

// afterRelaunch waits, for a new turn of chat chatID, until this
// process's relaunch of the chat's reservations (if one is going on) has
// placed them in the chat's line — milliseconds: each is placed, not run
// — so the new turn queues behind them, in the order the messages came.
// ctx's end ends the wait with its error.
func (s *Service) afterRelaunch(ctx context.Context, chatID string) error {
	s.mu.Lock()
	ch := s.relaunching[chatID]
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
