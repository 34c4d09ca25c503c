package chat

import (
	"context"
	"errors"
	"time"

	"chatgraph/runtime"
)

// A run's terminal event and final record are committed before, or with,
// its answer: with a Joiner store the answer joins the end's commit; with
// other stores it is written after it (a stopped one's text read from
// the log: stopped.go), as it is for a run that could not start, whose
// failed record and log are written first (failRun). The process that
// runs a run holds its terminal event back from its subscribers until
// the answer is final (terminalHold). A reader of the store — a replay,
// GET /runs/{id}, in this process or another — may find the end a moment
// earlier: AwaitAnswer closes that gap for them.

// answerWait bounds AwaitAnswer's wait for a run whose answer is written
// by another process: one that died before writing it leaves it to
// recovery (settleMessages), and the reader goes on without it.
const answerWait = 2 * time.Second

// AwaitAnswer returns once the answer of run rec, as the store has it,
// is final (its message settled, or answered by a later run, as a
// continued message is); at once for a run that has not ended or has no
// answer. A run bound here is awaited to its end (LiveRun.Done); one that
// ended in another process is polled for at most answerWait. It returns
// ctx's error if ctx ends first, else nil.
func (s *Service) AwaitAnswer(ctx context.Context, rec *runtime.RunRecord) error {
	if !rec.Status.Finished() {
		return nil
	}
	runID := rec.ID
	if lr := s.Live(runID); lr != nil {
		select {
		case <-lr.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mid, _ := rec.Attrs["messageId"].(string)
	if mid == "" || rec.ChatID == "" {
		return nil
	}
	deadline := time.Now().Add(answerWait)
	for pause := 2 * time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		m, err := s.chats.GetMessage(ctx, rec.ChatID, mid)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return ctx.Err() // unreadable: the reader goes on
		}
		if err != nil || m.RunID != runID || m.Status.Settled() {
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
