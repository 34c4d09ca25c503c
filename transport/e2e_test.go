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

func TestInvalidGraphAllDiagnostics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	edges := g["edges"].([]any)
	edges[0].(map[string]any)["data"] = map[string]any{} // channel missing
	edges[1].(map[string]any)["data"] = map[string]any{"channel": "pipe"}
	g["edges"] = append(edges, edge("e3", "ghost", "output", "out", "input", "flow"))
	g["nodes"] = append(g["nodes"].([]any), map[string]any{"id": "x", "type": "nope", "data": map[string]any{}})
	var body struct {
		Error struct {
			Code    string
			Message string
			Details []struct {
				Severity, Code, Path, ID, Message string
			}
		}
	}
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, &body), http.StatusBadRequest)
	require.Equal(t, "invalid_graph", body.Error.Code)
	paths := map[string]string{}
	for _, d := range body.Error.Details {
		paths[d.Path] = d.ID
	}
	require.Equal(t, "e1", paths["edges[0].data.channel"], "%+v", body.Error.Details)
	require.Equal(t, "e2", paths["edges[1].data.channel"])
	require.Contains(t, paths, "edges[2].source")
	require.Contains(t, paths, "nodes[3].type")

	// validate reports the same without saving.
	var v struct {
		Valid       bool
		Diagnostics []map[string]any
	}
	e.mustStatus(e.do("POST", "/api/v1/graphs/validate", g, &v), http.StatusOK)
	require.False(t, v.Valid)
	require.NotEmpty(t, v.Diagnostics)
	var list []any
	e.mustStatus(e.do("GET", "/api/v1/graphs", nil, &list), http.StatusOK)
	require.Empty(t, list)

	// Not JSON at all.
	var bad struct{ Error struct{ Code string } }
	e.mustStatus(e.do("POST", "/api/v1/graphs", "{nope", &bad), http.StatusBadRequest)
	require.Equal(t, "invalid_json", bad.Error.Code)
}

func TestGraphCRUDAndWarnings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	// A scratch area no chat_start reaches, with a flow cycle: a warning.
	g["nodes"] = append(g["nodes"].([]any),
		map[string]any{"id": "t1", "type": "template", "data": map[string]any{"template": "{{.content}}"}},
		map[string]any{"id": "t2", "type": "template", "data": map[string]any{"template": "{{.content}}"}})
	g["edges"] = append(g["edges"].([]any), edge("c1", "t1", "output", "t2", "input", "flow"), edge("c2", "t2", "output", "t1", "input", "flow"))
	var saved map[string]any
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, &saved), http.StatusCreated)
	require.EqualValues(t, 1, saved["planVersion"])
	diags := saved["diagnostics"].([]any)
	require.NotEmpty(t, diags)
	for _, d := range diags {
		require.Equal(t, "warning", d.(map[string]any)["severity"])
	}
	id := saved["id"].(string)
	var got map[string]any
	e.mustStatus(e.do("PUT", "/api/v1/graphs/"+id, g, &got), http.StatusOK)
	require.EqualValues(t, 2, got["planVersion"])
	e.mustStatus(e.do("GET", "/api/v1/graphs/"+id, nil, &got), http.StatusOK)
	require.EqualValues(t, 2, got["planVersion"])
	require.Len(t, got["nodes"], 5)
	e.mustStatus(e.do("DELETE", "/api/v1/graphs/"+id, nil, nil), http.StatusNoContent)
	var nf struct{ Error struct{ Code string } }
	e.mustStatus(e.do("GET", "/api/v1/graphs/"+id, nil, &nf), http.StatusNotFound)
	require.Equal(t, "not_found", nf.Error.Code)
}
