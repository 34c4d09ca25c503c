package chat_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/nodes"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// A run stopped while its agent streams keeps, in its message, the text
// its subscribers received — on a store that writes the message apart
// from the run's end and on those (SQLite, Postgres) that join it to the
// end's commit — and the message says it was cancelled.
func TestStoppedAnswerKeepsItsText(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) *fixture{
		"memory": newMemFixture,
		"sqlite": func(t *testing.T) *fixture { f, _, _, _ := sqliteJoined(t); return f },
		"postgres": func(t *testing.T) *fixture {
			runs, chats := openPostgres(t)
			return newFixture(t, runs, chats, runtime.Config{})
		},
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

// On a store that joins the answer to the run's end (SQLite), a stopped
// answer is written in the end's own commit with the text its agent
// streamed, gathered as the run emitted it (runtime.Joined.Tap): a
// process that writes nothing after that commit (its message writes
// dropped, as a crash there would) leaves the answer cancelled, its text
// the log's. (Before, the text was written after the end's commit, and
// the answer was unsettled until then.)
func TestStoppedTextIsInTheEndsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, chats, runs, _ := sqliteJoined(t)
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six seven eight"})
	require.Eventually(t, func() bool { return len(deltasOf(f.pub.of(tk.RunID))) >= 3 }, 10*time.Second, 5*time.Millisecond)
	chats.dropFinish.Store(true)
	_, err := f.svc.Cancel(ctx, chat.CancelRequest{RunID: tk.RunID})
	require.NoError(t, err)
	<-waitClosed(t, f, tk.RunID)
	m, err := chats.GetMessage(ctx, chatID, tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusCancelled, m.Status, "the end's commit wrote the answer")
	require.Equal(t, "user_cancel", m.Error)
	log, err := runs.Events(ctx, tk.RunID, 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, m.Content)
	require.Equal(t, stoppedLogText(t, log), m.Content, "the text of the log")
}

// stoppedLogText is the node_delta texts of a stored log (data as JSON).
func stoppedLogText(t *testing.T, log []runtime.Event) string {
	var b strings.Builder
	for _, ev := range log {
		if ev.Type != nodes.EventNodeDelta {
			continue
		}
		var d nodes.NodeDeltaData
		raw, ok := ev.Data.(json.RawMessage)
		require.True(t, ok, "stored data is JSON")
		require.NoError(t, json.Unmarshal(raw, &d))
		b.WriteString(d.Text)
	}
	return b.String()
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

// A run recovered after its process died and then stopped while its
// agent streams again writes its answer in the commit of its end, as a
// turn does: cancelled, with the text its agent said in its last attempt
// (after the recovery's retry), though the process writes nothing after
// that commit (its message writes dropped).
func TestRecoveredStoppedAnswerIsInTheEndsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(t.TempDir(), "chatgraph.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = runs.Close() })
	cs, err := chatsqlite.Open(ctx, runs)
	require.NoError(t, err)
	var dead atomic.Bool
	a := newFixture(t, dyingRuns{durableRuns: runs, dead: &dead}, deadChats{Store: cs, dead: &dead},
		runtime.Config{Owner: "a", LeaseTTL: 300 * time.Millisecond})
	_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: strings.Repeat("word ", 60)})
	require.Eventually(t, func() bool { return len(deltasOf(a.pub.of(tk.RunID))) >= 2 }, 10*time.Second, 2*time.Millisecond)
	dead.Store(true)

	chats := &joinCounter{Store: cs, n: map[string]int{}}
	chats.dropFinish.Store(true)
	b := newFixture(t, runs, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second})
	b.svc.Start(ctx)
	require.Eventually(t, func() bool { return len(deltasOf(b.pub.of(tk.RunID))) >= 3 }, 10*time.Second, 2*time.Millisecond,
		"the recovered run streams")
	_, err = b.svc.Cancel(ctx, chat.CancelRequest{RunID: tk.RunID})
	require.NoError(t, err)
	<-waitClosed(t, b, tk.RunID)

	m, err := chats.GetMessage(ctx, chatID, tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusCancelled, m.Status, "the end's commit wrote the answer")
	log, err := runs.Events(ctx, tk.RunID, 0, 0)
	require.NoError(t, err)
	retried := -1 // the recovery's retry of the agent
	for i, ev := range log {
		if ev.Type == runtime.EventNodeRetrying && ev.NodeID == "helper" {
			retried = i
		}
	}
	require.GreaterOrEqual(t, retried, 0, "the recovery retried the agent")
	require.NotEmpty(t, m.Content)
	require.Equal(t, stoppedLogText(t, log[retried:]), m.Content, "the text of the agent's last attempt in the log")
}
