package chat_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A stateless client's transcript becomes the chat's branch before the
// new message, and the agent reads it (system messages included).
func TestHistorySeedsTheChat(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "and now?", History: []chat.HistoryMessage{
		{Role: chat.RoleSystem, Content: "be brief"}, {Role: chat.RoleUser, Content: "hi"}, {Role: chat.RoleAssistant, Content: "hello"}}})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	msgs, err := f.chats.Messages(context.Background(), chatID)
	require.NoError(t, err)
	require.Len(t, msgs, 5)
	// The branch: system -> user -> assistant -> user (new) -> assistant.
	byID := map[string]*chat.Message{}
	for _, x := range msgs {
		byID[x.ID] = x
	}
	var branch []string
	for id := m.ID; id != ""; id = byID[id].ParentID {
		branch = append([]string{string(byID[id].Role) + ":" + byID[id].Content}, branch...)
	}
	require.Equal(t, []string{"system:be brief", "user:hi", "assistant:hello", "user:and now?", "assistant:echo: and now?"}, branch)
	var started map[string]any
	for _, ev := range f.pub.of(tk.RunID) {
		if ev.Type == runtime.EventNodeStarted && ev.NodeID == "helper" {
			started = ev.Data.(*runtime.NodeStartedData).Details
		}
	}
	require.EqualValues(t, 4, started["messageCount"], "three transcript messages and the new one")

	_, err = f.svc.Send(context.Background(), chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "x",
		History: []chat.HistoryMessage{{Role: "tool", Content: "?"}}})
	requireCode(t, err, chat.CodeInvalid)
}

// A client tool call interrupts the turn; a continue with the result
// completes the same assistant message.
func TestClientToolTurn(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: `/tool lookup {"q":"x"}`,
		ClientTools: []chat.ClientTool{{Name: "lookup", Description: "Looks things up"}}})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusInterrupted, m.Status)
	rec, err := f.runs.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Len(t, rec.Interrupts, 1)
	require.Equal(t, nodes.ReasonClientTool, rec.Interrupts[0].Reason)

	next := f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: chatID, MessageID: tk.MessageID, Resume: "found it"})
	require.Equal(t, tk.MessageID, next.MessageID)
	m = f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "tool lookup returned: found it", m.Content)
}
