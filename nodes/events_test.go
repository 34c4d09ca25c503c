package nodes_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
)

// TestEventPayloadWireFormat pins the JSON of the events nodes emit (one
// line per event type), as clients see it in data.
func TestEventPayloadWireFormat(t *testing.T) {
	t.Parallel()
	call := &nodes.ToolCallData{ID: "call_1", Name: "calculator", Arguments: json.RawMessage(`{"expression":"6*7"}`),
		RequiresApproval: true, IdempotencyKey: "idk_1"}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{&nodes.NodeDeltaData{Text: " world"}, `{"text":" world"}`},
		{call, `{"id":"call_1","name":"calculator","arguments":{"expression":"6*7"},"requiresApproval":true,"idempotencyKey":"idk_1"}`},
		{&nodes.ToolCallData{ID: "c", Name: "x", Arguments: json.RawMessage(`{}`), AgentNodeID: "m", Replayed: true},
			`{"id":"c","name":"x","arguments":{},"agentNodeId":"m","replayed":true}`},
		{&nodes.ToolResultData{ID: "call_1", Name: "calculator", Result: "42"}, `{"id":"call_1","name":"calculator","result":"42"}`},
		{&nodes.ToolResultData{ID: "c", Name: "x", Error: "the user refused this call: no", Approval: &nodes.ApprovalDecision{Reason: "no"}},
			`{"id":"c","name":"x","result":"","error":"the user refused this call: no","approval":{"approved":false,"reason":"no"}}`},
		{&nodes.ApprovalRequiredData{Kind: nodes.ApprovalKindToolCall, Prompt: "Allow a to call calculator?", ToolCall: call},
			`{"kind":"tool_call","prompt":"Allow a to call calculator?","toolCall":{"id":"call_1","name":"calculator","arguments":{"expression":"6*7"},"requiresApproval":true,"idempotencyKey":"idk_1"}}`},
		{&nodes.ApprovalRequiredData{Kind: nodes.ApprovalKindNode, Prompt: "Send?", Input: map[string]any{"role": "user", "content": "hi"}},
			`{"kind":"node","prompt":"Send?","input":{"content":"hi","role":"user"}}`},
		{nodes.Message{Role: "assistant", Content: "hi", Name: "A", Metadata: map[string]any{"nodeId": "a"}},
			`{"role":"assistant","content":"hi","name":"A","metadata":{"nodeId":"a"}}`},
		{nodes.ChatInput{History: []nodes.Message{{Role: "user", Content: "q"}}, Content: "c", UserTools: []string{"calculator"}},
			`{"history":[{"role":"user","content":"q"}],"content":"c","userTools":["calculator"]}`},
	} {
		b, err := json.Marshal(tc.v)
		require.NoError(t, err)
		require.Equal(t, tc.want, string(b))
	}
}

// A delta encodes itself (runtime.DataAppender) to the very bytes
// json.Marshal gives for it, whatever its text: HTML characters, control
// characters, quotes, U+2028, invalid UTF-8.
func FuzzNodeDeltaAppendJSON(f *testing.F) {
	for _, s := range []string{"", "word ", `say "hi"\`, "<b>&amp;</b>", "tab\tnew\nline\x00", "é 漢字 🙂", "\u2028\u2029", "\xff\xfe bad", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(nodes.NodeDeltaData{Text: s})
		require.NoError(t, err)
		require.Equal(t, string(want), string(nodes.NodeDeltaData{Text: s}.AppendJSON(nil)))
		require.Equal(t, "x"+string(want), string((&nodes.NodeDeltaData{Text: s}).AppendJSON([]byte("x"))))
	})
}
