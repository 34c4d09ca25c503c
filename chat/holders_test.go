package chat_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// lingeringQueue is the memory chat queue as a runcontrol.Lingering (a
// queue whose places outlive their process; runcontrol/redis's tests show
// what Leave frees there): its Holder answers from script, call by call
// (the last answer after it ends; none without a script), and it keeps
// each Leave with how many Holder calls came before it.
type lingeringQueue struct {
	*runcontrol.MemoryChatQueue
	mu     sync.Mutex
	script []string
	calls  int
	leaves []leave
}

type leave struct {
	calls     int
	chat, run string
}

// newLingeringQueue returns the queue and the fixture option that sets it.
func newLingeringQueue() (*lingeringQueue, func(*chat.Config)) {
	q := &lingeringQueue{}
	return q, func(c *chat.Config) {
		q.MemoryChatQueue = runcontrol.NewMemoryChatQueue(c.Control)
		c.Queue = q
	}
}

func (q *lingeringQueue) Holder(context.Context, string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls++
	if len(q.script) == 0 {
		return "", nil
	}
	return q.script[min(q.calls-1, len(q.script)-1)], nil
}

func (q *lingeringQueue) Leave(_ context.Context, chatID, runID string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.leaves = append(q.leaves, leave{q.calls, chatID, runID})
	return nil
}

func (q *lingeringQueue) state() []leave {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.leaves)
}

func (q *lingeringQueue) holderCalls() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls
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
	queue, withQueue := newLingeringQueue()
	f := newFixture(t, runs, chats, runtime.Config{}, withQueue)
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six seven eight nine ten " +
		"eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"})
	// The passes see: the live run ahead twice, a gone run, another gone
	// run twice (freed at the second), then no holder.
	queue.script = []string{first.RunID, first.RunID, "r_gone1", "r_gone2", "r_gone2", ""}
	f.streamed(first.RunID)
	f.svc.Start(ctx)
	second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "later", Strategy: runcontrol.Enqueue})

	require.Eventually(t, func() bool { return queue.holderCalls() >= len(queue.script)+1 },
		10*time.Second, 5*time.Millisecond, "the passes look at the chat its run waits in")
	require.Equal(t, []leave{{5, chatID, "r_gone2"}}, queue.state(), "freed once, at the second pass in a row that saw it")
	m := f.settled(chatID, second.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
}
