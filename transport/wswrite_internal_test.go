package transport

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
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
