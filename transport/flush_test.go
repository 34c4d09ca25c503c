package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes/llm"
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
