package transport_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// If-Match on a graph save names the planVersion the client edited: the
// save is 409 unless the graph is at it, and a planVersion is 1 or more,
// so "0" or a negative one is 409 too (it was taken for no If-Match and
// saved). No If-Match or "*" saves whatever the version; one that is no
// number is 400; a graph that does not exist is 404 either way.
func TestGraphSaveIfMatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	g["id"] = "g1"
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, nil), http.StatusCreated)
	save := func(ifMatch string) (*http.Response, errBody) {
		t.Helper()
		var b errBody
		var h []map[string]string
		if ifMatch != "" {
			h = append(h, map[string]string{"If-Match": ifMatch})
		}
		return e.do("PUT", "/api/v1/graphs/g1", g, &b, h...), b
	}
	version := func() float64 {
		t.Helper()
		var got map[string]any
		e.mustStatus(e.do("GET", "/api/v1/graphs/g1", nil, &got), http.StatusOK)
		return got["planVersion"].(float64)
	}

	for _, stale := range []string{`"0"`, "0", "-5", `"-1"`, `"2"`, "9223372036854775807"} {
		resp, b := save(stale)
		e.mustStatus(resp, http.StatusConflict)
		require.Equal(t, "conflict", b.Error.Code, stale)
		require.Contains(t, b.Error.Message, "graph g1 is at planVersion 1, not ", stale)
		require.EqualValues(t, 1, version(), "If-Match %s saved", stale)
	}
	resp, b := save("W/1")
	e.mustStatus(resp, http.StatusBadRequest)
	require.Equal(t, "If-Match must be a planVersion", b.Error.Message)

	resp, _ = save(`"1"`)
	e.mustStatus(resp, http.StatusOK)
	resp, _ = save("*")
	e.mustStatus(resp, http.StatusOK)
	resp, _ = save("")
	e.mustStatus(resp, http.StatusOK)
	require.EqualValues(t, 4, version())

	var nb errBody
	delete(g, "id")
	e.mustStatus(e.do("PUT", "/api/v1/graphs/nope", g, &nb, map[string]string{"If-Match": `"0"`}), http.StatusNotFound)
	require.Equal(t, "not_found", nb.Error.Code)
}
