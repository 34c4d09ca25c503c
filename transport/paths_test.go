package transport_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// A path id is the same id sent as is or percent-encoded, as the web UI's
// encodeURIComponent sends it, on every kind of resource: a graph, a chat,
// a message and a run whose ids hold a ':' (which the id pattern allows).
func TestPathIDsAreUnescaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const graphID, chatID, msgID, runID = "ns:gr.1", "my:chat", "ns:m.1", "ns:r.1"
	g := basicGraph("")
	g["id"] = graphID
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, nil), http.StatusCreated)
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID, "id": chatID}, nil), http.StatusCreated)
	// Minted message and run ids hold no ':': a turn with such ids,
	// written as the chat service writes one, and its run finished.
	ctx := t.Context()
	res := &runtime.RunRecord{ID: runID, RootID: runID, ChatID: chatID, GraphID: graphID, PlanVersion: 1,
		Kind: string(chat.KindStreamChat), Status: runtime.RunPending, Attrs: map[string]any{"messageId": msgID}}
	user := &chat.Message{ID: msgID, Role: chat.RoleUser, Content: "hello", RunID: runID, TurnRunID: runID, Status: chat.StatusCompleted}
	require.NoError(t, e.chats.BeginTurn(ctx, chat.Turn{ChatID: chatID, ActiveLeafID: msgID, Messages: []*chat.Message{user}, Run: res}))
	done := *res
	done.Status = runtime.RunCompleted
	require.NoError(t, e.store.CreateRun(ctx, &done))

	for _, form := range []struct{ name, graph, chat, msg, run string }{
		{"as is", graphID, chatID, msgID, runID},
		{"colon encoded", "ns%3Agr.1", "my%3Achat", "ns%3Am.1", "ns%3Ar.1"},
		{"every byte encoded", everyByte(graphID), everyByte(chatID), everyByte(msgID), everyByte(runID)},
		{"dot encoded", "ns:gr%2E1", chatID, "ns:m%2e1", "ns:r%2E1"},
	} {
		var gr, ch, run map[string]any
		e.mustStatus(e.do("GET", "/api/v1/graphs/"+form.graph, nil, &gr), http.StatusOK)
		require.Equal(t, graphID, gr["id"], form.name)
		gr["name"] = "saved " + form.name
		e.mustStatus(e.do("PUT", "/api/v1/graphs/"+form.graph, gr, nil), http.StatusOK)
		e.mustStatus(e.do("GET", "/api/v1/chats/"+form.chat, nil, &ch), http.StatusOK)
		require.Equal(t, chatID, ch["id"], form.name)
		e.mustStatus(e.do("GET", "/api/v1/chats/"+form.chat+"/messages", nil, nil), http.StatusOK)
		e.mustStatus(e.do("GET", "/api/v1/runs/"+form.run, nil, &run), http.StatusOK)
		require.Equal(t, runID, run["id"], form.name)
		e.mustStatus(e.do("GET", "/api/v1/runs/"+form.run+"/events?after=0", nil, nil), http.StatusOK)

		// A message edited by its encoded id: a new turn on the chat.
		var ack struct{ RunID, MessageID string }
		e.mustStatus(e.do("POST", "/api/v1/chats/"+form.chat+"/messages/"+form.msg+"/edit", map[string]any{"content": "again"}, &ack),
			http.StatusAccepted)
		require.NotEmpty(t, ack.RunID, form.name)
		e.waitMessage(chatID, ack.MessageID)
		e.waitRunDone(ack.RunID)
		var sent struct{ RunID, MessageID string }
		e.mustStatus(e.do("POST", "/api/v1/chats/"+form.chat+"/messages", map[string]any{"content": "hi " + form.name}, &sent),
			http.StatusAccepted)
		e.waitMessage(chatID, sent.MessageID)
		e.waitRunDone(sent.RunID)
	}
	var gr map[string]any
	e.mustStatus(e.do("GET", "/api/v1/graphs/"+graphID, nil, &gr), http.StatusOK)
	require.Equal(t, "saved dot encoded", gr["name"], "every save reached the graph")
	e.mustStatus(e.do("DELETE", "/api/v1/chats/my%3Achat", nil, nil), http.StatusNoContent)
	e.mustStatus(e.do("DELETE", "/api/v1/graphs/ns%3Agr.1", nil, nil), http.StatusNoContent)
	e.mustStatus(e.do("GET", "/api/v1/graphs/"+graphID, nil, nil), http.StatusNotFound)
}

// everyByte percent-encodes every byte of s.
func everyByte(s string) string {
	var b strings.Builder
	for i := range len(s) {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// A path id that unescapes to what no id holds (a slash, a space, a
// control character) is 400 naming it, on every route with an id; so is
// an escape that does not decode, which net/http lets through to the
// handler only in a request built by hand. The OpenAI model, which may be
// a graph's name, is unescaped and not checked.
func TestPathIDsThatAreNoID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	for _, bad := range []struct{ method, path, message string }{
		{"GET", "/api/v1/graphs/a%2Fb", `the path's id "a/b" is no id`},
		{"DELETE", "/api/v1/graphs/a%20b", `the path's id "a b" is no id`},
		{"GET", "/api/v1/chats/c%00", `the path's id "c\x00" is no id`},
		{"POST", "/api/v1/chats/" + chatID + "/messages/m%2F1/retry", `the path's mid "m/1" is no id`},
		{"GET", "/api/v1/runs/" + strings.Repeat("r", 129), `the path's id "` + strings.Repeat("r", 129) + `" is no id`},
		{"POST", "/api/v1/ag-ui/graphs/g%3Fx", `the path's id "g?x" is no id`},
	} {
		msg := e.badRequest(bad.method, bad.path, map[string]any{})
		require.Contains(t, msg, bad.message, "%s %s", bad.method, bad.path)
		require.Contains(t, msg, "an id must match ^[A-Za-z0-9_.:\\-]{1,128}$", "%s %s", bad.method, bad.path)
	}
	require.Empty(t, messages(e.chat(chatID)), "no call reached the chat")

	req := httptest.NewRequest("GET", "http://127.0.0.1/api/v1/graphs/x", nil)
	req.URL.RawPath = "/api/v1/graphs/%ZZ"
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `the path's id \"%ZZ\" is not percent-encoded right`)

	g := basicGraph("")
	g["name"] = "my graph/2"
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, nil), http.StatusCreated)
	var m map[string]any
	e.mustStatus(e.do("GET", "/v1/models/my%20graph%2F2", nil, &m), http.StatusOK)
	require.Equal(t, "my graph/2", m["name"])
}

// "." and ".." are no ids: a browser or fetch client takes them out of a
// URL's path, so nothing could address a graph or chat with one. A
// graph's and a chat's id, and an AG-UI threadId (the chat it makes),
// refuse ids made only of dots with a 400 naming the rule; ids with dots
// and more are ids.
func TestDotOnlyIDsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	graphID, _ := e.newChat(basicGraph(""))
	var b errBody
	for _, id := range []string{".", "..", "..."} {
		g := basicGraph("")
		g["id"] = id
		e.mustStatus(e.do("POST", "/api/v1/graphs", g, &b), http.StatusBadRequest)
		require.Equal(t, "invalid_graph", b.Error.Code, id)
		require.Contains(t, fmt.Sprint(b.Error.Details), "id must match ^[A-Za-z0-9_.:\\-]{1,128}$ and not be only dots", id)
		var v struct{ Valid bool }
		e.mustStatus(e.do("POST", "/api/v1/graphs/validate", g, &v), http.StatusOK)
		require.False(t, v.Valid, id)

		require.Contains(t, e.badRequest("POST", "/api/v1/chats", map[string]any{"graphId": graphID, "id": id}),
			"id: must match ^[A-Za-z0-9_.:\\-]{1,128}$ and not be only dots", id)
		require.Contains(t, e.badRequest("POST", "/api/v1/ag-ui/graphs/"+graphID, map[string]any{"threadId": id, "runId": "r1", "messages": []any{}}),
			"threadId", id)
	}
	for _, id := range []string{".a", "a..", "..:", "._."} {
		g := basicGraph("")
		g["id"] = id
		e.mustStatus(e.do("POST", "/api/v1/graphs", g, nil), http.StatusCreated)
		e.mustStatus(e.do("GET", "/api/v1/graphs/"+id, nil, nil), http.StatusOK)
		e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": id, "id": "c" + id}, nil), http.StatusCreated)
	}
	var list []map[string]any
	e.mustStatus(e.do("GET", "/api/v1/graphs", nil, &list), http.StatusOK)
	require.Len(t, list, 5, "no dot-only graph was saved")
}

// A query string that does not parse (a bad escape, a ';' separator) is
// 400 with the error body on every route, instead of answering as if the
// bad pair were not there: ?status=%ZZ would list every run, ?limit=%ZZ
// a page of the default size.
func TestMalformedQueryIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	graphID, chatID := e.newChat(basicGraph(""))
	for _, bad := range []struct{ method, path, message string }{
		{"GET", "/api/v1/runs?status=%ZZ", `invalid URL escape "%ZZ"`},
		{"GET", "/api/v1/graphs?limit=%ZZ", `invalid URL escape "%ZZ"`},
		{"GET", "/api/v1/chats?graphId=" + graphID + "&cursor=%G1", `invalid URL escape "%G1"`},
		{"GET", "/api/v1/chats/" + chatID + "/messages?limit=1;cursor=x", "invalid semicolon separator in query"},
		{"GET", "/api/v1/runs/r_x/events?after=%", `invalid URL escape "%"`},
		{"POST", "/api/v1/chats/" + chatID + "/messages?x=%zz", `invalid URL escape "%zz"`},
		{"GET", "/api/v1/nothing?x=%ZZ", `invalid URL escape "%ZZ"`},
		{"GET", "/v1/models?x=%ZZ", `invalid URL escape "%ZZ"`},
		{"GET", "/?x=%ZZ", `invalid URL escape "%ZZ"`},
		{"GET", "/some/client/route?x=%ZZ", `invalid URL escape "%ZZ"`},
	} {
		require.Equal(t, "the query string does not parse: "+bad.message, e.badRequest(bad.method, bad.path, map[string]any{"content": "hi"}),
			"%s %s", bad.method, bad.path)
	}
	require.Empty(t, messages(e.chat(chatID)), "no call reached the chat")
	e.mustStatus(e.do("GET", "/api/v1/runs?status=completed%2Cfailed&limit=5", nil, nil), http.StatusOK)
}

// badRequest sends a request that must answer 400 invalid_json in the
// JSON error body, and returns the error's message.
func (e *env) badRequest(method, path string, body any) string {
	e.t.Helper()
	var b errBody
	resp := e.do(method, path, body, &b)
	e.mustStatus(resp, http.StatusBadRequest)
	require.Equal(e.t, "application/json", strings.Split(resp.Header.Get("Content-Type"), ";")[0], "%s %s", method, path)
	require.Equal(e.t, "invalid_json", b.Error.Code, "%s %s", method, path)
	return b.Error.Message
}
