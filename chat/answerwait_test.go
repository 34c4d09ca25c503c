package chat_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatmemory "chatgraph/chat/store/memory"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// readCounting counts GetMessage calls.
type readCounting struct {
	chat.Store
	reads atomic.Int64
}

func (s *readCounting) GetMessage(ctx context.Context, chatID, id string) (*chat.Message, error) {
	s.reads.Add(1)
	return s.Store.GetMessage(ctx, chatID, id)
}

// AwaitAnswer waits only for an answer that is still the ended run's to
// write: one that a later run answers now (a continued message) or that
// is settled is not waited for, nor is a run that has not ended.
func TestAwaitAnswerWaitsOnlyForTheRunsOwnAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs := memory.New()
	chats := &readCounting{Store: chatmemory.New(runs)}
	f := newFixture(t, runs, chats, runtime.Config{})
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	runID := chat.NewID("r_")
	answer := reserveTurn(t, chats, chatID, runID, chat.KindStreamChat, "", nil)
	rec, err := runs.GetRun(ctx, runID)
	require.NoError(t, err)

	// Not ended: nothing to wait for, nothing read.
	require.NoError(t, f.svc.AwaitAnswer(ctx, rec))
	require.Zero(t, chats.reads.Load())

	// Ended, its answer answered by a later run (still running): one read.
	rec.Status = runtime.RunInterrupted
	m, err := chats.GetMessage(ctx, chatID, answer)
	require.NoError(t, err)
	m.RunID, m.Status = chat.NewID("r_"), chat.StatusRunning
	require.NoError(t, chats.UpdateMessage(ctx, m))
	chats.reads.Store(0)
	require.NoError(t, f.svc.AwaitAnswer(ctx, rec))
	require.Equal(t, int64(1), chats.reads.Load(), "a later run's answer is not this run's to wait for")

	// Ended, its own answer settled: one read.
	m.RunID, m.Status = runID, chat.StatusInterrupted
	require.NoError(t, chats.UpdateMessage(ctx, m))
	chats.reads.Store(0)
	require.NoError(t, f.svc.AwaitAnswer(ctx, rec))
	require.Equal(t, int64(1), chats.reads.Load())
}
