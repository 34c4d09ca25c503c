package nodes_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// Arguments that violate the tool's JSON Schema never reach the tool:
// the model gets the violations as the call's result, corrects the call,
// and the corrected call runs.
func TestToolArgumentsCheckedAgainstSchema(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var got []string
	require.NoError(t, h.tools.Register(tools.New(tools.Spec{Name: "repeat", Description: "repeats a word",
		Parameters: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string","minLength":1},"times":{"type":"integer","minimum":1,"maximum":5}},"required":["word","times"],"additionalProperties":false}`)},
		func(_ context.Context, c tools.Call) (string, error) {
			got = append(got, string(c.Arguments))
			var a struct {
				Word  string
				Times int
			}
			_ = json.Unmarshal(c.Arguments, &a)
			return strings.Repeat(a.Word, a.Times), nil
		})))
	var seen []string
	h.script.set(func(req llm.Request) (llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == llm.RoleUser:
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "repeat", Arguments: `{"word":"ab","times":9,"color":"red"}`}}}, nil
		case strings.HasPrefix(last.Content, "error: "):
			seen = append(seen, last.Content)
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c2", Name: "repeat", Arguments: `{"word":"ab","times":3}`}}}, nil
		}
		return llm.Response{Content: "done: " + last.Content}, nil
	})
	g := newGraph("schema").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"script/x"}`).
		node("r", nodes.TypeTool, `{"name":"repeat"}`).flow("s", "a").link("r", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, "done: ababab", output(t, res, "a").Content)
	require.Equal(t, []string{`{"word":"ab","times":3}`}, got, "the invalid call never reached the tool")

	require.Len(t, seen, 1)
	msg := seen[0]
	require.Contains(t, msg, "arguments do not match the tool's schema")
	require.Contains(t, msg, "/times")
	require.Contains(t, msg, "color")
	results := s.of(nodes.EventToolResult, "a")
	require.Len(t, results, 2)
	require.Equal(t, strings.TrimPrefix(msg, "error: "), results[0].Data.(*nodes.ToolResultData).Error)
	require.Empty(t, results[1].Data.(*nodes.ToolResultData).Error)
}
