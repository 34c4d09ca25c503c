package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// A WebSocket connection's frames are written in batches. Many goroutines
// send on one connection (a forwarder per followed run, the command
// worker), and the runs' events come in group commits, so the frames of
// one commit for one connection arrive together. Whichever goroutine
// finds the connection idle becomes its sender: it writes the frames
// queued so far and then those queued while it wrote, until none is
// left; the others queue theirs and return. A group commit's publisher
// queues the live frames of waiting forwarders itself (queueEvent,
// subscription.push) and starts a sender for each connection once the
// whole commit is queued (startSender) — or, for a commit with frames for
// few connections, writes them itself as far as the sockets take them at
// once (sendNow), and starts senders only for what is left. A forwarder
// woken otherwise sends
// after the group is published (hub.group), and a new sender yields once
// before its first write, so the frames of one commit for one connection
// go out together. coder/websocket flushes every
// message it writes, so the sender gathers those flushes (wireWriter)
// and writes each batch with one system call, which the client also
// reads with one.

// maxQueuedBytes bounds the frames queued behind a sender that is
// writing; a goroutine that would queue more waits for the queue to
// drain (or for the connection to close, which a stalled write causes).
const maxQueuedBytes = 1 << 20

// keptBufferBytes: a queue or gathering buffer larger than this is let
// go once its batch is written, so an idle connection holds no large
// buffer.
const keptBufferBytes = 8 << 10

// wireWriter is what a WebSocket connection's buffered writer flushes
// into: the connection itself, except while the connection's sender
// gathers a batch, when it keeps the bytes and writes them with release.
// Control frames written meanwhile (a ping, a pong, a close) join the
// batch; each flush is whole frames, so frames never interleave. Safe
// for concurrent use.
type wireWriter struct {
	conn net.Conn
	raw  syscall.RawConn // conn's, for writes that must not wait (nil: it has none)

	mu      sync.Mutex // held across every write to conn
	gather  bool
	pending []byte
}

func (w *wireWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gather {
		w.pending = append(w.pending, p...)
		return len(p), nil
	}
	return w.conn.Write(p)
}

// held reports whether a batch is being gathered, or was left behind by
// a write that did not wait (writeNow) for the sender's next release.
func (w *wireWriter) held() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gather
}

// hold starts gathering.
func (w *wireWriter) hold() {
	w.mu.Lock()
	w.gather = true
	w.mu.Unlock()
}

// release stops gathering and writes what was gathered, in one write.
func (w *wireWriter) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gather = false
	if len(w.pending) == 0 {
		return nil
	}
	_, err := w.conn.Write(w.pending)
	if cap(w.pending) > keptBufferBytes {
		w.pending = nil
	} else {
		w.pending = w.pending[:0]
	}
	return err
}

// sendQueue is a connection's frames waiting for its sender, in the
// order they were sent.
type sendQueue struct {
	mu      sync.Mutex
	drained sync.Cond // signalled when the sender takes the queue or stops
	sending bool      // a goroutine is the sender
	err     error     // the write that failed; every later send returns it
	bytes   []byte    // the frames, end to end
	ends    []int     // where each frame ends in bytes
	spare   []byte    // the last batch's buffers, for the next one
	spareE  []int
}

// send writes one frame, after the frames queued before it. It returns
// once the frame is written, or queued behind the goroutine writing
// (which then writes it); an error means the connection failed and is
// closing. A write that the client has not taken within half the write
// timeout closes the connection with 1008 (the client resumes with
// subscribe afterSeq): the close frame follows the write if the client
// takes it within coder/websocket's close timeout (5s), else the
// connection is cut. Only the connection's own goroutines wait here,
// never a run. b is the caller's again when send returns.
func (wc *wsConn) send(b []byte) error {
	q := wc.lockQueue()
	for q.sending && len(q.bytes) >= maxQueuedBytes && q.err == nil {
		q.drained.Wait()
	}
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return err
	}
	q.bytes = append(q.bytes, b...)
	q.ends = append(q.ends, len(q.bytes))
	if q.sending {
		q.mu.Unlock()
		return nil
	}
	q.sending = true
	// The other goroutines woken by the same group commit are runnable
	// now: let them queue their frames before the first write.
	q.mu.Unlock()
	goruntime.Gosched()
	return wc.drain()
}

// errQueueFull: the connection's queue holds maxQueuedBytes; the frame
// was not queued.
var errQueueFull = errors.New("websocket send queue full")

// queueEvent queues an event frame (the envelope f.JSON wrapped in the
// protocol's event frame) without waiting: a group commit's publisher
// calls it for a subscription whose forwarder waits (subscription.push).
// start reports that no goroutine is the connection's sender and the
// caller must start one (startSender, or sendNow) once it has queued the
// rest of the commit; an error (errQueueFull, or the connection's
// failure) means the frame was not queued, and the forwarder must send
// it.
func (wc *wsConn) queueEvent(f frame) (start bool, err error) {
	q := wc.lockQueue()
	defer q.mu.Unlock()
	switch {
	case q.err != nil:
		return false, q.err
	case len(q.bytes) >= maxQueuedBytes:
		return false, errQueueFull
	}
	q.bytes = appendEventFrame(q.bytes, f)
	q.ends = append(q.ends, len(q.bytes))
	if q.sending {
		return false, nil
	}
	q.sending = true
	// Counted while the forwarder that pushed holds the connection's
	// WaitGroup: serve waits for the sender too.
	wc.wg.Add(1)
	return true, nil
}

// appendEventFrame appends the protocol's event frame of f (its envelope
// wrapped) to b.
func appendEventFrame(b []byte, f frame) []byte {
	b = append(b, `{"type":"event","event":`...)
	b = append(b, f.JSON...)
	return append(b, '}')
}

// lockQueue locks the connection's send queue and returns it; a closing
// connection's queue has its error set, which leaves the line free for
// the close frame.
func (wc *wsConn) lockQueue() *sendQueue {
	q := &wc.q
	q.mu.Lock()
	if q.drained.L == nil {
		q.drained.L = &q.mu
	}
	if q.err == nil {
		q.err = wc.ctx.Err()
	}
	return q
}

// startSender starts the sender queueEvent asked for, on a goroutine of
// its own: the frames of the commit are all queued, so it writes them
// at once, without the yield of send.
func (wc *wsConn) startSender() {
	go func() {
		defer wc.wg.Done()
		_ = wc.drain()
	}()
}

// sendNow is startSender for a caller that may write the frames itself:
// it writes them at once, as far as the socket takes them without
// waiting (writeNow), and starts a sender only for what is left — the
// rest of a write the socket did not take, frames queued meanwhile — or
// when it cannot write at once. It never waits for the client.
func (wc *wsConn) sendNow() {
	if wc.writeNow() {
		wc.wg.Done()
		return
	}
	wc.startSender()
}

// writeNow writes the queued frames with one write that does not wait:
// the caller is the connection's sender (q.sending) and holds it only as
// long as the socket takes bytes at once. It reports whether the sender
// is done (everything written, or the connection failed); false leaves
// the sender's work to a goroutine (drain), which writes first whatever
// the socket did not take. It does nothing, and reports false, when the
// connection cannot be written without waiting (no raw socket) or its
// writer is busy (a control frame in its write).
//
// The frames are written as coder/websocket writes a server's message —
// one unmasked, uncompressed text frame each (compression is never
// negotiated) — with the connection's writer held, so that they go out
// whole between control frames.
func (wc *wsConn) writeNow() bool {
	w := wc.wire
	if w.raw == nil || !w.mu.TryLock() {
		return false
	}
	if w.gather || wc.ctx.Err() != nil {
		w.mu.Unlock()
		return false
	}
	q := &wc.q
	q.mu.Lock()
	batch, ends := q.bytes, q.ends
	q.bytes, q.ends = q.spare[:0], q.spareE[:0]
	q.drained.Broadcast()
	q.mu.Unlock()

	buf := w.pending[:0]
	from := 0
	for _, end := range ends {
		buf = appendTextFrame(buf, batch[from:end])
		from = end
	}
	wc.s.metrics.wsWrites.Inc()
	wc.s.metrics.wsFrames.Add(float64(len(ends)))
	n, err := writeNoWait(w.raw, buf)
	left := err == nil && n < len(buf)
	switch {
	case left:
		// The socket is full: the rest goes out first, in the sender's
		// next release, before any frame written after it.
		w.pending, w.gather = append(buf[:0], buf[n:]...), true
	case cap(buf) > keptBufferBytes:
		w.pending = nil
	default:
		w.pending = buf[:0]
	}
	w.mu.Unlock()

	q.mu.Lock()
	q.spare, q.spareE = batch[:0], ends[:0]
	if err == nil && (left || len(q.ends) > 0) {
		q.mu.Unlock()
		return false
	}
	wc.stopSending(err)
	return true
}

// drain is the connection's sender: it writes what is queued, and what
// is queued meanwhile, until nothing is left, and then is the sender no
// longer. Only the goroutine that set q.sending calls it.
func (wc *wsConn) drain() error {
	q := &wc.q
	var err error
	if wc.wire.held() {
		// What a write that did not wait left behind (writeNow): the rest
		// of frames begun on the wire goes out whatever the connection's
		// state, so that a close frame after it is read as one, and
		// under the stall timer.
		stop := wc.armStall()
		err = wc.wire.release()
		stop()
	}
	q.mu.Lock()
	for len(q.ends) > 0 && err == nil {
		batch, ends := q.bytes, q.ends
		q.bytes, q.ends = q.spare[:0], q.spareE[:0]
		q.drained.Broadcast()
		q.mu.Unlock()
		err = wc.write(batch, ends)
		q.mu.Lock()
		q.spare, q.spareE = batch[:0], ends[:0]
	}
	wc.stopSending(err)
	return err
}

// stopSending ends the sender's turn (q.mu held; stopSending unlocks
// it): after err, the connection is closing and nothing queued can go.
func (wc *wsConn) stopSending(err error) {
	q := &wc.q
	q.sending = false
	switch {
	case err != nil:
		// The connection is closing: what is queued can no longer go.
		q.err = err
		q.bytes, q.ends, q.spare, q.spareE = nil, nil, nil, nil
	case cap(q.spare) > keptBufferBytes || cap(q.bytes) > keptBufferBytes:
		q.bytes, q.ends, q.spare, q.spareE = nil, nil, nil, nil // the queue is empty
	}
	q.drained.Broadcast()
	q.mu.Unlock()
	if err != nil {
		wc.close(websocket.StatusNormalClosure, "")
	}
}

// write writes a batch of frames (frame i ends at ends[i]) with one write
// to the connection, under the stall timer.
func (wc *wsConn) write(batch []byte, ends []int) error {
	if err := wc.ctx.Err(); err != nil {
		return err
	}
	defer wc.armStall()()
	wc.s.metrics.wsWrites.Inc()
	wc.s.metrics.wsFrames.Add(float64(len(ends)))
	wc.wire.hold()
	from := 0
	for _, end := range ends {
		if err := wc.conn.Write(context.Background(), websocket.MessageText, batch[from:end]); err != nil {
			_ = wc.wire.release()
			return err
		}
		from = end
	}
	return wc.wire.release()
}

// armStall starts the stall timer for a write of the sender's and returns
// what stops it: a write that waits half the write timeout closes the
// connection (stalled).
func (wc *wsConn) armStall() (stop func() bool) {
	if wc.stall == nil {
		wc.stall = time.AfterFunc(wc.s.cfg.WriteTimeout/2, wc.stalled)
	} else {
		wc.stall.Reset(wc.s.cfg.WriteTimeout / 2)
	}
	return wc.stall.Stop
}

// appendTextFrame appends p as one unmasked, uncompressed, final text
// frame (RFC 6455, section 5.2): a server's message as coder/websocket
// writes it.
func appendTextFrame(b, p []byte) []byte {
	const finText = 0x81
	switch n := len(p); {
	case n <= 125:
		b = append(b, finText, byte(n))
	case n <= 0xffff:
		b = append(b, finText, 126, byte(n>>8), byte(n))
	default:
		b = append(b, finText, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}
