package transport

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

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

// Only the event routes, the WebSocket, the join (bounded by its own
// timeout), the turns that last as long as their graph runs, and the
// chat calls asking for SSE or preferring to wait for their run
// (Prefer: wait=N) skip the request timeout; an Accept or Prefer header
// elsewhere changes nothing. Every route the server registers is
// checked, with and without Accept: text/event-stream and Prefer, so a
// streaming route added without its mark (or a mark left on a route that
// no longer streams) fails here.
func TestStreamingRoutes(t *testing.T) {
	t.Parallel()
	want := map[string]streamKind{
		"GET /api/v1/runs/:id/events":                   streamsAlways,
		"GET /api/v1/runs/:id/join":                     streamsAlways,
		"GET /api/v1/ws":                                streamsAlways,
		"POST /api/v1/ag-ui/graphs/:id":                 streamsAlways,
		"POST /v1/chat/completions":                     streamsAlways,
		"POST /api/v1/chats/:id/messages":               streamsOnSSE,
		"POST /api/v1/chats/:id/agent-messages":         streamsOnSSE,
		"POST /api/v1/chats/:id/messages/:mid/continue": streamsOnSSE,
		"POST /api/v1/chats/:id/messages/:mid/retry":    streamsOnSSE,
		"POST /api/v1/chats/:id/messages/:mid/edit":     streamsOnSSE,
		"POST /api/v1/runs/:id/resume":                  streamsOnSSE,
	}
	s := fuzzServer(t)
	seen := map[string]bool{}
	for _, r := range s.Echo().Routes() {
		key := r.Method + " " + r.Path
		seen[key] = true
		for _, accept := range []string{"", "application/json", "text/event-stream"} {
			req := httptest.NewRequest(r.Method, "/x", nil)
			req.Header.Set("Accept", accept)
			c := s.Echo().NewContext(req, httptest.NewRecorder())
			c.SetPath(r.Path)
			streams := want[key] == streamsAlways || want[key] == streamsOnSSE && accept == "text/event-stream"
			require.Equal(t, streams, s.streaming(c), "%s (Accept %q)", key, accept)
		}
		// A chat call that prefers to wait for its run holds its request
		// open as a stream does; the preference changes nothing elsewhere.
		for _, prefer := range []string{"wait=5", "respond-async, wait=600", "wait=x"} {
			req := httptest.NewRequest(r.Method, "/x", nil)
			req.Header.Set("Prefer", prefer)
			c := s.Echo().NewContext(req, httptest.NewRecorder())
			c.SetPath(r.Path)
			streams := want[key] == streamsAlways || want[key] == streamsOnSSE && prefer != "wait=x"
			require.Equal(t, streams, s.streaming(c), "%s (Prefer %q)", key, prefer)
		}
	}
	for key := range want {
		require.True(t, seen[key], "%s is a route of the server", key)
	}
}
