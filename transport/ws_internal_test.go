package transport

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestWebSocketAcceptedDuringShutdown: a connection that passed the
// closing check but registers after Shutdown closed the others is closed
// with 1001 at once, not served (nor counted) past Shutdown.
func TestWebSocketAcceptedDuringShutdown(t *testing.T) {
	t.Parallel()
	s := fuzzServer(t)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	// Shutdown's closing of the connections, without the chat service's
	// (whose closing check the connection passed before).
	s.mu.Lock()
	s.wsClosed = true
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/api/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	require.NoError(t, err)
	defer c.CloseNow()
	_, _, err = c.Read(ctx)
	require.Equal(t, CloseShutdown, websocket.CloseStatus(err), "read: %v", err)

	s.mu.Lock()
	n := len(s.wsConns)
	s.mu.Unlock()
	require.Zero(t, n)
	require.Eventually(t, func() bool { // released once the close handshake is done
		s.wsSlots.mu.Lock()
		defer s.wsSlots.mu.Unlock()
		return len(s.wsSlots.n) == 0
	}, 10*time.Second, 5*time.Millisecond, "the client's connection slot is released")
	done := make(chan struct{})
	go func() { s.wsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a connection is still being served")
	}
}
