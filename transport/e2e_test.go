package transport_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStreamChatSSE(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := e.openSSE(ctx, "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hello world"}, nil)
	evs := s.all(t)
	requireGapFree(t, evs, 0)
	require.Equal(t, "run_started", evs[0].Type)
	require.Equal(t, "run_completed", evs[len(evs)-1].Type)
	require.Contains(t, types(evs), "node_delta")
	runID := evs[0].Data["runId"].(string)
	require.Equal(t, runID, s.resp.Header.Get("X-Run-Id"))
	data := evs[0].Data["data"].(map[string]any)
	require.Equal(t, "stream_chat", data["kind"])
	require.Equal(t, s.resp.Header.Get("X-Message-Id"), data["messageId"])

	c := e.chat(chatID)
	msgs := messages(c)
	require.Len(t, msgs, 2)
	require.Equal(t, "user", msgs[0]["role"])
	require.Equal(t, "assistant", msgs[1]["role"])
	m := e.waitMessage(chatID, msgs[1]["id"].(string))
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "echo: hello world", m["content"])
	require.Equal(t, msgs[1]["id"], c["activeLeafId"])

	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &run), http.StatusOK)
	require.Equal(t, "completed", run["status"])
}
