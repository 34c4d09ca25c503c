package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/runtime"
)

// logPage is how many events one store read returns.
const logPage = 500

// follow delivers runID's events with seq > after to send, in seq order,
// each exactly once, until the run's terminal event (nil), ctx ends, or
// send fails. It subscribes to the live events first and then reads the
// log, so nothing falls between the two; live events the log already
// gave are skipped by seq. A subscriber the hub dropped for being slow
// catches up from the log the same way. A run executing in another
// process is followed by reading its log every PollInterval. idle, when
// not nil, is called whenever nothing was sent for a heartbeat interval.
func (s *Server) follow(ctx context.Context, runID string, after int64, send func(frame) error, idle func() error) error {
	var tick <-chan time.Time
	if idle != nil {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		tick = t.C
	}
	for {
		sub := s.hub.subscribe(runID)
		done, n, err := s.replay(ctx, runID, &after, send)
		switch {
		case err == nil:
		case errors.Is(err, runtime.ErrRunNotFound) && sub != nil:
			// Bound here, not started yet (queued): wait for it live.
		case errors.Is(err, runtime.ErrRunNotFound) && (after > 0 || n > 0):
			return nil // the run was deleted meanwhile (a rollback)
		default:
			sub.Close()
			return err
		}
		if done {
			sub.Close()
			return nil
		}
		if sub == nil {
			rec, err := s.store.GetRun(ctx, runID)
			if err != nil {
				return err
			}
			if rec.Status.Finished() && after >= rec.LastSeq {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick:
				if err := idle(); err != nil {
					return err
				}
			case <-time.After(s.cfg.PollInterval):
			}
			continue
		}
	live:
		for {
			select {
			case f, ok := <-sub.C():
				if !ok {
					break live // ended or dropped: the log has the rest
				}
				if f.Seq <= after {
					continue
				}
				if f.Seq != after+1 {
					sub.Close()
					break live // a gap cannot happen; if it does, the log fills it
				}
				if err := send(f); err != nil {
					sub.Close()
					return err
				}
				after = f.Seq
				if f.Type.Terminal() {
					sub.Close()
					return nil
				}
			case <-tick:
				if err := idle(); err != nil {
					sub.Close()
					return err
				}
			case <-ctx.Done():
				sub.Close()
				return ctx.Err()
			}
		}
	}
}

// replay sends the logged events after *after; done reports a terminal
// event, n how many were sent.
func (s *Server) replay(ctx context.Context, runID string, after *int64, send func(frame) error) (done bool, n int, err error) {
	for {
		evs, err := s.store.Events(ctx, runID, *after, logPage)
		if err != nil {
			return false, n, err
		}
		for _, ev := range evs {
			if ev.Seq <= *after {
				continue
			}
			f, err := encodeEvent(ev)
			if err != nil {
				return false, n, err
			}
			if err := send(f); err != nil {
				return false, n, err
			}
			*after = ev.Seq
			n++
			if ev.Type.Terminal() {
				return true, n, nil
			}
		}
		if len(evs) < logPage {
			return false, n, nil
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sseWriter writes Server-Sent Events with a deadline on every write.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *sseWriter) write(b []byte) error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	return w.rc.Flush()
}

func (w *sseWriter) event(f frame) error {
	buf := make([]byte, 0, len(f.JSON)+64)
	buf = append(buf, "id: "...)
	buf = strconv.AppendInt(buf, f.Seq, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, f.Type...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, f.JSON...)
	buf = append(buf, "\n\n"...)
	return w.write(buf)
}

func (w *sseWriter) comment(text string) error {
	return w.write([]byte(": " + text + "\n\n"))
}

// serveSSE streams runID's events after seq `after` as SSE until the run
// ends or the client goes away.
func (s *Server) serveSSE(c echo.Context, runID string, after int64) error {
	ctx := c.Request().Context()
	w := &sseWriter{w: c.Response(), rc: http.NewResponseController(c.Response()), timeout: s.cfg.WriteTimeout}
	h := c.Response().Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	s.metrics.activeStreams.WithLabelValues("sse").Inc()
	defer s.metrics.activeStreams.WithLabelValues("sse").Dec()
	if err := w.comment(fmt.Sprintf("run %s", runID)); err != nil {
		return nil
	}
	err := s.follow(ctx, runID, after, w.event, func() error { return w.comment("ping") })
	if err != nil && ctx.Err() == nil {
		var e *Error
		if errors.As(err, &e) || errors.Is(err, runtime.ErrRunNotFound) {
			_ = w.comment("error: " + apiError(err).Message)
		} else {
			s.log.Warn("sse stream ended", "run", runID, "err", err)
		}
	}
	return nil // the response is committed: errors cannot be sent as JSON
}

// runEvents is GET /runs/{id}/events: SSE from Last-Event-ID or ?after=.
func (s *Server) runEvents(c echo.Context) error {
	runID := c.Param("id")
	var after int64
	if v := c.Request().Header.Get("Last-Event-ID"); v != "" {
		n, err := parseSeq(v)
		if err != nil {
			return err
		}
		after = n
	} else if v := c.QueryParam("after"); v != "" {
		n, err := parseSeq(v)
		if err != nil {
			return err
		}
		after = n
	}
	// Answer 404 as JSON before committing to a stream.
	if s.liveRun(runID) == nil && !s.hub.live(runID) {
		if _, err := s.store.GetRun(c.Request().Context(), runID); err != nil {
			return err
		}
	}
	return s.serveSSE(c, runID, after)
}
