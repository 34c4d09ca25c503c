package nodes_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A client tool call interrupts the run with the call; the resume value
// is its result, which the model then reads.
func TestClientToolInterruptsUntilTheClientAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("client").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("o", nodes.TypeChatOutput).flow("s", "a").flow("a", "o").build()
	in := nodes.ChatInput{Content: `/tool get_weather {"city":"Paris"}`, UserTools: []string{"calculator"}, ClientTools: []nodes.ClientTool{
		{Name: "get_weather", Description: "Weather of a city", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
		{Name: "calculator"}, // the user's (registered) calculator wins the name
	}}
	res, s := h.run(t, context.Background(), g, in)
	require.Equal(t, runtime.RunInterrupted, res.Status, "%v", res.Err)
	require.Len(t, res.Interrupts, 1)
	require.Equal(t, nodes.ReasonClientTool, res.Interrupts[0].Reason)
	p := res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData)
	require.Equal(t, nodes.KindClientTool, p.Kind)
	require.Equal(t, "get_weather", p.ToolCall.Name)
	require.True(t, p.ToolCall.ClientTool)
	require.JSONEq(t, `{"city":"Paris"}`, string(p.ToolCall.Arguments))
	require.Equal(t, []any{"calculator", "get_weather"}, started(t, s, "a")["tools"])
	calls := s.of(nodes.EventToolCall, "a")
	require.Len(t, calls, 1)
	require.Equal(t, true, data(t, calls[0])["clientTool"])
	require.Empty(t, s.of(nodes.EventToolResult, "a"))
	require.Empty(t, s.of(nodes.EventApprovalRequired, ""), "a client tool asks no person")

	res2, s2 := h.resume(t, g, res.RunID, map[string]any{"result": "sunny, 21°C"})
	require.Equal(t, runtime.RunCompleted, res2.Status, "%v", res2.Err)
	require.Equal(t, "tool get_weather returned: sunny, 21°C", output(t, res2, "o").Content)
	results := s2.of(nodes.EventToolResult, "a")
	require.Len(t, results, 1)
	r := results[0].Data.(*nodes.ToolResultData)
	require.Equal(t, p.ToolCall.ID, r.ID)
	require.Equal(t, "sunny, 21°C", r.Result)
}

func TestClientToolResultForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in          any
		res, errTxt string
		bad         bool
	}{
		{in: "plain", res: "plain"},
		{in: map[string]any{"result": "r"}, res: "r"},
		{in: map[string]any{"result": map[string]any{"t": 21.0}}, res: `{"t":21}`},
		{in: map[string]any{"error": "no network"}, errTxt: "no network"},
		{in: []any{1.0, 2.0}, res: "[1,2]"},
		{in: map[string]any{"other": true}, res: `{"other":true}`},
		{in: nil, bad: true},
	} {
		res, errTxt, err := nodes.ParseClientResult(tc.in)
		if tc.bad {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.res, res, "%v", tc.in)
		require.Equal(t, tc.errTxt, errTxt, "%v", tc.in)
	}
}

// The chat scope's includeUserTools rule applies to client tools too.
func TestClientToolsFollowTheChatScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("client-off").node("s", nodes.TypeChatStart, map[string]any{"includeUserTools": false}).
		node("a", nodes.TypeAgent).flow("s", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool get_weather {}`,
		ClientTools: []nodes.ClientTool{{Name: "get_weather"}}})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{}, started(t, s, "a")["tools"])
	require.Equal(t, `tool get_weather returned: error: unknown tool "get_weather"`, output(t, res, "a").Content)
}
