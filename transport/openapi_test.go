package transport_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/transport"
)

var param = regexp.MustCompile(`:([A-Za-z]+)`)

// TestOpenAPICoversRoutes keeps docs/openapi.json true: every route the
// server registers is documented with its method, and nothing documented
// is missing from the server.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(transport.OpenAPI, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	docs, err := os.ReadFile("../docs/openapi.json")
	require.NoError(t, err)
	require.Equal(t, string(docs), string(transport.OpenAPI), "docs/openapi.json and transport/openapi.json differ")

	e := newEnv(t)
	served := map[string]bool{}
	for _, r := range e.srv.Echo().Routes() {
		if r.Method == "echo_route_not_found" {
			continue // the UI's catch-all and the API's 404
		}
		p := param.ReplaceAllString(r.Path, "{$1}")
		m := strings.ToLower(r.Method)
		served[m+" "+p] = true
		ops, ok := doc.Paths[p]
		require.True(t, ok, "route %s %s is not in openapi.json", r.Method, p)
		require.Contains(t, ops, m, "route %s %s is not in openapi.json", r.Method, p)
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			require.True(t, served[m+" "+p], "openapi.json documents %s %s, which the server does not serve", m, p)
		}
	}
}
