package chat_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// calcGraph: chat_start -> agent (spy model) -> chat_output, with a
// calculator the agent calls at once.
const calcGraph = `{"nodes":[{"id":"start","type":"chat_start","data":{}},
	{"id":"helper","type":"agent","data":{"name":"Helper","model":"spy/echo"}},
	{"id":"calc","type":"tool","data":{"name":"calculator"}},
	{"id":"out","type":"chat_output","data":{}}],
	"edges":[{"id":"e1","source":"start","sourceHandle":"message","target":"helper","targetHandle":"input",` + flowEdge + `},
	{"id":"e2","source":"helper","sourceHandle":"output","target":"out","targetHandle":"input",` + flowEdge + `},
	{"id":"e3","source":"calc","sourceHandle":"tool","target":"helper","targetHandle":"tools","data":{"channel":"link"}}]}`

// Text with U+0000 from outside — a client's message, a tool's error
// quoting its input — reaches every store and the runs end: PostgreSQL,
// whose text holds no U+0000, keeps U+FFFD in its place (it refused the
// write before, and the run was retried for ever); SQLite keeps it as
// given. The run's events keep it on both (their payloads are JSON).
func TestTextWithNULIsWritten(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			f := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, &spyModel{}))
			stored := func(s string) string {
				if b.name == "postgres" {
					return strings.ReplaceAll(s, "\x00", "\uFFFD")
				}
				return s
			}
			chatID := f.saveChat(calcGraph)
			for _, tc := range []struct{ content, answer string }{
				{"a\x00b", "echo: a\x00b"},
				// The literal escape \u0000 in the tool's JSON arguments:
				// the expression holds U+0000, and so does the
				// calculator's error, which the answer quotes.
				{`/tool calculator {"expression":"1\u0000"}`, "tool calculator returned: error: invalid arguments: "},
			} {
				tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: tc.content})
				m := f.settled(chatID, tk.MessageID)
				require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
				require.True(t, strings.HasPrefix(m.Content, stored(tc.answer)), "%q", m.Content)
				require.Contains(t, m.Content, stored("\x00"))
				user, err := chats.GetMessage(context.Background(), chatID, tk.UserMessageID)
				require.NoError(t, err)
				require.Equal(t, stored(tc.content), user.Content)

				rec, err := runs.GetRun(context.Background(), tk.RunID)
				require.NoError(t, err)
				require.Equal(t, runtime.RunCompleted, rec.Status)
				evs, err := runs.Events(context.Background(), tk.RunID, 0, 0)
				require.NoError(t, err)
				var text string
				for _, ev := range evs {
					if ev.Type == "node_delta" {
						var d struct{ Text string }
						raw, err := json.Marshal(ev.Data)
						require.NoError(t, err)
						require.NoError(t, json.Unmarshal(raw, &d))
						text += d.Text
					}
				}
				require.Contains(t, text, "\x00", "the events keep U+0000")
			}
		})
	}
}
