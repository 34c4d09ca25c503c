package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/transport/chatstore"
)

// A message whose process died while it waited for its turn has a run id
// but no run record: the next start settles it as failed instead of
// leaving it pending forever.
func TestStartSettlesMessagesWhoseRunNeverBegan(t *testing.T) {
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{}`))
	ctx := context.Background()
	now := time.Now()
	user := &chatstore.Message{ID: "m_lost_u", ChatID: chatID, Role: chatstore.RoleUser, Content: "hi", RunID: "r_lost",
		Status: chatstore.StatusCompleted, CreatedAt: now, UpdatedAt: now}
	lost := &chatstore.Message{ID: "m_lost_a", ChatID: chatID, ParentID: "m_lost_u", Role: chatstore.RoleAssistant, RunID: "r_lost",
		Status: chatstore.StatusPending, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, e.chats.AddMessages(ctx, chatID, lost.ID, user, lost))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.srv.Start(sctx)
	msgs, err := e.chats.Messages(ctx, chatID)
	require.NoError(t, err)
	var got *chatstore.Message
	for _, m := range msgs {
		if m.ID == lost.ID {
			got = m
		}
	}
	require.NotNil(t, got)
	require.Equal(t, chatstore.StatusFailed, got.Status)
	require.Contains(t, got.Error, "before the run started")
}
