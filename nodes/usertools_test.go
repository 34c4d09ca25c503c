package nodes_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A graph lists the user tools its chats may enable: a caller naming
// another registered tool in userTools does not get it.
func TestGraphAllowListOfUserTools(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := 0
	build := func(data map[string]any) *runtime.Graph {
		n++ // compiled plans are cached by graph id and version
		return newGraph(fmt.Sprintf("ua%d", n)).node("s", nodes.TypeChatStart, data).node("a", nodes.TypeAgent).
			node("o", nodes.TypeChatOutput).flow("s", "a").flow("a", "o").build()
	}
	in := nodes.ChatInput{Content: `/tool http_request {"url":"http://169.254.169.254/"}`,
		UserTools: []string{"calculator", "http_request"}}

	res, s := h.run(t, context.Background(), build(map[string]any{"userTools": []string{"calculator", "current_time"}}), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{"calculator"}, started(t, s, "a")["tools"], "http_request is not on the graph's list")
	require.Equal(t, `tool http_request returned: error: unknown tool "http_request"`, output(t, res, "a").Content)

	res, s = h.run(t, context.Background(), build(map[string]any{"userTools": []string{}}), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{}, started(t, s, "a")["tools"], "an empty list allows none")

	// Without the field only the tools registered safe are given:
	// http_request reaches other hosts, an MCP tool may do anything.
	res, s = h.run(t, context.Background(), build(map[string]any{}), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{"calculator"}, started(t, s, "a")["tools"], "http_request is not safe")
	require.Equal(t, `tool http_request returned: error: unknown tool "http_request"`, output(t, res, "a").Content)

	// A list gives what it names, safe or not.
	res, s = h.run(t, context.Background(), build(map[string]any{"userTools": []string{"http_request"}}), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{"http_request"}, started(t, s, "a")["tools"])

	// The list names registered tools, or tools of a known source.
	assertFieldError(t, h, build(map[string]any{"userTools": []string{"teleport"}}), "s", "userTools", `no registered tool "teleport"`)
	assertFieldError(t, h, build(map[string]any{"userTools": []string{"nowhere/echo"}}), "s", "userTools",
		`no tool source "nowhere" (in "nowhere/echo")`)
}
