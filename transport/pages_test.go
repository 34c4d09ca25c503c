package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// List routes answer pages: ?limit items, a Link to the next page while
// pages are full, every item once and in order; bad limits and cursors
// are 400s.
func TestListRoutesArePaged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var graphID string
	for range 5 {
		graphID, _ = e.newChat(basicGraph(""))
	}
	for range 4 { // one more chat per graph above, four more on the last
		var ch map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
	}
	walk := func(first string) (ids []string, pages int) {
		next := first
		for next != "" {
			var page []map[string]any
			resp := e.do("GET", next, nil, &page)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.LessOrEqual(t, len(page), 2)
			for _, it := range page {
				ids = append(ids, it["id"].(string))
			}
			pages++
			next = ""
			if link := resp.Header.Get("Link"); link != "" {
				require.True(t, strings.HasSuffix(link, `>; rel="next"`), link)
				next = strings.TrimPrefix(strings.TrimSuffix(link, `>; rel="next"`), "<")
			}
		}
		return ids, pages
	}
	all := func(path string) []string {
		var items []map[string]any
		e.mustStatus(e.do("GET", path, nil, &items), http.StatusOK)
		ids := []string{}
		for _, it := range items {
			ids = append(ids, it["id"].(string))
		}
		return ids
	}
	ids, pages := walk("/api/v1/graphs?limit=2")
	require.Equal(t, all("/api/v1/graphs"), ids)
	require.Len(t, ids, 5)
	require.Equal(t, 3, pages)
	ids, _ = walk("/api/v1/chats?limit=2&graphId=" + graphID)
	require.Equal(t, all("/api/v1/chats?graphId="+graphID), ids)
	require.Len(t, ids, 5, "the filter holds on every page")

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=!!!", "cursor=bm9kb3Q"} {
		var out map[string]any
		resp := e.do("GET", "/api/v1/graphs?"+q, nil, &out)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
}

// A chat's messages come in pages of GET /chats/{id}/messages; GET
// /chats/{id} embeds at most 1000 of them and names the page that
// follows (messagesCursor, Link rel="next"), so following it gives the
// whole chat once, in creation order.
func TestChatMessagesArePaged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	const n = 1005
	msgs := make([]*chat.Message, n)
	parent := ""
	for i := range msgs {
		msgs[i] = &chat.Message{ID: fmt.Sprintf("m%04d", i), ParentID: parent, Role: chat.RoleUser, Content: "hi",
			Status: chat.StatusCompleted}
		parent = msgs[i].ID
	}
	now := time.Now()
	require.NoError(t, e.chats.BeginTurn(t.Context(), chat.Turn{ChatID: chatID, ActiveLeafID: parent, Messages: msgs,
		Run: &runtime.RunRecord{ID: "r_bulk", RootID: "r_bulk", ChatID: chatID, GraphID: "g", Status: runtime.RunPending,
			CreatedAt: now, UpdatedAt: now}}))

	var c struct {
		Messages       []map[string]any `json:"messages"`
		MessagesCursor string           `json:"messagesCursor"`
	}
	resp := e.do("GET", "/api/v1/chats/"+chatID, nil, &c)
	e.mustStatus(resp, http.StatusOK)
	require.Len(t, c.Messages, 1000, "GET /chats/{id} embeds one page")
	require.NotEmpty(t, c.MessagesCursor)
	link := resp.Header.Get("Link")
	require.Equal(t, "</api/v1/chats/"+chatID+"/messages?cursor="+c.MessagesCursor+`&limit=1000>; rel="next"`, link)
	var rest []map[string]any
	resp = e.do("GET", strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`), nil, &rest)
	e.mustStatus(resp, http.StatusOK)
	require.Empty(t, resp.Header.Get("Link"), "a short page is the last")
	var ids []string
	for _, m := range append(c.Messages, rest...) {
		ids = append(ids, m["id"].(string))
	}
	want := make([]string, n)
	for i, m := range msgs {
		want[i] = m.ID
	}
	require.Equal(t, want, ids, "the embedded page and the next one are the chat")

	// Small pages, followed by their links.
	ids = nil
	next, pages := "/api/v1/chats/"+chatID+"/messages?limit=400", 0
	for next != "" {
		var page []map[string]any
		resp := e.do("GET", next, nil, &page)
		e.mustStatus(resp, http.StatusOK)
		for _, m := range page {
			ids = append(ids, m["id"].(string))
		}
		pages++
		next = strings.TrimSuffix(strings.TrimPrefix(resp.Header.Get("Link"), "<"), `>; rel="next"`)
	}
	require.Equal(t, want, ids)
	require.Equal(t, 3, pages)

	// A short chat is whole in GET /chats/{id}, with no cursor; an empty
	// one has messages: [] (also as POST /chats answers it), a listing
	// none.
	smallGraph, small := e.newChat(basicGraph(""))
	var sc map[string]any
	resp = e.do("GET", "/api/v1/chats/"+small, nil, &sc)
	e.mustStatus(resp, http.StatusOK)
	require.NotContains(t, sc, "messagesCursor")
	require.Empty(t, resp.Header.Get("Link"))
	require.Equal(t, []any{}, sc["messages"], "an empty chat has messages: []")
	var created map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": smallGraph}, &created), http.StatusCreated)
	require.Equal(t, []any{}, created["messages"], "a new chat has messages: []")
	var listed []map[string]any
	e.mustStatus(e.do("GET", "/api/v1/chats?graphId="+smallGraph, nil, &listed), http.StatusOK)
	require.Len(t, listed, 2)
	require.NotContains(t, listed[0], "messages", "a listing carries no messages")

	var chatsPage []map[string]any
	resp = e.do("GET", "/api/v1/chats?limit=1", nil, &chatsPage)
	chatCursor := strings.Split(strings.Split(resp.Header.Get("Link"), "cursor=")[1], "&")[0]
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=!!!", "cursor=bTA", "cursor=" + chatCursor} {
		var out map[string]any
		resp := e.do("GET", "/api/v1/chats/"+chatID+"/messages?"+q, nil, &out)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
		require.Equal(t, "invalid_json", out["error"].(map[string]any)["code"], q)
	}
	var out map[string]any
	e.mustStatus(e.do("GET", "/api/v1/chats/nope/messages", nil, &out), http.StatusNotFound)
}

// A client may own --max-chats-per-client chats: the next is 429
// quota_exceeded on every route that creates chats, until it deletes one.
func TestChatsPerClientQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.MaxChatsPerClient = 2 })
	graphID, first := e.newChat(basicGraph(""))
	var ch map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
	var out map[string]any
	resp := e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &out)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	errObj := out["error"].(map[string]any)
	require.Equal(t, "quota_exceeded", errObj["code"])
	require.Equal(t, "too many chats: the limit is 2 per client; delete chats to create more",
		errObj["message"])
	require.Empty(t, resp.Header.Get("Retry-After"), "waiting does not help")

	out = nil
	resp = e.do("POST", "/v1/chat/completions", map[string]any{"model": graphID,
		"messages": []map[string]any{{"role": "user", "content": "hi"}}}, &out)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the OpenAI-compatible route counts too")
	require.Equal(t, "quota_exceeded", out["error"].(map[string]any)["code"])

	e.mustStatus(e.do("DELETE", "/api/v1/chats/"+first, nil, nil), http.StatusNoContent)
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
}
