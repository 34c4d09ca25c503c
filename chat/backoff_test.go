package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// refusingRuns is a run store that refuses, while refuse is set, every
// group write carrying a node_delta whose text holds "POISON": a run's
// data the database cannot take. refused counts the refusals.
type refusingRuns struct {
	durableRuns
	refuse  *atomic.Bool
	refused *atomic.Int64
}

func (s refusingRuns) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	if s.refuse.Load() {
		for _, b := range batches {
			for _, ev := range b.Events {
				if raw, _ := json.Marshal(ev.Data); ev.Type == runtime.EventType("node_delta") && strings.Contains(string(raw), "POISON") {
					s.refused.Add(1)
					return errors.New("refused: the database cannot hold this")
				}
			}
		}
	}
	return s.durableRuns.WriteBatches(ctx, batches)
}

// A run whose writes the store keeps refusing is not executed again at
// every recovery pass: recovery leaves it for twice as long after each
// refusal (from RecoveryInterval, 50 ms here), so 1.6 s hold six tries at
// most (without the backoff: sixteen, a try at every pass); once the
// store takes its writes, the next try ends it, and its message is
// finished by the run that the store took, not before.
func TestRefusedRunRecoveryBacksOff(t *testing.T) {
	t.Parallel()
	runs, chats := openSQLite(t)
	var refuse atomic.Bool
	var refused atomic.Int64
	refuse.Store(true)
	f := newFixtureDeps(t, refusingRuns{durableRuns: runs, refuse: &refuse, refused: &refused}, chats,
		runtime.Config{Owner: "a", LeaseTTL: 300 * time.Millisecond}, spyDeps(t, runs, &spyModel{}))
	chatID := f.saveChat(slowSpyGraph)
	f.svc.Start(context.Background())
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two POISON"})
	require.Eventually(t, func() bool { return refused.Load() >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the run is tried again after its first refusal")
	time.Sleep(1600 * time.Millisecond)
	tries := refused.Load()
	require.LessOrEqual(t, tries, int64(8), "tries in 1.6 s with the backoff")

	refuse.Store(false)
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
	require.Equal(t, "echo: one two POISON", m.Content)
	rec, err := runs.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, rec.Status)
}
