package nodes

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// AsChatInput reads the JSON object form directly when it can; the result
// must be what decoding its JSON text gives, for every form.
func TestChatInputOfMatchesJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		in     string
		direct bool
	}{
		{"content only", `{"content":"hi"}`, true},
		{"empty", `{}`, true},
		{"history", `{"history":[{"role":"user","content":"a"},{"role":"assistant","content":"b","name":"Helper"}],"content":"c"}`, true},
		{"empty history", `{"history":[],"content":"c"}`, true},
		{"user tools", `{"content":"c","userTools":["clock","search"]}`, true},
		{"history reference", `{"historyFrom":{"chatId":"c_1","messageId":"m_2","pinned":{"m_1":"kept","m_0":""}},"content":"c"}`, true},
		{"reference without pins", `{"historyFrom":{"chatId":"c_1","messageId":"m_2"},"content":"c"}`, true},
		{"reference of another shape", `{"historyFrom":{"chatId":1},"content":"c"}`, false},
		{"null reference", `{"historyFrom":null,"content":"c"}`, false},
		{"metadata", `{"history":[{"role":"assistant","content":"b","metadata":{"nodeId":"x"}}],"content":"c"}`, false},
		{"client tools", `{"content":"c","clientTools":[{"name":"f","parameters":{"type":"object"}}]}`, false},
		{"number content", `{"content":5}`, false},
		{"null history", `{"history":null,"content":"c"}`, false},
		{"other key", `{"content":"c","Content":"d"}`, false},
		{"tool not a string", `{"content":"c","userTools":[1]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.in), &v))
			_, ok := chatInputOf(v)
			require.Equal(t, tc.direct, ok)
			require.Equal(t, decodeChatInput(v), AsChatInput(v))
		})
	}
	in := ChatInput{History: []Message{{Role: RoleUser, Content: "a"}}, Content: "b", UserTools: []string{"t"}}
	require.Equal(t, in, AsChatInput(in.Value()))
	in = ChatInput{HistoryFrom: &HistoryRef{ChatID: "c", MessageID: "m", Pinned: map[string]string{"m0": "x"}}, Content: "b"}
	require.Equal(t, in, AsChatInput(in.Value()))
}
