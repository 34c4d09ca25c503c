package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/transport/chatstore"
	"chatgraph/transport/chatstore/chatstoretest"
	"chatgraph/transport/chatstore/sqlite"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	chatstoretest.Run(t, func(t *testing.T) chatstore.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "chats.db")})
		require.NoError(t, err)
		return s
	})
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "chats.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	require.NoError(t, s.CreateChat(ctx, &chatstore.Chat{ID: "c1", GraphID: "g"}))
	require.NoError(t, s.AddMessages(ctx, "c1", "u1", &chatstore.Message{ID: "u1", Role: "user", Content: "hi"}))
	require.NoError(t, s.Close())
	s, err = sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	defer s.Close()
	msgs, err := s.Messages(ctx, "c1")
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, "hi", msgs[0].Content)
}
