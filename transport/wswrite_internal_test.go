package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// gateConn counts the writes to a connection and holds the first one
// until released.
type gateConn struct {
	net.Conn
	mu      sync.Mutex
	writes  []int // bytes per write
	hold    bool
	started chan struct{}
	release chan struct{}
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(p))
	hold := c.hold
	c.hold = false
	c.mu.Unlock()
	if hold {
		close(c.started)
		<-c.release
	}
	return c.Conn.Write(p)
}

type gateHijacker struct {
	http.ResponseWriter
	gate *gateConn
}

func (h gateHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := h.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.gate.Conn = conn
	return h.gate, brw, nil
}

// wsPair accepts a WebSocket connection through hijacker(w) and returns
// the server's side of it and a client.
func wsPair(t *testing.T, hijacker func(http.ResponseWriter) http.Hijacker) (*wsConn, *websocket.Conn) {
	return wsPairDialed(t, hijacker, nil)
}

// wsPairDialed is wsPair with the client dialed with opts.
func wsPairDialed(t *testing.T, hijacker func(http.ResponseWriter) http.Hijacker, opts *websocket.DialOptions) (*wsConn, *websocket.Conn) {
	accepted := make(chan *wsConn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire := &wireWriter{}
		conn, err := websocket.Accept(wsUpgrade{ResponseWriter: w, hj: hijacker(w), wire: wire}, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		ctx, stop := context.WithCancel(context.Background())
		accepted <- &wsConn{s: &Server{cfg: Config{WriteTimeout: time.Minute}, metrics: newMetrics(nil)}, conn: conn, wire: wire, ctx: ctx, stop: stop}
	}))
	t.Cleanup(srv.Close)
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http"), opts)
	require.NoError(t, err)
	t.Cleanup(func() { client.CloseNow() })
	wc := <-accepted
	t.Cleanup(func() { wc.conn.CloseNow() })
	return wc, client
}

// A WebSocket connection's frames sent while its sender writes are queued
// without waiting and go out together, in one write, in the order they
// were sent; the client reads every frame once.
func TestWebSocketFramesQueuedBehindAWriteGoOutInOneWrite(t *testing.T) {
	t.Parallel()
	const queued = 9
	gate := &gateConn{started: make(chan struct{}), release: make(chan struct{})}
	wc, client := wsPair(t, func(w http.ResponseWriter) http.Hijacker { return gateHijacker{w, gate} })
	gate.mu.Lock()
	gate.writes, gate.hold = nil, true // from here: the frames
	gate.mu.Unlock()

	first := make(chan error, 1)
	go func() { first <- wc.send([]byte("frame 0")) }()
	<-gate.started // the sender is in its write
	for i := 1; i <= queued; i++ {
		require.NoError(t, wc.send(fmt.Appendf(nil, "frame %d", i)), "a queued send returns at once")
	}
	close(gate.release)
	require.NoError(t, <-first)
	for i := 0; i <= queued; i++ {
		_, b, err := client.Read(t.Context())
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("frame %d", i), string(b))
	}
	gate.mu.Lock()
	defer gate.mu.Unlock()
	require.Len(t, gate.writes, 2, "the first frame, then the queued ones together")
	require.Equal(t, queued*(2+len("frame 1")), gate.writes[1], "every queued frame in the second write")
	require.Equal(t, float64(queued+1), testutil.ToFloat64(wc.s.metrics.wsFrames))
	require.Equal(t, float64(2), testutil.ToFloat64(wc.s.metrics.wsWrites))
}

// After a write fails, every send returns an error, the connection is
// closed, and nothing waits.
func TestWebSocketSendAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	wc, _ := wsPair(t, func(w http.ResponseWriter) http.Hijacker { return w.(http.Hijacker) })
	require.NoError(t, wc.send([]byte("one")))
	_ = wc.wire.conn.Close() // the connection fails under the sender
	require.Error(t, wc.send([]byte("two")))
	require.Error(t, wc.send([]byte("three")))
	require.Error(t, wc.ctx.Err(), "the connection is closing")
}

// Frames queue behind a stalled write up to maxQueuedBytes; a send past
// that waits, and returns an error once the stalled connection closes.
func TestWebSocketQueueIsBoundedBehindAStalledWrite(t *testing.T) {
	t.Parallel()
	gate := &gateConn{started: make(chan struct{}), release: make(chan struct{})}
	wc, _ := wsPair(t, func(w http.ResponseWriter) http.Hijacker { return gateHijacker{w, gate} })
	gate.mu.Lock()
	gate.hold = true
	gate.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- wc.send([]byte("stalled")) }()
	<-gate.started
	frame := make([]byte, 64<<10)
	for range maxQueuedBytes / len(frame) {
		require.NoError(t, wc.send(frame), "queued while under the bound")
	}
	over := make(chan error, 1)
	go func() { over <- wc.send(frame) }()
	select {
	case err := <-over:
		t.Fatalf("a send past the bound returned (%v) while the write stalled", err)
	case <-time.After(50 * time.Millisecond):
	}
	_ = gate.Conn.Close() // what the stall timer's close comes to
	close(gate.release)
	require.Error(t, <-first)
	require.Error(t, <-over)
	require.Error(t, wc.send([]byte("after")))
}

// queueEvents queues an event frame of each payload on wc, as a group
// commit's publisher does, and reports whether a sender must be started.
func queueEvents(t *testing.T, wc *wsConn, payloads [][]byte) (start bool) {
	t.Helper()
	for i, p := range payloads {
		s, err := wc.queueEvent(frame{Seq: int64(i + 1), JSON: p})
		require.NoError(t, err)
		start = start || s
	}
	return start
}

// readEvents reads n messages from client and checks that they are the
// event frames of payloads, in order.
func readEvents(t *testing.T, client *websocket.Conn, payloads [][]byte) {
	t.Helper()
	for i, p := range payloads {
		typ, b, err := client.Read(t.Context())
		require.NoError(t, err)
		require.Equal(t, websocket.MessageText, typ)
		require.Equal(t, string(appendEventFrame(nil, frame{JSON: p})), string(b), "message %d", i)
	}
}

// A publisher that writes a connection's frames itself (sendNow) writes
// messages of every length coder/websocket's client reads: the three
// forms of a frame's length, at their bounds.
func TestWebSocketFramesWrittenAtOnceAreReadAsMessages(t *testing.T) {
	t.Parallel()
	wc, client := wsPair(t, func(w http.ResponseWriter) http.Hijacker { return w.(http.Hijacker) })
	client.SetReadLimit(1 << 20)
	require.NotNil(t, wc.wire.raw, "a TCP connection has a raw socket")
	wrap := len(appendEventFrame(nil, frame{}))
	var payloads [][]byte
	for _, n := range []int{wrap + 2, 125, 126, 127, 0xffff, 0x10000, 300 << 10} {
		// An event frame of n bytes: a JSON string as the envelope.
		p := []byte(`"` + strings.Repeat("x", n-wrap-2) + `"`)
		require.Len(t, appendEventFrame(nil, frame{JSON: p}), n)
		payloads = append(payloads, p)
	}
	require.True(t, queueEvents(t, wc, payloads), "no sender yet: the caller starts one")
	wc.sendNow()
	readEvents(t, client, payloads)
	wc.wg.Wait() // the sender's turn is over
	require.Equal(t, float64(len(payloads)), testutil.ToFloat64(wc.s.metrics.wsFrames))
}

// sendNow never waits for the client: what the socket does not take at
// once goes to a sender goroutine, which writes it first, before the
// frames queued after it, once the client reads.
func TestWebSocketSendNowDoesNotWaitForAFullSocket(t *testing.T) {
	t.Parallel()
	wc, client := smallBufferPair(t)

	payloads := make([][]byte, 200) // 400 KiB: far more than the two small buffers hold
	for i := range payloads {
		payloads[i] = fmt.Appendf(nil, `"%d %s"`, i, strings.Repeat("y", 2<<10))
	}
	require.True(t, queueEvents(t, wc, payloads[:100]))
	sendNowLeavesWrite(t, wc)
	require.False(t, queueEvents(t, wc, payloads[100:]), "queued behind the sender, which writes them")
	readEvents(t, client, payloads)
	wc.wg.Wait()
	require.Equal(t, float64(len(payloads)), testutil.ToFloat64(wc.s.metrics.wsFrames))
}

// smallBufferPair is wsPair with 4 KiB socket buffers on both sides (the
// server's send buffer, the client's receive buffer): a client that does
// not read fills them with a few frames.
func smallBufferPair(t *testing.T) (*wsConn, *websocket.Conn) {
	dialer := &net.Dialer{Control: smallBuffers(syscall.SO_RCVBUF)}
	opts := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}}
	wc, client := wsPairDialed(t, func(w http.ResponseWriter) http.Hijacker { return w.(http.Hijacker) }, opts)
	client.SetReadLimit(1 << 20)
	require.NoError(t, smallBuffers(syscall.SO_SNDBUF)("", "", wc.wire.raw))
	return wc, client
}

// smallBuffers returns a dialer's Control that sets a socket's buffer
// opt (SO_RCVBUF, SO_SNDBUF) to 4 KiB.
func smallBuffers(opt int) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4096) })
		return errors.Join(err, serr)
	}
}

// sendNowLeavesWrite runs wc.sendNow, which must return without waiting
// for the client and leave the rest of its write to a sender goroutine.
func sendNowLeavesWrite(t *testing.T, wc *wsConn) {
	t.Helper()
	returned := make(chan struct{})
	go func() {
		wc.sendNow()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("sendNow waited for a client that does not read")
	}
	wc.q.mu.Lock()
	sending := wc.q.sending
	wc.q.mu.Unlock()
	require.True(t, sending, "a sender goroutine writes what the socket did not take")
}

// A connection closed while the rest of a write that did not wait is
// still to go sends that rest first: the client reads every frame begun
// on the wire, whole, and then the close frame.
func TestWebSocketCloseFollowsTheRestOfAWrite(t *testing.T) {
	t.Parallel()
	wc, client := smallBufferPair(t)
	payloads := make([][]byte, 100)
	for i := range payloads {
		payloads[i] = fmt.Appendf(nil, `"%d %s"`, i, strings.Repeat("z", 2<<10))
	}
	require.True(t, queueEvents(t, wc, payloads))
	sendNowLeavesWrite(t, wc)
	wc.close(websocket.StatusNormalClosure, "done")
	readEvents(t, client, payloads)
	_, _, err := client.Read(t.Context())
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "%v", err)
	wc.wg.Wait()
}

// No data frame follows a close frame: once coder/websocket has written
// one (here as its flush would), a send is refused and writes nothing.
func TestWebSocketNoFrameAfterAClose(t *testing.T) {
	t.Parallel()
	wc, client := wsPair(t, func(w http.ResponseWriter) http.Hijacker { return w.(http.Hijacker) })
	_, err := wc.wire.Write([]byte{0x88, 0x02, 0x03, 0xe8}) // close, 1000
	require.NoError(t, err)
	require.ErrorIs(t, wc.send([]byte("after the close")), net.ErrClosed)
	_, _, err = client.Read(t.Context())
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "the close frame, first: %v", err)
}
