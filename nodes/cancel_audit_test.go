package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// Every built-in executor that can take long stops when its run is
// cancelled (the template's loops have their own test:
// template_security_test.go): the run ends run_cancelled with the executor returned (none
// abandoned after the cancel grace), not merely reported cancelled while
// it keeps working.
func TestCancelStopsEveryLongExecutor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, node string
		g          *runtime.Graph
	}{
		{"agent streaming slowly", "a", newGraph("agent").node("s", nodes.TypeChatStart).
			node("a", nodes.TypeAgent, `{"tokenDelayMs":10000}`).node("o", nodes.TypeChatOutput).
			flow("s", "a").flow("a", "o").build()},
		{"delay of an hour", "d", newGraph("delay").node("s", nodes.TypeChatStart).
			node("d", nodes.TypeDelay, `{"ms":3600000}`).node("o", nodes.TypeChatOutput).
			flow("s", "d").flow("d", "o").build()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var (
				once      sync.Once
				mu        sync.Mutex
				cancelled time.Time
			)
			watch := func(r *runtime.RunRequest) {
				inner := r.Sink
				r.Sink = runtime.SinkFunc(func(ev runtime.Event) {
					inner.Emit(ev)
					if ev.Type == runtime.EventNodeStarted && ev.NodeID == tc.node {
						once.Do(func() {
							// Long enough for the executor to be under way.
							time.AfterFunc(50*time.Millisecond, func() {
								mu.Lock()
								cancelled = time.Now()
								mu.Unlock()
								cancel(errors.New("stop pressed"))
							})
						})
					}
				})
			}
			res, s := h.run(t, ctx, tc.g, nodes.ChatInput{Content: strings.Repeat("w ", 2000)}, watch)
			mu.Lock()
			took := time.Since(cancelled)
			mu.Unlock()
			require.Equal(t, runtime.RunCancelled, res.Status)
			for _, ev := range s.of(runtime.EventNodeCancelled, tc.node) {
				b, err := json.Marshal(ev.Data)
				require.NoError(t, err)
				require.NotContains(t, string(b), "did not stop", "the executor was abandoned")
			}
			require.Zero(t, h.eng.AbandonedExecutors(), "an executor still running after its run ended")
			t.Logf("run ended %v after the cancel", took)
		})
	}
}

// A cancelled run aborts an http_request under way: the slow server (a
// local httptest server the test's config allows) sees its connection
// closed, the run ends run_cancelled and the tool's goroutine is not
// abandoned. The abort must come long before the tool's own 15 s
// timeout; the measured time is logged (it is well under 100 ms on an
// idle machine).
func TestCancelAbortsHTTPRequest(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	closed := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done(): // the client went away
			closed <- time.Now()
		case <-time.After(30 * time.Second):
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	// The default transport refuses loopback addresses (SSRF); this
	// test's server is on loopback, so the tool gets a plain transport.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	defer tr.CloseIdleConnections()
	h := newHarness(t, tools.Config{HTTP: tools.HTTPConfig{AllowedHosts: []string{"127.0.0.1"}, Transport: tr}})
	g := newGraph("http-cancel").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("t", nodes.TypeTool, `{"name":"http_request"}`).node("o", nodes.TypeChatOutput).
		flow("s", "a").flow("a", "o").link("t", "a").build()

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var cancelled time.Time
	go func() {
		<-arrived
		cancelled = time.Now()
		cancel(errors.New("stop pressed"))
	}()
	res, s := h.run(t, ctx, g, nodes.ChatInput{Content: `/tool http_request {"url":"` + srv.URL + `/slow"}`})
	require.Equal(t, runtime.RunCancelled, res.Status)
	select {
	case at := <-closed:
		t.Logf("the server saw the connection close %v after the cancel", at.Sub(cancelled))
		require.Less(t, at.Sub(cancelled), 5*time.Second, "aborted by the cancel, not by a timeout")
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the request end: the cancel did not abort it")
	}
	require.Empty(t, s.of(nodes.EventToolResult, "a"), "no result of an aborted call")
	require.Zero(t, h.eng.AbandonedExecutors(), "an executor still running after its run ended")
}

// An approval node waiting for a person holds no goroutine: the run ends
// interrupted at once. Cancelling it ends the wait: the record becomes
// cancelled with the cause, and the person's later answer is refused
// instead of running the rest of the graph.
func TestCancelEndsAnApprovalWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("approval-cancel").node("s", nodes.TypeChatStart).node("ok", nodes.TypeApproval, `{"prompt":"go?"}`).
		node("o", nodes.TypeChatOutput).flow("s", "ok").flow("ok", "o").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "please"})
	require.Equal(t, runtime.RunInterrupted, res.Status)
	require.Len(t, s.of(nodes.EventApprovalRequired, "ok"), 1)
	require.Zero(t, h.eng.AbandonedExecutors(), "nothing runs while the run waits")

	rec, err := h.eng.CancelInterrupted(context.Background(), res.RunID, errors.New("stop pressed"))
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	stored, err := h.store.GetRun(context.Background(), res.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, stored.Status)
	require.Contains(t, stored.Error, "stop pressed")

	_, err = h.eng.Resume(context.Background(), runtime.ResumeRequest{RunID: res.RunID, Graph: g,
		Value: map[string]any{"approved": true}, Sink: &sink{}})
	require.ErrorIs(t, err, runtime.ErrInterruptNotFound, "the answer after the cancel is refused")
	require.Empty(t, s.of(runtime.EventNodeCompleted, "o"), "the rest of the graph never ran")
}
