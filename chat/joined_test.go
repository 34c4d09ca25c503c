package chat_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// joinCounter is a chat store on SQLite (a chat.Joiner) that counts its
// turn writes: the ones made as transactions of their own (BeginTurn,
// FinishMessage) and the ones handed to a run's commits (TurnWrite,
// FinishWrite). beforeTurnWrite, when set, runs before a TurnWrite is made.
type joinCounter struct {
	*chatsqlite.Store
	mu              sync.Mutex
	n               map[string]int
	beforeTurnWrite func(chat.Turn)
	// dropFinish, when set, makes FinishMessage write nothing: its
	// process died before the write.
	dropFinish atomic.Bool
}

func (s *joinCounter) add(op string) {
	s.mu.Lock()
	s.n[op]++
	s.mu.Unlock()
}

func (s *joinCounter) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[op]
}

func (s *joinCounter) BeginTurn(ctx context.Context, t chat.Turn) error {
	s.add("begin_turn")
	return s.Store.BeginTurn(ctx, t)
}

func (s *joinCounter) FinishMessage(ctx context.Context, m *chat.Message) error {
	s.add("finish_message")
	if s.dropFinish.Load() {
		return nil
	}
	return s.Store.FinishMessage(ctx, m)
}

func (s *joinCounter) TurnWrite(t chat.Turn) any {
	s.add("turn_write")
	if s.beforeTurnWrite != nil {
		s.beforeTurnWrite(t)
	}
	return s.Store.TurnWrite(t)
}

func (s *joinCounter) FinishWrite(m *chat.Message) any {
	s.add("finish_write")
	return s.Store.FinishWrite(m)
}

// sqliteJoined is a fixture on one SQLite file whose engine reports its
// store calls to ops.
func sqliteJoined(t *testing.T, opts ...func(*chat.Config)) (*fixture, *joinCounter, *rsqlite.Store, func(string) int) {
	t.Helper()
	runs, err := rsqlite.Open(context.Background(), rsqlite.Config{Path: filepath.Join(t.TempDir(), "chatgraph.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = runs.Close() })
	cs, err := chatsqlite.Open(context.Background(), runs)
	require.NoError(t, err)
	chats := &joinCounter{Store: cs, n: map[string]int{}}
	var mu sync.Mutex
	ops := map[string]int{}
	f := newFixture(t, runs, chats, runtime.Config{StoreObserver: func(op string, _ time.Duration, _ error) {
		mu.Lock()
		ops[op]++
		mu.Unlock()
	}}, opts...)
	return f, chats, runs, func(op string) int {
		mu.Lock()
		defer mu.Unlock()
		return ops[op]
	}
}

// A turn that starts at once writes its messages in its run's first
// commit and its answer in the commit of the run's end: the chat store
// makes no transaction of its own. A turn queued behind it writes its
// messages at once (with its run's reservation) and is marked running in
// its run's first commit.
func TestTurnWritesJoinTheRunsCommits(t *testing.T) {
	t.Parallel()
	f, chats, _, ops := sqliteJoined(t)
	ctx := context.Background()
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three"})
	// Send returned: the first commit (messages, run, run_started) is done.
	m, err := chats.GetMessage(ctx, chatID, first.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusRunning, m.Status)
	rec, err := f.runs.GetRun(ctx, first.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunRunning, rec.Status)
	evs, err := f.runs.Events(ctx, first.RunID, 0, 1)
	require.NoError(t, err)
	require.Equal(t, runtime.EventRunStarted, evs[0].Type)
	require.Equal(t, 1, chats.count("turn_write"))
	require.Zero(t, chats.count("begin_turn"))

	second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "again", Strategy: runcontrol.Enqueue})
	m, err = chats.GetMessage(ctx, chatID, second.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusPending, m.Status, "queued behind the first turn")
	require.Equal(t, 1, chats.count("begin_turn"), "a queued turn writes its messages at once")

	done := f.settled(chatID, first.MessageID)
	require.Equal(t, chat.StatusCompleted, done.Status)
	require.Equal(t, "echo: one two three", done.Content)
	later := f.settled(chatID, second.MessageID)
	require.Equal(t, chat.StatusCompleted, later.Status)
	require.Equal(t, "echo: again", later.Content)
	for _, tk := range []*chat.Ticket{first, second} {
		rec, err := f.runs.GetRun(ctx, tk.RunID)
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, rec.Status)
		require.Equal(t, tk.MessageID, rec.Attrs["messageId"])
	}
	require.Zero(t, chats.count("finish_message"), "no answer written in a transaction of its own")
	require.Equal(t, 3, chats.count("finish_write"), "the queued answer marked running, then both final answers")
	require.Zero(t, ops("create_claimed"), "runs are created in their first group commit")
	require.Positive(t, ops("write_batches"))
}

// A continue claims its message in its run's first commit.
func TestContinueJoinsItsClaim(t *testing.T) {
	t.Parallel()
	f, chats, _, _ := sqliteJoined(t)
	ctx := context.Background()
	f.approvalChat()
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: "c_approve", Content: "please"})
	require.Equal(t, chat.StatusInterrupted, f.settled("c_approve", tk.MessageID).Status)
	// The interrupted run's end is committed before it lets go of the
	// chat: wait for that, so the continue holds the chat at once.
	require.Eventually(t, func() bool {
		bound, err := f.svc.Bound(ctx, tk.RunID)
		require.NoError(t, err)
		return !bound
	}, 10*time.Second, time.Millisecond)

	next := f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: "c_approve", MessageID: tk.MessageID,
		Resume: map[string]any{"approved": true}})
	done := f.settled("c_approve", tk.MessageID)
	require.Equal(t, chat.StatusCompleted, done.Status)
	require.Equal(t, next.RunID, done.RunID)
	require.Equal(t, 2, chats.count("turn_write"))
	require.Zero(t, chats.count("begin_turn"))
	require.Zero(t, chats.count("finish_message"))

	// The interrupted run was continued: a second continue from it loses,
	// and its refused claim leaves no run behind.
	_, err := f.svc.Send(ctx, chat.Request{Kind: chat.KindContinueMessage, ChatID: "c_approve", MessageID: tk.MessageID,
		Resume: map[string]any{"approved": true}})
	requireCode(t, err, chat.CodeConflict)
	recs, err := f.runs.(runtime.Inspector).ListRuns(ctx, runtime.RunFilter{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
}

// A turn whose writes are refused in its run's first commit (here: its
// chat was deleted after the turn was prepared) leaves nothing: no
// messages, no run record, no event; Send returns the refusal.
func TestRefusedTurnLeavesNothing(t *testing.T) {
	t.Parallel()
	f, chats, _, _ := sqliteJoined(t)
	ctx := context.Background()
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	chats.beforeTurnWrite = func(t chat.Turn) {
		// The chat goes between the turn's checks and its commit.
		_ = chats.DeleteChat(ctx, t.ChatID)
	}
	_, err := f.svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "gone"})
	require.ErrorIs(t, err, chat.ErrNotFound)
	recs, err := f.runs.(runtime.Inspector).ListRuns(ctx, runtime.RunFilter{})
	require.NoError(t, err)
	require.Empty(t, recs, "no run record")
	unsettled, err := chats.Unsettled(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, unsettled, "no message")
	require.Eventually(t, func() bool {
		f.pub.mu.Lock()
		defer f.pub.mu.Unlock()
		return len(f.pub.closed) == 1
	}, 5*time.Second, time.Millisecond, "the run opened to the publisher is closed")
	f.pub.mu.Lock()
	defer f.pub.mu.Unlock()
	for id := range f.pub.closed {
		require.Empty(t, f.pub.events[id], "no event published")
		require.Nil(t, f.svc.Live(id), "the run is no longer live")
	}
}

// A cancel that came first still lets the turn and run_started be
// written, then stops the run before any node starts.
func TestCancelFirstWithJoinedTurn(t *testing.T) {
	t.Parallel()
	f, _, _, _ := sqliteJoined(t)
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":50}`)
	_, err := f.svc.Cancel(context.Background(), chat.CancelRequest{ChatID: chatID, ClientRequestID: "req-1"})
	require.NoError(t, err)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "never answered", ClientRequestID: "req-1"})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCancelled, m.Status)
	rec, err := f.runs.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	for _, ev := range f.pub.of(tk.RunID) {
		require.NotEqual(t, runtime.EventNodeStarted, ev.Type, "no node starts after a cancel that came first")
	}
}

// heldRelease is a run controller whose runs keep their binding,
// once they have ended, until hold is closed.
type heldRelease struct {
	runcontrol.Controller
	hold chan struct{}
}

func (c heldRelease) Bind(parent context.Context, runID string, scopes ...runcontrol.Scope) (context.Context, func(), error) {
	ctx, release, err := c.Controller.Bind(parent, runID, scopes...)
	return ctx, func() { <-c.hold; release() }, err
}

// endingInterrupted starts a turn of the approval chat c_approve and
// returns once its run has ended waiting for a human, still holding its
// binding (heldRelease, released when the test ends).
func endingInterrupted(t *testing.T) (*fixture, *rsqlite.Store, *chat.Ticket) {
	t.Helper()
	ctl := heldRelease{runcontrol.NewMemory(runcontrol.MemoryConfig{}), make(chan struct{})}
	f, _, runs, _ := sqliteJoined(t, func(c *chat.Config) { c.Control = ctl })
	t.Cleanup(func() { close(ctl.hold) }) // before the fixture's shutdown
	f.approvalChat()
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: "c_approve", Content: "please"})
	require.Equal(t, chat.StatusInterrupted, f.settled("c_approve", tk.MessageID).Status)
	bound, err := f.svc.Bound(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.True(t, bound, "the ended run still holds its binding")
	return f, runs, tk
}

// requireCancelled checks that the turn of tk ended cancelled: its
// answer and its run.
func requireCancelled(t *testing.T, f *fixture, runs *rsqlite.Store, tk *chat.Ticket) {
	t.Helper()
	m, err := f.chats.GetMessage(context.Background(), "c_approve", tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusCancelled, m.Status)
	rec, err := runs.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
}

// A run that ended waiting for a human commits its end before it lets
// go of its binding: a cancel of the run in between (it finds the run
// bound) still ends the wait, as a cancel of its chat does.
func TestCancelReachesARunEndingInterrupted(t *testing.T) {
	t.Parallel()
	f, runs, tk := endingInterrupted(t)
	ctx := context.Background()
	res, err := f.svc.Cancel(ctx, chat.CancelRequest{RunID: tk.RunID})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusCancelled, res.Status)
	requireCancelled(t, f, runs, tk)
}

// A cancel of the chat in that moment finds the run both bound and
// waiting: it ends both, and names the run once.
func TestCancelChatNamesARunEndingInterruptedOnce(t *testing.T) {
	t.Parallel()
	f, runs, tk := endingInterrupted(t)
	ctx := context.Background()
	res, err := f.svc.Cancel(ctx, chat.CancelRequest{ChatID: "c_approve"})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusCancelled, res.Status)
	require.Equal(t, []string{tk.RunID}, res.RunIDs)
	requireCancelled(t, f, runs, tk)
}

// A turn that holds its chat's turn joins its messages to its run's
// first commit, after it built its input from the parent it read: when
// a rollback (here: of another process) deleted that parent meanwhile,
// the turn is written under what remains, and its history is that
// branch — it does not fail for a branch it cannot find.
func TestJoinedTurnUnderADeletedParent(t *testing.T) {
	t.Parallel()
	f, chats, _, _ := sqliteJoined(t)
	ctx := context.Background()
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	// Each turn starts once the one before let go of the chat's turn
	// (closed: after its release), so each holds it at once and joins.
	base := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "base"})
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, base.MessageID).Status)
	<-waitClosed(t, f, base.RunID)
	victim := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "undone"})
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, victim.MessageID).Status)
	<-waitClosed(t, f, victim.RunID)

	chats.beforeTurnWrite = func(t chat.Turn) {
		// The turn read the victim's answer as its parent (the active leaf).
		_ = chats.DeleteMessages(ctx, t.ChatID, []string{victim.UserMessageID, victim.MessageID}, "")
	}
	next := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "after"})
	done := f.settled(chatID, next.MessageID)
	require.Equal(t, chat.StatusCompleted, done.Status, done.Error)
	require.Equal(t, 3, chats.count("turn_write"), "every turn joined its run's first commit")
	u, err := chats.GetMessage(ctx, chatID, next.UserMessageID)
	require.NoError(t, err)
	require.Equal(t, base.MessageID, u.ParentID, "written under what remains")
	rec, err := f.runs.GetRun(ctx, next.RunID)
	require.NoError(t, err)
	in, err := json.Marshal(rec.Input)
	require.NoError(t, err)
	require.Contains(t, string(in), base.MessageID, "the history is the branch that remains")
	require.NotContains(t, string(in), victim.MessageID)
}
