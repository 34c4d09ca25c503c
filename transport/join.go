package transport

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
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
	secs, ok := queryInt(c, "timeout", joinTimeoutDefault, joinTimeoutMax)
	if !ok {
		return badRequest("timeout must be whole seconds from 1 to %d", joinTimeoutMax)
	}
	timeout := time.Duration(secs) * time.Second
	ctx := c.Request().Context()
	id := c.Param("id")
	if err := s.runExists(ctx, id); err != nil {
		return err
	}
	out, ended, err := s.join(ctx, id, timeout)
	if err != nil {
		return err
	}
	if !ended {
		c.Response().Header().Set("Retry-After", "0")
		return c.JSON(http.StatusAccepted, out)
	}
	return c.JSON(http.StatusOK, out)
}

// join waits for run id's end (awaitEnd) and answers the run as it is
// then; ended says whether it has ended, and only then does the answer
// carry its message.
func (s *Server) join(ctx context.Context, id string, timeout time.Duration) (out joinJSON, ended bool, err error) {
	s.metrics.activeStreams.WithLabelValues("join").Inc()
	err = s.awaitEnd(ctx, id, timeout)
	s.metrics.activeStreams.WithLabelValues("join").Dec()
	if err != nil {
		return out, false, err
	}
	run, err := s.runView(ctx, id)
	if err != nil {
		return out, false, err
	}
	out.runJSON = run
	if !run.Status.Finished() {
		return out, false, nil
	}
	if run.ChatID != "" && run.MessageID != "" {
		m, err := s.chats.GetMessage(ctx, run.ChatID, run.MessageID)
		if err != nil && !errors.Is(err, chat.ErrNotFound) {
			return out, false, err
		}
		if m != nil {
			mj := toMessageJSON(m)
			out.Message = &mj
		}
	}
	return out, true, nil
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

// preferredWait is the request's `Prefer: wait=N` (RFC 7240: the client
// would take an answer within N seconds), at most joinTimeoutMax; ok is
// false without one. As RFC 7240 asks, a preference the server cannot
// read is ignored, not refused: the call is then answered as without it.
func preferredWait(c echo.Context) (d time.Duration, ok bool) {
	for _, v := range c.Request().Header.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, val, found := strings.Cut(strings.TrimSpace(pref), "=")
			if !found || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val = strings.Trim(strings.TrimSpace(val), `"`)
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || strings.ContainsAny(val, "+-") {
				return 0, false
			}
			return time.Duration(min(n, joinTimeoutMax)) * time.Second, true
		}
	}
	return 0, false
}

// answerWhenDone answers a chat call that asked to wait (Prefer: wait=N)
// as a join of its run does: 200 with the run and its answer once the
// run has ended, or, when N seconds pass first, the call's usual 202 and
// ticket (the client joins the run or follows its events). Either way it
// says the wait it applied (Preference-Applied). A client that leaves
// while its call waits takes the run with it if the call said
// onDisconnect "cancel", as a client of the call's event stream does.
func (s *Server) answerWhenDone(c echo.Context, f *clientFrame, ticket *chat.Ticket, wait time.Duration) error {
	setTicketHeaders(c, ticket)
	c.Response().Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
	ctx := c.Request().Context()
	out, ended, err := s.join(ctx, ticket.RunID, wait)
	if err != nil {
		if f.OnDisconnect == "cancel" && ctx.Err() != nil {
			s.cancelRunQuietly(ticket.RunID)
		}
		return err
	}
	if !ended {
		return c.JSON(http.StatusAccepted, ticket)
	}
	return c.JSON(http.StatusOK, out)
}
