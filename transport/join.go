package transport

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
)

// Bounds of GET /runs/{id}/join's ?timeout=, in seconds.
const (
	joinTimeoutDefault = 30
	joinTimeoutMax     = 600
)

// joinRun is GET /runs/{id}/join: it waits for the run to end —
// completed, failed, cancelled, or interrupted (paused for a human) — and
// answers 200 with the run as GET /runs/{id} shows it and the answer it
// wrote, final by then.
// ?timeout= (seconds, 1 to 600, default 30) bounds the wait: a run still
// pending or running then is answered 202 with what it is now, and the
// caller joins again. The wait follows the run's events (the hub here,
// the relay or the log for a run another process executes), so it ends
// as soon as the run's terminal event is committed.
func (s *Server) joinRun(c echo.Context) error {
	timeout, err := joinTimeout(c.QueryParam("timeout"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := c.Param("id")
	if err := s.runExists(ctx, id); err != nil {
		return err
	}
	s.metrics.activeStreams.WithLabelValues("join").Inc()
	err = s.awaitEnd(ctx, id, timeout)
	s.metrics.activeStreams.WithLabelValues("join").Dec()
	if err != nil {
		return err
	}
	run, err := s.runView(ctx, id)
	if err != nil {
		return err
	}
	if !run.Status.Finished() {
		c.Response().Header().Set("Retry-After", "0")
		return c.JSON(http.StatusAccepted, joinJSON{runJSON: run})
	}
	out := joinJSON{runJSON: run}
	if run.ChatID != "" && run.MessageID != "" {
		m, err := s.chats.GetMessage(ctx, run.ChatID, run.MessageID)
		if err != nil && !errors.Is(err, chat.ErrNotFound) {
			return err
		}
		if m != nil {
			mj := toMessageJSON(m)
			out.Message = &mj
		}
	}
	return c.JSON(http.StatusOK, out)
}

// joinJSON is GET /runs/{id}/join's answer: the run and, once it has
// ended, the assistant message it answers, as the chat holds it now.
type joinJSON struct {
	runJSON
	Message *messageJSON `json:"message,omitempty"`
}

// awaitEnd returns once run id's terminal event has been committed (or
// the run is gone), after timeout, or when the server shuts down (its
// own runs have ended by then; one another process executes has not, and
// the client, answered what the run is then, joins again elsewhere); an
// error only when the wait failed for another reason (the store, the
// client leaving).
func (s *Server) awaitEnd(ctx context.Context, id string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	// Only what comes after the stored log matters: start there.
	var after int64
	if rec, err := s.store.GetRun(ctx, id); err == nil {
		if rec.Status.Finished() {
			return nil
		}
		after = rec.LastSeq
	}
	err := s.follow(wctx, id, after, sendEach(func(frame) error { return nil }), nil)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return nil // the timeout or the shutdown: the caller answers what the run is now
	}
	return err
}

// joinTimeout parses ?timeout= (whole seconds).
func joinTimeout(v string) (time.Duration, error) {
	if v == "" {
		return joinTimeoutDefault * time.Second, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > joinTimeoutMax {
		return 0, badRequest("timeout must be whole seconds from 1 to %d", joinTimeoutMax)
	}
	return time.Duration(n) * time.Second, nil
}
