package transport_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
