package chat

import (
	"context"
	"errors"
	"slices"
	"time"

	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// A chat's turn outlives the process holding it (runcontrol.Lingering:
// Redis keeps a held turn a TurnTTL, 30 s at the server's defaults), so
// that a run recovered elsewhere takes its turn back before a run queued
// after it does. A process that dies after its run ended and before it
// released the turn leaves a turn nothing will take back: every run
// queued in the chat would wait out the TurnTTL. Each recovery pass
// therefore looks at the chats in which runs of this process have waited
// for the turn a RecoveryInterval or more, and frees a turn whose holder
// has ended with its message settled (or is gone) and is bound in no
// process, once it has seen the same holder so at two passes in a row:
// a live process releases the turn within milliseconds of its run's end
// (its binding, and the message's write, a little before the turn), so a
// holder still there a pass later belongs to a process that died.

// sweepEndedHolders frees the turns of the chats this process waits in
// whose holder ended in a process that died (see above); it returns how
// many it freed. Only the recovery loop calls it.
func (s *Service) sweepEndedHolders(ctx context.Context) int {
	q, ok := s.queue.(runcontrol.Lingering)
	if !ok {
		return 0
	}
	waitedSince := time.Now().Add(-s.cfg.RecoveryInterval).UnixNano()
	s.mu.Lock()
	var chats []string
	for _, lr := range s.live {
		if since := lr.waitingSince.Load(); since != 0 && since <= waitedSince && !slices.Contains(chats, lr.ChatID) {
			chats = append(chats, lr.ChatID)
		}
	}
	s.mu.Unlock()
	seen := map[string]string{}
	freed := 0
	for _, chatID := range chats {
		holder, err := q.Holder(ctx, chatID)
		if err != nil || holder == "" || !s.endedUnbound(ctx, chatID, holder) {
			continue
		}
		if s.endedHolders[chatID] != holder {
			seen[chatID] = holder // the next pass frees it if it is still there
			continue
		}
		if err := q.Leave(ctx, chatID, holder); err != nil {
			s.log.Warn("recovery: freeing the turn an ended run held", "chat", chatID, "run", holder, "err", err)
			continue
		}
		s.log.Info("recovery: freed the turn of a run that ended in a process that died", "chat", chatID, "run", holder)
		freed++
	}
	s.endedHolders = seen
	return freed
}

// endedUnbound reports whether run runID of chat chatID has ended, with
// its message settled, or is gone, and no process has it bound; an error
// reading any of them is a no. (A live process writes the message after
// the run's binding is released and before the turn is: an unsettled
// message may be its to write still; a dead one's, recovery settles.)
func (s *Service) endedUnbound(ctx context.Context, chatID, runID string) bool {
	if s.Live(runID) != nil {
		return false
	}
	rec, err := s.runs.GetRun(ctx, runID)
	switch {
	case errors.Is(err, runtime.ErrRunNotFound):
	case err != nil || !rec.Status.Finished():
		return false
	default:
		if mid, _ := rec.Attrs["messageId"].(string); mid != "" {
			m, err := s.chats.GetMessage(ctx, chatID, mid)
			if err == nil && m.RunID == runID && !m.Status.Settled() {
				return false
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return false
			}
		}
	}
	bound, err := s.ctl.Active(ctx, runcontrol.RunScope(runID))
	return err == nil && len(bound) == 0
}
