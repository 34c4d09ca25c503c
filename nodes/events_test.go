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

// A message's Value is what a JSON round trip of it gives, whether it is
// built directly (valid UTF-8, plain metadata) or through the round trip
// (anything else): the same output, checkpoint and inputs hash either
// way.
func FuzzMessageValue(f *testing.F) {
	f.Add("assistant", "hello <world> & \"you\"", "A", "n1", 1.5, int64(42), 0)
	f.Add("user", "bad \xff utf-8", "", "", 0.0, int64(0), 1)
	f.Add("assistant", "text", "B", "m\xfe", -0.0, int64(1)<<60, 2)
	f.Add("system", "", "", "model", 1e300, int64(-7), 3)
	f.Add("assistant", "é 🙂", "C", "tag", 2.25, int64(12345), 2)
	f.Add("assistant", "x", "", "s", 0.5, int64(1), 4)
	f.Fuzz(func(t *testing.T, role, content, name, str string, num float64, n int64, shape int) {
		m := nodes.Message{Role: role, Content: content, Name: name}
		switch shape % 5 {
		case 1:
			m.Metadata = map[string]any{"nodeId": str, "model": "echo", "score": num}
		case 2:
			m.Metadata = map[string]any{"usage": map[string]any{"totalTokens": int(n), "modelCalls": n}, "tags": []any{str, num, nil, true}}
		case 3:
			m.Metadata = map[string]any{"empty": map[string]any(nil), "none": []any(nil), str: false}
		case 4:
			m.Metadata = map[string]any{"other": struct{ X string }{str}}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Skip("a message that does not encode (a NaN or infinite number)")
		}
		var want any
		require.NoError(t, json.Unmarshal(b, &want))
		require.Equal(t, want, m.Value())
	})
}

// A chat input's Value is what a JSON round trip of it gives, built
// directly or not.
func FuzzChatInputValue(f *testing.F) {
	f.Add("hello <you>", "u1", "c_1", "m_1", "m_0", "pinned", "calculator", 0)
	f.Add("bad \xff", "", "", "", "", "", "", 1)
	f.Add("hi", "a\xfe", "c", "m", "p\xff", "x", "t", 2)
	f.Add("é 🙂", "earlier", "c_2", "m_9", "m_8", "", "", 3)
	f.Add("q", "h", "c", "m", "m", "p", "tool", 4)
	f.Add("go on", "h", "c_3", "m_3", "m_2", "kept", "search", 2)
	f.Fuzz(func(t *testing.T, content, hist, chatID, msgID, pinID, pinned, tool string, shape int) {
		c := nodes.ChatInput{Content: content}
		switch shape % 5 {
		case 1:
			c.History = []nodes.Message{{Role: "user", Content: hist}, {Role: "assistant", Content: pinned, Name: "A",
				Metadata: map[string]any{"nodeId": "a", "score": 1}}}
		case 2:
			c.HistoryFrom = &nodes.HistoryRef{ChatID: chatID, MessageID: msgID, Pinned: map[string]string{pinID: pinned}}
			c.UserTools = []string{tool}
		case 3:
			c.HistoryFrom = &nodes.HistoryRef{ChatID: chatID, MessageID: msgID}
			c.History = []nodes.Message{{Role: "user", Content: hist}}
		case 4:
			c.ClientTools = []nodes.ClientTool{{Name: tool, Parameters: json.RawMessage(`{"type":"object"}`)}}
		}
		b, err := json.Marshal(c)
		require.NoError(t, err)
		var want any
		require.NoError(t, json.Unmarshal(b, &want))
		require.Equal(t, want, c.Value())
	})
}
