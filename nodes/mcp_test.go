package nodes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/mcptest"
	"chatgraph/nodes"
	"chatgraph/nodes/tools/mcp"
	"chatgraph/runtime"
)

// everythingHarness is a harness whose tool registry has the MCP server
// server-everything (a real one, over stdio) as the source "everything".
func everythingHarness(t *testing.T) (*harness, *mcp.Server) {
	t.Helper()
	cmd, args := mcptest.Everything(t)
	h := newHarness(t)
	srv, err := mcp.New(mcp.Config{Name: "everything", Command: cmd, Args: args})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	require.NoError(t, h.tools.AddSource("everything", srv))
	return h, srv
}

// An agent calls a tool of an MCP server through a graph: the tool node
// names it server/tool, the model sees the server's name and schema, the
// call goes through the ledger like any other.
func TestAgentCallsMCPTool(t *testing.T) {
	t.Parallel()
	h, _ := everythingHarness(t)
	g := newGraph("mcp").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("sum", nodes.TypeTool, `{"name":"everything/get-sum"}`).flow("s", "a").link("sum", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get-sum {"a":20,"b":22}`})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, "tool get-sum returned: The sum of 20 and 22 is 42.", output(t, res, "a").Content)
	started := data(t, s.of(runtime.EventNodeStarted, "a")[0])
	require.Equal(t, []any{"get-sum"}, started["tools"])
	calls := s.of(nodes.EventToolCall, "a")
	require.Len(t, calls, 1)
	key := calls[0].Data.(*nodes.ToolCallData).IdempotencyKey
	rec, ok, err := h.ledger.Get(context.Background(), key)
	require.NoError(t, err)
	require.True(t, ok, "the MCP call is recorded in the ledger")
	require.Contains(t, string(rec.Value), "is 42")

	// An MCP error (arguments the server rejects) is a result the model
	// reads; the run goes on.
	res, s = h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get-sum {"a":"x","b":1}`})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	r := s.of(nodes.EventToolResult, "a")[0].Data.(*nodes.ToolResultData)
	require.NotEmpty(t, r.Error)
}

// Cancelling a run while an MCP call is in flight ends the call (the
// server gets notifications/cancelled), the agent is node_cancelled, and
// the server's session still serves the next run.
func TestCancelDuringMCPCall(t *testing.T) {
	t.Parallel()
	h, srv := everythingHarness(t)
	_, err := srv.Tools(context.Background()) // connected before the clock starts
	require.NoError(t, err)
	g := newGraph("mcp-cancel").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("long", nodes.TypeTool, `{"name":"everything/trigger-long-running-operation"}`).
		node("sum", nodes.TypeTool, `{"name":"everything/get-sum"}`).
		flow("s", "a").link("long", "a").link("sum", "a").build()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s := &sink{}
	st, err := h.eng.Stream(ctx, runtime.RunRequest{Graph: g, Sink: s, Services: &nodes.Services{},
		Input: nodes.ChatInput{Content: `/tool trigger-long-running-operation {"duration":60,"steps":60}`}.Value()})
	require.NoError(t, err)
	cause := errors.New("user cancelled")
	var cancelledAt time.Time
	for e := range st.Events() {
		if e.Type == nodes.EventToolCall {
			cancelledAt = time.Now()
			cancel(cause)
		}
	}
	res, err := st.Wait()
	require.NoError(t, err)
	require.False(t, cancelledAt.IsZero(), "the MCP call started")
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Less(t, time.Since(cancelledAt), 15*time.Second, "the run ended with the cancel, not with the 60 s operation")
	require.Len(t, s.of(runtime.EventNodeCancelled, "a"), 1)
	require.Empty(t, s.of(nodes.EventToolResult, "a"))

	res, _ = h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get-sum {"a":1,"b":2}`})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, "tool get-sum returned: The sum of 1 and 2 is 3.", output(t, res, "a").Content)
}

// A tool node naming a server that is not configured is a data error at
// save time; a tool the server does not have fails the agent with
// tool_unavailable.
func TestMCPToolNodeErrors(t *testing.T) {
	t.Parallel()
	h, _ := everythingHarness(t)
	g := newGraph("bad").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("t", nodes.TypeTool, `{"name":"nowhere/x"}`).flow("s", "a").link("t", "a").build()
	diags := h.eng.Validate(g)
	require.NotEmpty(t, diags)
	require.Contains(t, diags[0].Message, `no MCP server "nowhere"`)

	g = newGraph("missing").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("t", nodes.TypeTool, `{"name":"everything/no-such-tool"}`).flow("s", "a").link("t", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "hi"})
	require.Equal(t, runtime.RunFailed, res.Status)
	failed := data(t, s.of(runtime.EventNodeFailed, "a")[0])
	require.Equal(t, nodes.CodeToolUnavailable, failed["code"])
	require.Contains(t, failed["error"], `has no tool "no-such-tool"`)
}

// A guarded MCP tool waits for a person like any tool: the run
// interrupts before the call, and the approved resume makes it once.
func TestMCPToolApproval(t *testing.T) {
	t.Parallel()
	h, _ := everythingHarness(t)
	g := newGraph("mcp-approve").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("sum", nodes.TypeTool, `{"name":"everything/get-sum","requireApproval":true}`).flow("s", "a").link("sum", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get-sum {"a":2,"b":2}`})
	require.Equal(t, runtime.RunInterrupted, res.Status, "%v", res.Err)
	require.Len(t, s.of(nodes.EventApprovalRequired, "a"), 1)
	require.Empty(t, s.of(nodes.EventToolResult, "a"), "not called before the approval")

	res, s = h.resume(t, g, res.RunID, map[string]any{"approved": true})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, "tool get-sum returned: The sum of 2 and 2 is 4.", output(t, res, "a").Content)
	results := s.of(nodes.EventToolResult, "a")
	require.Len(t, results, 1)
	require.False(t, results[0].Data.(*nodes.ToolResultData).Replayed)
}

// A user may enable a tool of an MCP server by its server/tool name where
// the graph lists it (an MCP tool is never safe by default); a linked
// tool of the same model-facing name wins.
func TestMCPUserTool(t *testing.T) {
	t.Parallel()
	h, _ := everythingHarness(t)
	g := newGraph("mcp-unlisted").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).flow("s", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "hi", UserTools: []string{"everything/get-sum"}})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, []any{}, data(t, s.of(runtime.EventNodeStarted, "a")[0])["tools"], "not listed: not given")

	g = newGraph("mcp-user").node("s", nodes.TypeChatStart, map[string]any{"userTools": []string{"everything/get-sum", "everything/no-such-tool"}}).
		node("a", nodes.TypeAgent).flow("s", "a").build()
	res, s = h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get-sum {"a":3,"b":4}`,
		UserTools: []string{"everything/get-sum", "everything/no-such-tool"}})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, "tool get-sum returned: The sum of 3 and 4 is 7.", output(t, res, "a").Content)
	require.Equal(t, []any{"get-sum"}, data(t, s.of(runtime.EventNodeStarted, "a")[0])["tools"])

	g = newGraph("mcp-user-dup").node("s", nodes.TypeChatStart, map[string]any{"userTools": []string{"everything/get-sum"}}).node("a", nodes.TypeAgent).
		node("sum", nodes.TypeTool, `{"name":"everything/get-sum","description":"linked"}`).flow("s", "a").link("sum", "a").build()
	res, s = h.run(t, context.Background(), g, nodes.ChatInput{Content: "hi", UserTools: []string{"everything/get-sum"}})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, []any{"get-sum"}, data(t, s.of(runtime.EventNodeStarted, "a")[0])["tools"], "one tool, the linked one")
}
