package chat_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// scriptedHolders is the memory chat queue as a runcontrol.Lingering
// whose Holder answers from a script, call by call (the last answer
// after it ends), keeping which call each Leave followed.
type scriptedHolders struct {
	*runcontrol.MemoryChatQueue
	mu     sync.Mutex
	script []string
	calls  int
	leaves []string // "<calls so far>:<run>"
}

func (q *scriptedHolders) Holder(context.Context, string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := q.script[min(q.calls, len(q.script)-1)]
	q.calls++
	return h, nil
}

func (q *scriptedHolders) Leave(_ context.Context, _, runID string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.leaves = append(q.leaves, fmt.Sprintf("%d:%s", q.calls, runID))
	return nil
}

func (q *scriptedHolders) state() (calls int, leaves []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls, slices.Clone(q.leaves)
}

// Recovery frees a chat's turn whose holder has ended and is bound in
// no process only once two passes in a row have seen the same holder so,
// while a run here waits behind it: a live holder (the run streaming
// ahead) is never freed, a holder seen once is not, nor one that changed
// between two passes.
func TestEndedHolderIsFreedAtTheSecondPassThatSeesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs, chats := openSQLite(t)
	queue := &scriptedHolders{}
	f := newFixture(t, runs, chats, runtime.Config{}, func(c *chat.Config) {
		queue.MemoryChatQueue = runcontrol.NewMemoryChatQueue(c.Control)
		c.Queue = queue
	})
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six seven eight nine ten " +
		"eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"})
	// The passes see: the live run ahead twice, a gone run, another gone
	// run twice (freed at the second), then no holder.
	queue.script = []string{first.RunID, first.RunID, "r_gone1", "r_gone2", "r_gone2", ""}
	f.streamed(first.RunID)
	f.svc.Start(ctx)
	second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "later", Strategy: runcontrol.Enqueue})

	require.Eventually(t, func() bool { calls, _ := queue.state(); return calls >= len(queue.script)+1 },
		10*time.Second, 5*time.Millisecond, "the passes look at the chat its run waits in")
	_, leaves := queue.state()
	require.Equal(t, []string{"5:r_gone2"}, leaves, "freed once, at the second pass in a row that saw it")
	m := f.settled(chatID, second.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
}
