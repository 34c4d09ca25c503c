package chat_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A run stopped while its agent streams keeps, in its message, the text
// its subscribers received — on a store that writes the message apart
// from the run's end and on one (SQLite) that joins it to the end's
// commit — and the message says it was cancelled.
func TestStoppedAnswerKeepsItsText(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) *fixture{
		"memory": newMemFixture,
		"sqlite": func(t *testing.T) *fixture { f, _, _, _ := sqliteJoined(t); return f },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := open(t)
			_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
			content := "one two three four five six seven eight nine ten eleven twelve"
			tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: content})
			require.Eventually(t, func() bool { return len(deltasOf(f.pub.of(tk.RunID))) >= 3 },
				10*time.Second, 5*time.Millisecond)
			_, err := f.svc.Cancel(context.Background(), chat.CancelRequest{RunID: tk.RunID})
			require.NoError(t, err)
			<-waitClosed(t, f, tk.RunID)

			streamed := strings.Join(deltasOf(f.pub.of(tk.RunID)), "")
			m, err := f.chats.GetMessage(context.Background(), chatID, tk.MessageID)
			require.NoError(t, err)
			require.Equal(t, chat.StatusCancelled, m.Status)
			require.Equal(t, "user_cancel", m.Error)
			require.Equal(t, streamed, m.Content, "the message keeps what was streamed")
			require.True(t, strings.HasPrefix("echo: "+content, m.Content))
			require.Less(t, len(m.Content), len("echo: "+content), "stopped before the end")
		})
	}
}

// A stopped run whose agent streamed nothing yet keeps no text.
func TestStoppedBeforeAnyTextKeepsNone(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":50}`)
	_, err := f.svc.Cancel(context.Background(), chat.CancelRequest{ChatID: chatID, ClientRequestID: "req-1"})
	require.NoError(t, err)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "never answered", ClientRequestID: "req-1"})
	<-waitClosed(t, f, tk.RunID)
	m, err := f.chats.GetMessage(context.Background(), chatID, tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusCancelled, m.Status)
	require.Empty(t, m.Content)
}

// deltasOf is the node_delta texts among evs, in order.
func deltasOf(evs []runtime.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type != nodes.EventNodeDelta {
			continue
		}
		switch d := ev.Data.(type) {
		case nodes.NodeDeltaData:
			out = append(out, d.Text)
		case *nodes.NodeDeltaData:
			out = append(out, d.Text)
		}
	}
	return out
}
