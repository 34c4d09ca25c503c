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

// sender is where follow delivers a run's frames: send may keep a frame
// in a buffer, flush delivers every frame sent so far (and whatever else
// the stream buffered before). One goroutine calls them.
type sender interface {
	send(frame) error
	flush() error
}

// sendEach is a sender whose send delivers at once (flush does nothing).
type sendEach func(frame) error

func (f sendEach) send(fr frame) error { return f(fr) }
func (sendEach) flush() error          { return nil }

// follow delivers runID's events with seq > after to out, in seq order,
// each exactly once, until the run's terminal event (nil), ctx ends, or
// a send fails. For a run executing here it subscribes to the hub, which
// hands back the frames it kept after `after` and says up to which seq
// the store has the older ones; those are read from the store first. A
// subscriber the hub dropped for being slow resubscribes the same way.
// A run executing in another process (or finished) is read from the
// store, every PollInterval until its terminal event. idle, when not
// nil, is called whenever nothing was sent for a heartbeat interval.
//
// The events of one group commit reach a subscription together: follow
// sends such a batch (or a page of the log) and then flushes out once.
// It flushes before every wait for more events, so no frame sits in a
// buffer while the run is quiet. When it returns, the last frames may
// still be buffered: the caller flushes them, or ends the response
// (net/http then writes them with its end of the stream, in one write).
func (s *Server) follow(ctx context.Context, runID string, after int64, out sender, idle func() error) error {
	var tick <-chan time.Time
	if idle != nil {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		tick = t.C
	}
	wait := func() error {
		if err := out.flush(); err != nil {
			return err
		}
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
			if handled, err := s.followRemote(ctx, runID, &after, out, tick, idle); handled {
				return err
			}
		}
		if sub == nil {
			// Not executing here: the store has it (or will, from the
			// process that executes it).
			done, n, err := s.replay(ctx, runID, &after, 0, out)
			if errors.Is(err, runtime.ErrRunNotFound) && (after > 0 || n > 0) {
				return nil // deleted meanwhile (a rollback)
			}
			if err != nil && !errors.Is(err, runtime.ErrRunNotFound) || done {
				return err
			}
			rec, err := s.store.GetRun(ctx, runID)
			accepted, err := s.acceptedElsewhere(ctx, runID, err)
			if accepted {
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
			done, _, err := s.replay(ctx, runID, &after, base, out)
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
		ended, err := s.forward(ctx, sub, backlog, &after, out, tick, idle)
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
func (s *Server) followRemote(ctx context.Context, runID string, after *int64, out sender,
	tick <-chan time.Time, idle func() error) (handled bool, err error) {
	evs, stop, err := s.cfg.Relay.Subscribe(ctx, runID)
	if err != nil {
		s.log.Warn("relay: subscribe; polling the log", "run", runID, "err", err)
		return false, nil
	}
	defer stop()
	// Relayed events that arrive ahead of one the relay skipped wait
	// here, as many as a live topic keeps; the rest are read from the log
	// with the one skipped.
	const maxPending = maxBacklog
	pending := map[int64]frame{}
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	deliver := func(f frame) (bool, error) { // (ended, err)
		if err := out.send(f); err != nil {
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
			if err := out.send(next); err != nil {
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
			done, n, err := s.replay(ctx, runID, after, 0, out)
			if errors.Is(err, runtime.ErrRunNotFound) && (*after > 0 || n > 0) {
				return true, nil // deleted meanwhile (a rollback)
			}
			if accepted, err := s.acceptedElsewhere(ctx, runID, err); !accepted && (err != nil || done) {
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
		if err := out.flush(); err != nil {
			return true, err
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

// forward sends the backlog and then the live events of sub, flushing
// out after each batch it takes; ended reports the terminal event. It
// returns (false, nil) when the caller must resubscribe (dropped, topic
// closed, or a gap).
//
// When out is a queuer (a WebSocket connection), the publisher of a group
// commit delivers the frames itself while forward waits (subscription.push):
// it queues the frames that follow the last one sent on the connection
// and leaves the rest — a gap, the terminal event, a full queue, a
// closing connection — to forward, which it then wakes.
func (s *Server) forward(ctx context.Context, sub *subscription, backlog []frame, after *int64, out sender,
	tick <-chan time.Time, idle func() error) (ended bool, err error) {
	defer sub.Close()
	deliver := func(f frame) (bool, bool, error) { // (stop, ended, err)
		if f.Seq <= *after {
			return false, false, nil
		}
		if f.Seq != *after+1 {
			return true, false, nil // cannot happen; resubscribing fills it
		}
		if err := out.send(f); err != nil {
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
	var buf, rest []frame // rest: frames a push took and left to forward
	if q, ok := out.(queuer); ok {
		sub.dmu.Lock()
		defer func() {
			sub.push, sub.parked = nil, false
			sub.dmu.Unlock()
		}()
		sub.push = func(p *pushed) bool {
			frames, open := sub.Take(buf)
			buf = frames
			for i, f := range frames {
				if f.Seq <= *after {
					continue
				}
				if f.Seq == *after+1 && !f.Type.Terminal() {
					start, err := q.queue(f)
					if err == nil {
						if start {
							*p = append(*p, q)
						}
						*after = f.Seq
						continue
					}
				}
				rest = append(rest[:0], frames[i:]...)
				return false
			}
			return open
		}
	}
	for {
		for len(rest) > 0 {
			f := rest[0]
			rest = rest[1:]
			if stop, end, err := deliver(f); stop {
				return end, err
			}
		}
		// The backlog and the first batch go out with one flush.
		frames, open := sub.Take(buf)
		for _, f := range frames {
			if stop, end, err := deliver(f); stop {
				return end, err
			}
		}
		if err := out.flush(); err != nil {
			return false, err
		}
		if !open {
			return false, nil
		}
		buf = frames
		if sub.push != nil {
			sub.parked = true
			sub.dmu.Unlock()
		}
		var woke error
		select {
		case <-sub.Ready():
		case <-tick:
			woke = errIdle
		case <-ctx.Done():
			woke = ctx.Err()
		}
		if sub.push != nil {
			sub.dmu.Lock()
			sub.parked = false
		}
		switch {
		case woke == errIdle:
			if err := idle(); err != nil {
				return false, err
			}
		case woke != nil:
			return false, woke
		}
	}
}

// errIdle: forward's wait ended with a heartbeat tick.
var errIdle = errors.New("idle")

// queuer is a sender whose frames the publisher of a group commit may
// queue itself, without waiting (forward): queue fails with the frame not
// queued when it would have to wait (or the stream failed), and reports
// start when the caller must start the stream's sender (startSender)
// once every frame of the commit is queued.
type queuer interface {
	sender
	queue(frame) (start bool, err error)
	startSender()
	// sendNow is startSender for a caller that may write the frames
	// itself, as far as that needs no wait for the client.
	sendNow()
}

// replay sends the logged events after *after (up to seq `until` when it
// is positive), flushing out before it reads the next page (the caller
// flushes the last); done reports a terminal event, n how many were
// sent.
func (s *Server) replay(ctx context.Context, runID string, after *int64, until int64, out sender) (done bool, n int, err error) {
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
			if ev.Type.Terminal() {
				// The end is committed before (or with) the run's answer:
				// its terminal event goes out once the answer is final,
				// what came before it at once.
				if err := out.flush(); err != nil {
					return false, n, err
				}
				rec, err := s.store.GetRun(ctx, runID)
				if err == nil {
					err = s.svc.AwaitAnswer(ctx, rec)
				}
				if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
					return false, n, err
				}
			}
			if err := out.send(f); err != nil {
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
		if err := out.flush(); err != nil {
			return false, n, err
		}
	}
}

// sseWriter writes Server-Sent Events into the response's buffer, with a
// deadline on every write; flush sends what is buffered. It is the
// sender of an SSE stream: a batch of events costs one flush. One
// goroutine writes to it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte // reused: the response writer copies what it is given
	pending bool   // written since the last flush
}

// put writes b without flushing it.
func (w *sseWriter) put(b []byte) error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	w.pending = true
	_, err := w.w.Write(b)
	return err
}

// flush sends what put wrote (nothing when nothing is pending).
func (w *sseWriter) flush() error {
	if !w.pending {
		return nil
	}
	w.pending = false
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// write writes b and flushes it with what was pending.
func (w *sseWriter) write(b []byte) error {
	if err := w.put(b); err != nil {
		return err
	}
	return w.flush()
}

// send puts one event frame; follow flushes after each batch.
func (w *sseWriter) send(f frame) error {
	buf := append(w.buf[:0], "id: "...)
	buf = strconv.AppendInt(buf, f.Seq, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, f.Type...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, f.JSON...)
	buf = append(buf, "\n\n"...)
	w.buf = buf
	return w.put(buf)
}

// comment writes an SSE comment (the heartbeat) and flushes it at once.
func (w *sseWriter) comment(text string) error {
	return w.write([]byte(": " + text + "\n\n"))
}

// serveSSE streams runID's events after seq `after` as SSE until the run
// ends or the client goes away.
func (s *Server) serveSSE(c echo.Context, runID string, after int64) error {
	_ = s.streamSSE(c, runID, after) // it has told the client what it could
	return nil                       // the response is committed: errors cannot be sent as JSON
}

// streamSSE is serveSSE returning follow's outcome: nil once the run's
// end went out (or the run is gone), else why the stream stopped first.
func (s *Server) streamSSE(c echo.Context, runID string, after int64) error {
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
	// The opening comment goes out with follow's first flush (before it
	// waits for anything), the last events when this handler returns.
	if err := w.put([]byte(fmt.Sprintf(": run %s\n\n", runID))); err != nil {
		return err
	}
	err := s.follow(ctx, runID, after, w, func() error { return w.comment("ping") })
	if err != nil && ctx.Err() == nil {
		var e *Error
		if errors.As(err, &e) || errors.Is(err, runtime.ErrRunNotFound) {
			_ = w.comment("error: " + apiError(err).Message)
		} else {
			s.log.Warn("sse stream ended", "run", runID, "err", err)
		}
	}
	return err
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
	if accepted, err := s.acceptedElsewhere(ctx, runID, err); !accepted {
		return err
	}
	return nil
}

// acceptedElsewhere reports whether run runID, which the store lacks
// (err, the store's answer, wraps runtime.ErrRunNotFound), is bound in
// some process: accepted there, its reservation not written yet. Else it
// answers err — or, when run control cannot be asked, an error wrapping
// chat.ErrControlUnavailable rather than a not-found that may be untrue.
func (s *Server) acceptedElsewhere(ctx context.Context, runID string, err error) (bool, error) {
	if !errors.Is(err, runtime.ErrRunNotFound) {
		return false, err
	}
	bound, berr := s.svc.Bound(ctx, runID)
	if berr != nil {
		return false, berr
	}
	if bound {
		return true, nil
	}
	return false, err
}
