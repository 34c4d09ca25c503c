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
// send fails. For a run executing here it subscribes to the hub, which
// hands back the frames it kept after `after` and says up to which seq
// the store has the older ones; those are read from the store first. A
// subscriber the hub dropped for being slow resubscribes the same way.
// A run executing in another process (or finished) is read from the
// store, every PollInterval until its terminal event. idle, when not
// nil, is called whenever nothing was sent for a heartbeat interval.
func (s *Server) follow(ctx context.Context, runID string, after int64, send func(frame) error, idle func() error) error {
	var tick <-chan time.Time
	if idle != nil {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		tick = t.C
	}
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			return idle()
		case <-time.After(s.cfg.PollInterval):
			return nil
		}
	}
	for {
		sub, backlog, base := s.hub.subscribe(runID, after)
		if sub == nil && s.cfg.Relay != nil {
			if handled, err := s.followRemote(ctx, runID, &after, send, tick, idle); handled {
				return err
			}
		}
		if sub == nil {
			// Not executing here: the store has it (or will, from the
			// process that executes it).
			done, n, err := s.replay(ctx, runID, &after, 0, send)
			if errors.Is(err, runtime.ErrRunNotFound) && (after > 0 || n > 0) {
				return nil // deleted meanwhile (a rollback)
			}
			if err != nil && !errors.Is(err, runtime.ErrRunNotFound) || done {
				return err
			}
			rec, err := s.store.GetRun(ctx, runID)
			if errors.Is(err, runtime.ErrRunNotFound) && s.svc.Bound(ctx, runID) {
				// Accepted by another process, not started yet.
				if err := wait(); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			if rec.Status.Finished() && after >= rec.LastSeq {
				return nil
			}
			if err := wait(); err != nil {
				return err
			}
			continue
		}
		// The part the hub no longer keeps is in the store (it may lag
		// behind a batch: wait for it).
		for after < base {
			done, _, err := s.replay(ctx, runID, &after, base, send)
			if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				sub.Close()
				return err
			}
			if done {
				sub.Close()
				return nil
			}
			if after < base {
				if err := wait(); err != nil {
					sub.Close()
					return err
				}
			}
		}
		ended, err := s.forward(ctx, sub, backlog, &after, send, tick, idle)
		if ended || err != nil {
			return err
		}
	}
}

// followRemote follows a run that is not executing here through the
// relay: it subscribes first, then reads the log, then sends relayed
// events as they come; an event the relay skipped is read from the log
// (every PollInterval), and relayed events that arrive ahead of it wait
// in order. handled is false when the relay cannot subscribe (the caller
// polls the log instead).
func (s *Server) followRemote(ctx context.Context, runID string, after *int64, send func(frame) error,
	tick <-chan time.Time, idle func() error) (handled bool, err error) {
	evs, stop, err := s.cfg.Relay.Subscribe(ctx, runID)
	if err != nil {
		s.log.Warn("relay: subscribe; polling the log", "run", runID, "err", err)
		return false, nil
	}
	defer stop()
	const maxPending = 16384
	pending := map[int64]frame{}
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	deliver := func(f frame) (bool, error) { // (ended, err)
		if err := send(f); err != nil {
			return false, err
		}
		*after = f.Seq
		if f.Type.Terminal() {
			return true, nil
		}
		for {
			next, ok := pending[*after+1]
			if !ok {
				return false, nil
			}
			delete(pending, next.Seq)
			if err := send(next); err != nil {
				return false, err
			}
			*after = next.Seq
			if next.Type.Terminal() {
				return true, nil
			}
		}
	}
	readLog := true
	for {
		if readLog {
			readLog = false
			done, n, err := s.replay(ctx, runID, after, 0, send)
			switch {
			case errors.Is(err, runtime.ErrRunNotFound) && (*after > 0 || n > 0):
				return true, nil // deleted meanwhile (a rollback)
			case errors.Is(err, runtime.ErrRunNotFound) && s.svc.Bound(ctx, runID):
			case err != nil || done:
				return true, err
			}
			for seq := range pending {
				if seq <= *after {
					delete(pending, seq)
				}
			}
			if next, ok := pending[*after+1]; ok {
				delete(pending, next.Seq)
				if ended, err := deliver(next); ended || err != nil {
					return true, err
				}
			}
			if rec, err := s.store.GetRun(ctx, runID); err == nil && rec.Status.Finished() && *after >= rec.LastSeq {
				return true, nil
			}
		}
		select {
		case ev, ok := <-evs:
			if !ok {
				return false, nil
			}
			f := frame{Seq: ev.Seq, Type: runtime.EventType(ev.Type), JSON: ev.Envelope}
			switch {
			case f.Seq <= *after:
			case f.Seq == *after+1:
				if ended, err := deliver(f); ended || err != nil {
					return true, err
				}
			case len(pending) < maxPending:
				pending[f.Seq] = f
			}
		case <-poll.C:
			readLog = true
		case <-tick:
			if err := idle(); err != nil {
				return true, err
			}
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
}

// forward sends the backlog and then the live events of sub; ended
// reports the terminal event. It returns (false, nil) when the caller
// must resubscribe (dropped, topic closed, or a gap).
func (s *Server) forward(ctx context.Context, sub *subscription, backlog []frame, after *int64, send func(frame) error,
	tick <-chan time.Time, idle func() error) (ended bool, err error) {
	defer sub.Close()
	deliver := func(f frame) (bool, bool, error) { // (stop, ended, err)
		if f.Seq <= *after {
			return false, false, nil
		}
		if f.Seq != *after+1 {
			return true, false, nil // cannot happen; resubscribing fills it
		}
		if err := send(f); err != nil {
			return true, false, err
		}
		*after = f.Seq
		if f.Type.Terminal() {
			return true, true, nil
		}
		return false, false, nil
	}
	for _, f := range backlog {
		if stop, end, err := deliver(f); stop {
			return end, err
		}
	}
	var buf []frame
	for {
		frames, open := sub.Take(buf)
		for _, f := range frames {
			if stop, end, err := deliver(f); stop {
				return end, err
			}
		}
		if !open {
			return false, nil
		}
		buf = frames
		select {
		case <-sub.Ready():
		case <-tick:
			if err := idle(); err != nil {
				return false, err
			}
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// replay sends the logged events after *after (up to seq `until` when it
// is positive); done reports a terminal event, n how many were sent.
func (s *Server) replay(ctx context.Context, runID string, after *int64, until int64, send func(frame) error) (done bool, n int, err error) {
	for {
		evs, err := s.store.Events(ctx, runID, *after, logPage)
		if err != nil {
			return false, n, err
		}
		for _, ev := range evs {
			if ev.Seq <= *after {
				continue
			}
			if until > 0 && ev.Seq > until {
				return false, n, nil
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

// sseWriter writes Server-Sent Events with a deadline on every write.
// One goroutine writes to it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte // reused: the response writer copies what it is given
}

func (w *sseWriter) write(b []byte) error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	return w.rc.Flush()
}

func (w *sseWriter) event(f frame) error {
	buf := append(w.buf[:0], "id: "...)
	buf = strconv.AppendInt(buf, f.Seq, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, f.Type...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, f.JSON...)
	buf = append(buf, "\n\n"...)
	w.buf = buf
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
	if err := s.runExists(c.Request().Context(), runID); err != nil {
		return err
	}
	return s.serveSSE(c, runID, after)
}

// runExists answers nil for a run that is stored, executing here, or
// bound in any process; else the store's not-found error.
func (s *Server) runExists(ctx context.Context, runID string) error {
	if s.svc.Live(runID) != nil || s.hub.live(runID) {
		return nil
	}
	_, err := s.store.GetRun(ctx, runID)
	if errors.Is(err, runtime.ErrRunNotFound) && s.svc.Bound(ctx, runID) {
		return nil
	}
	return err
}
