package transport_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runcontrol"
	"chatgraph/runcontrol/controltest"
)

type errBody struct {
	Error struct {
		Code    string
		Message string
		Details any
	}
}

func TestErrorsAndLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) {
		c.Token = "tok"
		c.BodyLimit = 1024
		c.RateLimit, c.RateBurst = 1, 60
	})
	// Unauthorized.
	anon := *e
	anon.token = ""
	var b errBody
	resp := anon.do("GET", "/api/v1/graphs", nil, &b)
	e.mustStatus(resp, http.StatusUnauthorized)
	require.Equal(t, "unauthorized", b.Error.Code)
	anon.token = "wrong"
	e.mustStatus(anon.do("GET", "/api/v1/graphs", nil, nil), http.StatusUnauthorized)
	anon.token = ""
	e.mustStatus(anon.do("GET", "/api/v1/graphs?token=tok", nil, nil), http.StatusOK)
	// Health and metrics need no token.
	e.mustStatus(anon.do("GET", "/healthz", nil, nil), http.StatusOK)
	e.mustStatus(anon.do("GET", "/readyz", nil, nil), http.StatusOK)

	// Too large.
	resp = e.do("POST", "/api/v1/graphs", `{"name":"`+strings.Repeat("x", 2000)+`"}`, &b)
	e.mustStatus(resp, http.StatusRequestEntityTooLarge)
	require.Equal(t, "payload_too_large", b.Error.Code)

	// Not found and bad JSON.
	e.mustStatus(e.do("GET", "/api/v1/chats/nope", nil, &b), http.StatusNotFound)
	require.Equal(t, "not_found", b.Error.Code)
	e.mustStatus(e.do("GET", "/api/v1/nothing", nil, &b), http.StatusNotFound)
	require.Equal(t, "not_found", b.Error.Code)
	e.mustStatus(e.do("POST", "/api/v1/chats", `{"graphId":`, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_json", b.Error.Code)
	e.mustStatus(e.do("POST", "/api/v1/chats", `{"graphId":7}`, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_json", b.Error.Code)
	e.mustStatus(e.do("POST", "/api/v1/chats", `{}`, &b), http.StatusBadRequest)
	require.Contains(t, b.Error.Message, "graphId")

	// Rate limited, with Retry-After.
	var limited *http.Response
	for range 200 {
		r := e.do("GET", "/api/v1/graphs", nil, nil)
		if r.StatusCode == http.StatusTooManyRequests {
			limited = r
			raw, _ := io.ReadAll(r.Body)
			require.NoError(t, json.Unmarshal(raw, &b))
			break
		}
	}
	require.NotNil(t, limited)
	require.Equal(t, "rate_limited", b.Error.Code)
	require.NotEmpty(t, limited.Header.Get("Retry-After"))
}

// A path that no route has answers 404 with what is wrong with it, a
// route's path with a method it does not take 405 with the ones it does:
// an empty id is no id left out of a command, and a trailing slash is
// named as such, not taken for a method the route lacks.
func TestRouteMisses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	graphID, chatID := e.newChat(basicGraph(""))
	var b errBody
	for _, miss := range []struct{ method, path, message string }{
		{"GET", "/api/v1/runs//events", "no such route: the path's id is empty"},
		{"POST", "/api/v1/runs//cancel", "no such route: the path's id is empty"},
		{"POST", "/api/v1/chats//messages", "no such route: the path's id is empty"},
		{"POST", "/api/v1/chats//cancel", "no such route: the path's id is empty"},
		{"POST", "/api/v1/chats/" + chatID + "/messages//retry", "no such route: the path's mid is empty"},
		{"GET", "/api/v1/chats/", "no such route: /api/v1/chats/ is /api/v1/chats without its trailing slash"},
		{"GET", "/api/v1/graphs/" + graphID + "/", "no such route: /api/v1/graphs/" + graphID + "/ is /api/v1/graphs/" + graphID + " without its trailing slash"},
		{"POST", "/api/v1/nothing/", "no such route"},
	} {
		e.mustStatus(e.do(miss.method, miss.path, map[string]any{"content": "hi"}, &b), http.StatusNotFound)
		require.Equal(t, "not_found", b.Error.Code, "%s %s", miss.method, miss.path)
		require.Equal(t, miss.message, b.Error.Message, "%s %s", miss.method, miss.path)
	}
	require.Empty(t, messages(e.chat(chatID)), "no call reached the chat")

	resp := e.do("DELETE", "/api/v1/chats", nil, &b)
	e.mustStatus(resp, http.StatusMethodNotAllowed)
	require.Equal(t, "GET, POST", resp.Header.Get("Allow"))
	require.Equal(t, "DELETE is not allowed here (allowed: GET, POST)", b.Error.Message)
	e.mustStatus(e.do("GET", "/api/v1/chats", nil, nil), http.StatusOK)
}

func TestChatCallValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var b errBody
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", `{}`, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_json", b.Error.Code)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", `{"content":"x","multitaskStrategy":"later"}`, &b), http.StatusBadRequest)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/agent-messages", `{"content":"x","agentNodeId":"out"}`, &b), http.StatusBadRequest)
	e.mustStatus(e.do("POST", "/api/v1/chats/nope/messages", `{"content":"x"}`, &b), http.StatusNotFound)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/nope/retry", nil, &b), http.StatusNotFound)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", `{"content":"x","parentId":"nope"}`, &b), http.StatusNotFound)
}

func TestNodeTypesMetricsOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var nts []map[string]any
	e.mustStatus(e.do("GET", "/api/v1/node-types", nil, &nts), http.StatusOK)
	names := map[string]bool{}
	for _, nt := range nts {
		names[nt["type"].(string)] = true
		require.NotEmpty(t, nt["label"])
		require.NotNil(t, nt["ports"])
	}
	for _, want := range []string{"chat_start", "agent", "tool", "router", "template", "approval", "chat_output", "delay", "flaky"} {
		require.True(t, names[want], want)
	}
	_, chatID := e.newChat(basicGraph(""))
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "m"}, nil)
	s.all(t)
	resp := e.do("GET", "/metrics", nil, nil)
	e.mustStatus(resp, http.StatusOK)
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"chatgraph_runs_total", "chatgraph_node_duration_seconds", "chatgraph_active_streams",
		"chatgraph_store_operation_duration_seconds", "chatgraph_cancel_latency_seconds", "chatgraph_executors_abandoned",
		"chatgraph_turns_waiting_to_start", `chatgraph_group_commit_duration_seconds_count{stage="published"}`, "chatgraph_group_commit_runs_count",
		"chatgraph_commit_lag_seconds"} {
		require.Contains(t, string(body), want)
	}
	resp = e.do("GET", "/api/v1/openapi.json", nil, nil)
	e.mustStatus(resp, http.StatusOK)
	resp = e.do("GET", "/", nil, nil)
	e.mustStatus(resp, http.StatusOK)
	body, _ = io.ReadAll(resp.Body)
	require.Contains(t, string(body), "chatgraph")
}

func TestChatCallOnGraphWithoutStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(map[string]any{"name": "empty", "nodes": []any{
		map[string]any{"id": "a1", "type": "agent", "data": map[string]any{}}}, "edges": []any{}})
	var b errBody
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "x"}, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_graph", b.Error.Code)
	// The agent itself can be the entry.
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/agent-messages", map[string]any{"content": "direct", "agentNodeId": "a1"}, &tk), http.StatusAccepted)
	m := e.waitMessage(chatID, tk["messageId"].(string))
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "echo: direct", m["content"])
	require.Equal(t, "a1", m["agentNodeId"])
}

func TestAgentChatIntoScratchAreaFailsAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	g["nodes"] = append(g["nodes"].([]any),
		map[string]any{"id": "a2", "type": "agent", "data": map[string]any{}},
		map[string]any{"id": "t2", "type": "template", "data": map[string]any{"template": "{{.content}}"}})
	g["edges"] = append(g["edges"].([]any), edge("c1", "a2", "output", "t2", "input", "flow"), edge("c2", "t2", "output", "a2", "input", "flow"))
	var saved map[string]any
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, &saved), http.StatusCreated)
	require.NotEmpty(t, saved["diagnostics"])
	var ch map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": saved["id"]}, &ch), http.StatusCreated)
	chatID := ch["id"].(string)
	var b errBody
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/agent-messages", map[string]any{"content": "x", "agentNodeId": "a2"}, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_graph", b.Error.Code)
	require.NotEmpty(t, b.Error.Details)
	for _, d := range b.Error.Details.([]any) {
		require.Equal(t, "error", d.(map[string]any)["severity"])
	}
	// The reachable part runs.
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "fine"}, &tk), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, tk["messageId"].(string))["status"])
}

// Every event a run publishes is timed from its emit to its publishing
// (chatgraph_event_publish_delay_seconds), once, as a token delta or
// another kind.
func TestEventPublishDelayIsMeasured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three"}, nil)
	evs := s.all(t)
	require.NotEmpty(t, evs)
	// Recorded before the hub gets the event: the stream has ended, so
	// every event of the run is counted.
	deltas := 0
	for _, ev := range evs {
		if ev.Type == "node_delta" {
			deltas++
		}
	}
	require.Positive(t, deltas)
	require.Equal(t, float64(deltas), e.metric(`chatgraph_event_publish_delay_seconds_count{kind="delta"}`))
	require.Equal(t, float64(len(evs)-deltas), e.metric(`chatgraph_event_publish_delay_seconds_count{kind="other"}`))
	require.Positive(t, e.metric(`chatgraph_event_publish_delay_seconds_sum{kind="delta"}`))
}

// GET /runs filters by chat and status, newest first, within its limit;
// a status that is no run status and a bad limit are 400, not an empty
// list.
func TestListRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatA := e.newChat(basicGraph(""))
	_, chatB := e.newChat(approvalGraph())
	var ta, tb map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatA+"/messages", map[string]any{"content": "hi"}, &ta), http.StatusAccepted)
	e.waitMessage(chatA, ta["messageId"].(string))
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatB+"/messages", map[string]any{"content": `/tool calculator {"expression":"1"}`}, &tb),
		http.StatusAccepted)
	e.waitMessage(chatB, tb["messageId"].(string))
	ids := func(query string) []string {
		var runs []map[string]any
		e.mustStatus(e.do("GET", "/api/v1/runs"+query, nil, &runs), http.StatusOK)
		out := make([]string, len(runs))
		for i, r := range runs {
			out[i] = r["id"].(string)
		}
		return out
	}
	a, b := ta["runId"].(string), tb["runId"].(string)
	require.Equal(t, []string{b, a}, ids(""), "newest first")
	require.Equal(t, []string{a}, ids("?chatId="+chatA))
	require.Equal(t, []string{a}, ids("?status=completed"))
	require.Equal(t, []string{b, a}, ids("?status=completed,%20interrupted"))
	require.Equal(t, []string{b}, ids("?limit=1"))
	require.Empty(t, ids("?chatId="+chatA+"&status=failed"))

	var bad errBody
	e.mustStatus(e.do("GET", "/api/v1/runs?status=completed,weird", nil, &bad), http.StatusBadRequest)
	require.Equal(t, "invalid_json", bad.Error.Code)
	require.Equal(t, `status "weird" is no run status (pending, running, completed, failed, cancelled, interrupted)`, bad.Error.Message)
	e.mustStatus(e.do("GET", "/api/v1/runs?limit=0", nil, &bad), http.StatusBadRequest)
}

// A run the store does not have may be one another process has accepted
// and not written yet: while run control cannot be asked, the server
// answers 503 with Retry-After for it, not a 404 that may be untrue.
func TestUnknownRunWhileRunControlIsUnreachable(t *testing.T) {
	ctl := &controltest.Unreachable{}
	e := newEnv(t, func(c *transportConfig) {
		c.WrapControl = func(inner runcontrol.Controller) runcontrol.Controller { ctl.Controller = inner; return ctl }
	})
	var b errBody
	paths := []string{"/api/v1/runs/r_elsewhere", "/api/v1/runs/r_elsewhere/events"}
	ctl.Down.Store(true)
	for _, path := range paths {
		resp := e.do("GET", path, nil, &b)
		e.mustStatus(resp, http.StatusServiceUnavailable)
		require.Equal(t, "unavailable", b.Error.Code, path)
		require.Equal(t, "run control unavailable", b.Error.Message, path)
		require.Equal(t, "1", resp.Header.Get("Retry-After"), path)
	}
	c := e.ws()
	c.send(map[string]any{"id": "x1", "type": "subscribe", "runId": "r_elsewhere"})
	f := c.read()
	require.Equal(t, "error", f["type"])
	require.Equal(t, "unavailable", f["error"].(map[string]any)["code"], "a WebSocket subscribe")
	ctl.Down.Store(false)
	for _, path := range paths {
		e.mustStatus(e.do("GET", path, nil, &b), http.StatusNotFound)
		require.Equal(t, "not_found", b.Error.Code, path)
	}
	c.send(map[string]any{"id": "x2", "type": "subscribe", "runId": "r_elsewhere"})
	require.Equal(t, "not_found", c.read()["error"].(map[string]any)["code"])
}
