package transport

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// The limiter's memory is bounded however many addresses it sees.
func TestRateLimiterMapBounded(t *testing.T) {
	t.Parallel()
	l := newIPLimiter(1, 1, 100)
	now := time.Now()
	for i := range 10000 {
		ok, _ := l.allow(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), now)
		require.True(t, ok)
	}
	require.Equal(t, 100, l.m.Len())
	ok, _ := l.allow("10.0.39.15", now) // the last one seen keeps its bucket
	require.False(t, ok)
}

// Only the event routes and the chat calls asking for SSE skip the
// request timeout; an Accept header elsewhere changes nothing.
func TestStreamingRoutes(t *testing.T) {
	t.Parallel()
	e := echo.New()
	for _, tc := range []struct {
		method, path, accept string
		want                 bool
	}{
		{"GET", "/api/v1/runs/:id/events", "", true},
		{"GET", "/api/v1/ws", "", true},
		{"POST", "/api/v1/chats/:id/messages", "text/event-stream", true},
		{"POST", "/api/v1/runs/:id/resume", "text/event-stream", true},
		{"POST", "/api/v1/chats/:id/messages", "application/json", false},
		{"POST", "/api/v1/graphs", "text/event-stream", false},
		{"GET", "/api/v1/graphs", "text/event-stream", false},
		{"POST", "/api/v1/graphs/validate", "text/event-stream", false},
	} {
		req := httptest.NewRequest(tc.method, "/x", nil)
		req.Header.Set("Accept", tc.accept)
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetPath(tc.path)
		require.Equal(t, tc.want, streaming(c), "%s %s %s", tc.method, tc.path, tc.accept)
	}
}
