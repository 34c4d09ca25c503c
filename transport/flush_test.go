package transport_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes/llm"
	"chatgraph/transport"
)

// gated is a model that streams "first" and then waits until open is
// closed (or its run is cancelled) before it answers.
type gated struct{ open chan struct{} }

func (g gated) Stream(ctx context.Context, _ llm.Request, onText func(string)) (llm.Response, error) {
	if onText != nil {
		onText("first")
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	if onText != nil {
		onText(" last")
	}
	return llm.Response{Content: "first last", FinishReason: "stop"}, nil
}

// Events go out a batch at a time, flushed once per batch: a batch sent
// while the run then goes quiet reaches the client at once, not with the
// next batch or heartbeat. The run here streams "first" and then waits;
// heartbeats are off, so only the batch's own flush can deliver it.
func TestStreamsFlushABatchBeforeWaiting(t *testing.T) {
	t.Parallel()
	open := make(chan struct{})
	models := llm.NewModels()
	require.NoError(t, models.Register("gated", gated{open: open}))
	e := newEnv(t, func(c *transportConfig) {
		c.Models = models
		c.Heartbeat = time.Hour
	})
	gid, chatID := e.newChat(basicGraph(`{"name":"Gated","model":"gated/x"}`))
	user := []any{map[string]any{"role": "user", "content": "hi"}}
	cases := []struct {
		name, path string
		body       map[string]any
		first      func(*sseEvent) bool // the frame carrying "first"
	}{
		{"chat SSE", "/api/v1/chats/" + chatID + "/messages", map[string]any{"content": "hi"},
			func(ev *sseEvent) bool {
				return ev.Type == "node_delta" && ev.Data["data"].(map[string]any)["text"] == "first"
			}},
		{"AG-UI", "/api/v1/ag-ui/graphs/" + gid,
			map[string]any{"threadId": "t1", "runId": "c1", "messages": []any{map[string]any{"id": "u1", "role": "user", "content": "hi"}}},
			func(ev *sseEvent) bool {
				return ev.Data["type"] == "TEXT_MESSAGE_CONTENT" && ev.Data["delta"] == "first"
			}},
		{"OpenAI", "/v1/chat/completions", map[string]any{"model": gid, "stream": true, "messages": user},
			func(ev *sseEvent) bool {
				choices, _ := ev.Data["choices"].([]any)
				return len(choices) == 1 && choices[0].(map[string]any)["delta"].(map[string]any)["content"] == "first"
			}},
	}
	for _, tc := range cases {
		// One at a time: the chat takes one turn at a time.
		// The bound only ends a test that would otherwise hang.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s := e.openSSE(ctx, "POST", tc.path, tc.body, nil)
		for {
			ev, err := s.next(false)
			require.NoError(t, err, "%s: the frame with \"first\" never arrived while the run waited", tc.name)
			if tc.first(ev) {
				break
			}
		}
		cancel()
	}
	close(open)
}

// chatter is a model that streams a word every few hundred microseconds
// until open is closed (or its run is cancelled), then answers.
type chatter struct{ open chan struct{} }

func (c chatter) Stream(ctx context.Context, _ llm.Request, onText func(string)) (llm.Response, error) {
	for {
		select {
		case <-c.open:
			return llm.Response{Content: "done", FinishReason: "stop"}, nil
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		case <-time.After(300 * time.Microsecond):
			if onText != nil {
				onText("w ")
			}
		}
	}
}

// A subscriber that joins a live run from its start, after the run has
// published more frames than the hub keeps, gets the ones the hub no
// longer keeps from the store and the rest live: the whole log, gap-free,
// as a replay after the run's end gives it.
func TestLateSubscriberGetsTheFramesTheHubNoLongerKeeps(t *testing.T) {
	t.Parallel()
	open := make(chan struct{})
	models := llm.NewModels()
	require.NoError(t, models.Register("chatter", chatter{open: open}))
	e := newEnv(t, func(c *transportConfig) { c.Models = models })
	_, chatID := e.newChat(basicGraph(`{"name":"Chatter","model":"chatter/x"}`))
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "go"}, &tk), http.StatusAccepted)
	runID := tk["runId"].(string)
	defer func() {
		select {
		case <-open:
		default:
			close(open)
		}
	}()
	waitForWithin(t, "the run to log more frames than the hub keeps", time.Minute, func() bool {
		var run map[string]any
		e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &run), http.StatusOK)
		return run["lastSeq"].(float64) > transport.MaxBacklog+100
	})

	s := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	var got []*sseEvent
	for len(got) < transport.MaxBacklog+100 {
		ev, err := s.next(false)
		require.NoError(t, err)
		got = append(got, ev)
	}
	close(open)
	got = append(got, s.all(t)...)
	requireGapFree(t, got, 0)
	require.Equal(t, "run_completed", got[len(got)-1].Type)

	replay := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil).all(t)
	require.Len(t, got, len(replay))
	for i := range replay {
		require.Equal(t, replay[i].Raw, got[i].Raw, "event %d", i+1)
	}
}
