package transport

import (
	"cmp"
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
// woken otherwise sends after the group is published (hub.group), and a
// new sender yields once before its first write, so the frames of one
// commit for one connection go out together. The sender frames a batch
// itself (wireWriter.frames) and writes it with one system call, which
// the client also reads with one; coder/websocket writes only the
// control frames.

// maxQueuedBytes bounds the frames queued behind a sender that is
// writing; a goroutine that would queue more waits for the queue to
// drain (or for the connection to close, which a stalled write causes).
const maxQueuedBytes = 1 << 20

// keptBufferBytes: a queue or write buffer larger than this is let go
// once its batch is written, so an idle connection holds no large
// buffer.
const keptBufferBytes = 8 << 10

// wireWriter is a WebSocket connection's writing end. The connection's
// sender writes the data frames itself (frames: a batch in one write,
// framed as coder/websocket frames a server's message — one unmasked
// text frame each, compression never being negotiated); coder/websocket's
// buffered writer flushes its control frames (a ping, a pong, a close)
// into Write, each as one whole frame. mu is held across every write to
// the connection, so frames never interleave. Safe for concurrent use.
type wireWriter struct {
	conn net.Conn
	raw  syscall.RawConn // conn's, for writes that must not wait (nil: it has none)

	mu sync.Mutex // held across every write to conn
	// left is what a write that did not wait (wsConn.writeNow) could not
	// write: it goes first, before any later frame — the sender's next
	// write (frames), which writes it whatever the connection's state,
	// and the control frames flushed meanwhile, which join it.
	left []byte
	// closed: a close frame went out (or joined left); no data frame may
	// follow it.
	closed bool
	buf    []byte // the last batch's bytes, reused
}

// Write takes coder/websocket's flushes: whole control frames.
func (w *wireWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > 0 && p[0]&0x0f == opClose {
		w.closed = true
	}
	if len(w.left) > 0 {
		w.left = append(w.left, p...)
		return len(p), nil
	}
	return w.conn.Write(p)
}

// opClose is the opcode of a close frame (RFC 6455, section 5.2).
const opClose = 0x8

// hasLeft reports whether a write that did not wait left bytes behind.
func (w *wireWriter) hasLeft() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.left) > 0
}

// frames writes what is left and then the frames of batch (frame i ends
// at ends[i]), in one write. Once a close frame went out, it writes what
// is left alone and refuses the frames (net.ErrClosed).
func (w *wireWriter) frames(batch []byte, ends []int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var refused error
	if w.closed && len(ends) > 0 {
		batch, ends, refused = nil, nil, net.ErrClosed
	}
	b := w.batch(batch, ends)
	var err error
	if len(b) > 0 {
		_, err = w.conn.Write(b)
	}
	w.keep(b, len(b)) // after a failed write nothing more goes: the connection closes
	return cmp.Or(err, refused)
}

// batch returns what is left followed by the frames of batch, in the
// reused buffer; nothing is left then. (w.mu held)
func (w *wireWriter) batch(batch []byte, ends []int) []byte {
	b := append(w.buf[:0], w.left...)
	w.left = w.left[:0]
	from := 0
	for _, end := range ends {
		b = appendTextFrame(b, batch[from:end])
		from = end
	}
	return b
}

// keep takes back b, written up to n: the rest is left for the next
// write, and the buffers are kept for the next batch unless large.
// (w.mu held)
func (w *wireWriter) keep(b []byte, n int) {
	w.left = append(w.left, b[n:]...)
	if cap(b) > keptBufferBytes {
		b = nil
	}
	w.buf = b[:0]
	if len(w.left) == 0 && cap(w.left) > keptBufferBytes {
		w.left = nil
	}
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

// take takes the queued frames for a write; frames queued meanwhile go
// into the last batch's buffers. (q.mu held)
func (q *sendQueue) take() (batch []byte, ends []int) {
	batch, ends = q.bytes, q.ends
	q.bytes, q.ends = q.spare[:0], q.spareE[:0]
	q.drained.Broadcast()
	return batch, ends
}

// giveBack keeps a written batch's buffers for the next. (q.mu held)
func (q *sendQueue) giveBack(batch []byte, ends []int) {
	q.spare, q.spareE = batch[:0], ends[:0]
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
// connection cannot be written without waiting (no raw socket), its
// writer is busy (a control frame in its write) or has bytes left, or the
// connection is closing.
func (wc *wsConn) writeNow() bool {
	w := wc.wire
	if w.raw == nil || !w.mu.TryLock() {
		return false
	}
	if w.closed || len(w.left) > 0 || wc.ctx.Err() != nil {
		w.mu.Unlock()
		return false
	}
	q := &wc.q
	q.mu.Lock()
	batch, ends := q.take()
	q.mu.Unlock()
	b := w.batch(batch, ends)
	wc.countWrite(ends)
	n, err := writeNoWait(w.raw, b)
	if err != nil {
		n = len(b) // nothing more goes: the connection closes
	}
	w.keep(b, n)
	left := len(w.left) > 0
	w.mu.Unlock()

	q.mu.Lock()
	q.giveBack(batch, ends)
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
	if wc.wire.hasLeft() {
		// What a write that did not wait left behind (writeNow): the rest
		// of frames begun on the wire goes out whatever the connection's
		// state, so that a close frame after it is read as one, and
		// under the stall timer.
		stop := wc.armStall()
		err = wc.wire.frames(nil, nil)
		stop()
	}
	q.mu.Lock()
	for len(q.ends) > 0 && err == nil {
		batch, ends := q.take()
		q.mu.Unlock()
		err = wc.write(batch, ends)
		q.mu.Lock()
		q.giveBack(batch, ends)
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
	wc.countWrite(ends)
	return wc.wire.frames(batch, ends)
}

// countWrite counts a write of a batch of frames (frame i ends at ends[i])
// in the server's metrics.
func (wc *wsConn) countWrite(ends []int) {
	wc.s.metrics.wsWrites.Inc()
	wc.s.metrics.wsFrames.Add(float64(len(ends)))
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
