package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatmemory "chatgraph/chat/store/memory"
	"chatgraph/runcontrol"
	"chatgraph/runcontrol/controltest"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// dyingStarts is dyingRuns that also creates no run once dead: the dead
// process's queued turn, which it still starts unseen once the run ahead
// of it ends there, leaves its reservation as it was.
type dyingStarts struct{ dyingRuns }

var errDead = errors.New("the process is dead")

func (s dyingStarts) CreateRun(ctx context.Context, r *runtime.RunRecord) error {
	if s.dead.Load() {
		return errDead
	}
	return s.dyingRuns.CreateRun(ctx, r)
}

func (s dyingStarts) CreateClaimed(ctx context.Context, r *runtime.RunRecord, owner string, ttl time.Duration) (runtime.Lease, error) {
	if s.dead.Load() {
		return runtime.Lease{}, errDead
	}
	return s.dyingRuns.CreateClaimed(ctx, r, owner, ttl)
}

// dyingProcess is a service (owner "a", lease 300 ms) on runs and chats
// whose writes stop, and whose run creations fail, once die is called:
// a process killed with everything it had not written.
func dyingProcess(t *testing.T, runs durableRuns, chats chat.Store) (a *fixture, die func()) {
	t.Helper()
	dead := &atomic.Bool{}
	a = newFixture(t, dyingStarts{dyingRuns{durableRuns: runs, dead: dead}}, deadChats{Store: chats, dead: dead},
		runtime.Config{Owner: "a", LeaseTTL: 300 * time.Millisecond})
	return a, func() { dead.Store(true) }
}

// streamed waits until run runID of f has streamed a delta.
func (f *fixture) streamed(runID string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return len(deltasOf(f.pub.of(runID))) > 0 }, 10*time.Second, 2*time.Millisecond)
}

// Turns queued behind a streaming run (enqueue) when their process died
// are started by the next process, as the runs they reserved, each once
// the run ahead of it — the first recovered — has ended: every message is
// answered, once, in the order they were sent. (Before, the queued turns
// were failed lost.)
func TestQueuedTurnOfADeadProcessRuns(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			runs, chats := b.open(t)
			a, die := dyingProcess(t, runs, chats)
			_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
			first := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six seven eight"})
			a.streamed(first.RunID)
			second := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "nine ten", Strategy: runcontrol.Enqueue,
				ClientTools: []chat.ClientTool{{Name: "pick_color", Description: "asks the user"}}})
			third := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "eleven twelve"})
			rec, err := runs.GetRun(ctx, second.RunID)
			require.NoError(t, err)
			require.Equal(t, runtime.RunPending, rec.Status, "queued: reserved")
			die()

			bf := newFixture(t, runs, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second})
			bf.svc.Start(ctx)
			m1 := bf.settled(chatID, first.MessageID)
			require.Equal(t, chat.StatusCompleted, m1.Status, m1.Error)
			require.Equal(t, "echo: one two three four five six seven eight", m1.Content)
			m2 := bf.settled(chatID, second.MessageID)
			require.Equal(t, chat.StatusCompleted, m2.Status, m2.Error)
			require.Equal(t, "echo: nine ten", m2.Content)
			require.Equal(t, second.RunID, m2.RunID, "the reserved run answers")

			m3 := bf.settled(chatID, third.MessageID)
			require.Equal(t, chat.StatusCompleted, m3.Status, m3.Error)
			require.Equal(t, "echo: eleven twelve", m3.Content)

			var ended time.Time // the end of the run before
			for i, tk := range []*chat.Ticket{first, second, third} {
				log, err := runs.Events(ctx, tk.RunID, 0, 0)
				require.NoError(t, err)
				require.Equal(t, runtime.EventRunCompleted, log[len(log)-1].Type)
				for j, ev := range log {
					require.EqualValues(t, j+1, ev.Seq, "run %d: one gap-free log", i)
					require.False(t, j > 0 && ev.Type == runtime.EventRunStarted, "run %d: one start", i)
				}
				if i > 0 {
					require.Equal(t, runtime.EventRunStarted, log[0].Type)
					require.False(t, log[0].Time.Before(ended),
						"queued turn %d starts after the run ahead of it ended: %v < %v", i, log[0].Time, ended)
				}
				ended = log[len(log)-1].Time
			}
			rec, err = runs.GetRun(ctx, second.RunID)
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, rec.Status)
			require.Equal(t, []any{map[string]any{"name": "pick_color", "description": "asks the user"}},
				rec.Input.(map[string]any)["clientTools"], "the client's tools kept through the crash")

			msgs, err := chats.Messages(ctx, chatID)
			require.NoError(t, err)
			var answers []string
			for _, m := range msgs {
				if m.Role == chat.RoleAssistant {
					answers = append(answers, m.ID)
				}
			}
			require.Equal(t, []string{first.MessageID, second.MessageID, third.MessageID}, answers, "each message answered once")
		})
	}
}

// A reservation recovery cannot start again — one an older build wrote,
// without what its turn needs, or a continue whose run is gone — is
// failed with code lost, as before, and leaves its chat's line (a place
// the dead process's queue kept for it would hold up the turns behind).
func TestUnrebuildableReservationIsLost(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			runs, chats := b.open(t)
			queue, withQueue := newLingeringQueue()
			f := newFixture(t, runs, chats, runtime.Config{}, withQueue)
			_, chatID := f.chatOn(`{"name":"Helper"}`)
			oldRun, goneRun := chat.NewID("r_"), chat.NewID("r_")
			old := reserveTurn(t, chats, chatID, oldRun, chat.KindStreamChat, "", nil)
			gone := reserveTurn(t, chats, chatID, goneRun, chat.KindContinueMessage, "r_gone", map[string]any{"queued": 1, "resume": "yes"})
			f.svc.Start(ctx)
			lefts := func() []string {
				var out []string
				for _, l := range queue.state() {
					out = append(out, l.chat+"/"+l.run)
				}
				return out
			}
			require.Eventually(t, func() bool { return len(lefts()) == 2 }, 5*time.Second, 5*time.Millisecond)
			require.ElementsMatch(t, []string{chatID + "/" + oldRun, chatID + "/" + goneRun}, lefts(), "each lost run left its chat's line")
			for _, id := range []string{old, gone} {
				m := f.settled(chatID, id)
				require.Equal(t, chat.StatusFailed, m.Status)
				require.Contains(t, m.Error, "lost: the server stopped before the run started")
				rec, err := runs.GetRun(ctx, m.RunID)
				require.NoError(t, err)
				require.Equal(t, runtime.RunFailed, rec.Status)
				log, err := runs.Events(ctx, m.RunID, 0, 0)
				require.NoError(t, err)
				require.Len(t, log, 2)
				require.Equal(t, runtime.EventRunFailed, log[1].Type)
				require.Contains(t, string(log[1].Data.(json.RawMessage)), `"code":"lost"`)
			}
		})
	}
}

// reserveTurn writes what a process writes when it accepts a turn and
// before it starts its run — the user's message, the pending answer and
// the pending run (kind, parent and input given) — as a process that
// died there left it, and returns the answer's id.
func reserveTurn(t *testing.T, chats chat.Store, chatID, runID string, kind chat.Kind, parent string, input any) string {
	t.Helper()
	now := time.Now().UTC()
	user := &chat.Message{ID: chat.NewID("m_"), ChatID: chatID, Role: chat.RoleUser, Content: "hi", RunID: runID,
		TurnRunID: runID, Status: chat.StatusCompleted, CreatedAt: now}
	asst := &chat.Message{ID: chat.NewID("m_"), ChatID: chatID, ParentID: user.ID, Role: chat.RoleAssistant, RunID: runID,
		TurnRunID: runID, Status: chat.StatusPending, CreatedAt: now}
	require.NoError(t, chats.BeginTurn(context.Background(), chat.Turn{ChatID: chatID, Messages: []*chat.Message{user, asst},
		Run: &runtime.RunRecord{ID: runID, RootID: runID, ParentID: parent, ChatID: chatID, Kind: string(kind),
			Status: runtime.RunPending, Input: input, Attrs: map[string]any{"messageId": asst.ID, "userMessageId": user.ID},
			CreatedAt: now, UpdatedAt: now}}))
	return asst.ID
}

// While run control cannot say whether a reservation's process lives,
// recovery leaves the reservation alone: failing it lost then would end
// the turn of a process that may be about to start it. Once run control
// answers that no process has it, the next pass fails it lost (so the
// reservation is one that recovery does fail).
func TestReservationIsNotLostWhileRunControlIsUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs := memory.New()
	chats := chatmemory.New(runs)
	ctl := &controltest.Unreachable{Controller: runcontrol.NewMemory(runcontrol.MemoryConfig{})}
	ctl.Down.Store(true)
	f := newFixture(t, runs, chats, runtime.Config{}, func(c *chat.Config) { c.Control = ctl })
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	runID := chat.NewID("r_")
	answer := reserveTurn(t, chats, chatID, runID, chat.KindStreamChat, "", nil)
	f.svc.Start(ctx)

	// Recovery runs every 50 ms: five questions are several passes.
	require.Eventually(t, func() bool {
		m, err := chats.GetMessage(ctx, chatID, answer)
		require.NoError(t, err)
		return ctl.Asked.Load() >= 5 || m.Status.Settled()
	}, 10*time.Second, 5*time.Millisecond)
	m, err := chats.GetMessage(ctx, chatID, answer)
	require.NoError(t, err)
	require.Equal(t, chat.StatusPending, m.Status, "the answer is kept while run control is unreachable")
	rec, err := runs.GetRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunPending, rec.Status)
	bound, err := f.svc.Bound(ctx, runID)
	require.ErrorIs(t, err, chat.ErrControlUnavailable)
	require.False(t, bound)

	ctl.Down.Store(false)
	m = f.settled(chatID, answer)
	require.Equal(t, chat.StatusFailed, m.Status)
	require.Contains(t, m.Error, "lost: the server stopped before the run started")
}

// Two processes sharing run control (as Redis shares it) recover a dead
// process's chat at once: the queued turn is started by one of them only —
// its run's events reach one publisher — and answered once.
func TestQueuedTurnIsStartedByOneProcess(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			runs, chats := b.open(t)
			a, die := dyingProcess(t, runs, chats)
			_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":20}`)
			first := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four"})
			a.streamed(first.RunID)
			second := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "five six"})
			die()

			ctl := runcontrol.NewMemory(runcontrol.MemoryConfig{})
			shared := func(c *chat.Config) { c.Control, c.Queue = ctl, runcontrol.NewMemoryChatQueue(ctl) }
			p := newFixture(t, runs, chats, runtime.Config{Owner: "p", LeaseTTL: time.Second}, shared)
			q := newFixture(t, runs, chats, runtime.Config{Owner: "q", LeaseTTL: time.Second}, shared)
			go p.svc.Start(ctx)
			q.svc.Start(ctx)
			for _, tk := range []*chat.Ticket{first, second} {
				m := p.settled(chatID, tk.MessageID)
				require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
				require.Equal(t, tk.RunID, m.RunID)
				log, err := runs.Events(ctx, tk.RunID, 0, 0)
				require.NoError(t, err)
				starts := 0
				for _, ev := range log {
					if ev.Type == runtime.EventRunStarted {
						starts++
					}
				}
				require.Equal(t, 1, starts)
				require.Equal(t, runtime.EventRunCompleted, log[len(log)-1].Type)
			}
			require.True(t, len(p.pub.of(second.RunID)) == 0 || len(q.pub.of(second.RunID)) == 0,
				"one process ran the queued turn (p: %d events, q: %d)", len(p.pub.of(second.RunID)), len(q.pub.of(second.RunID)))
			require.NotEmpty(t, append(p.pub.of(second.RunID), q.pub.of(second.RunID)...))
		})
	}
}

// deadWithQueued is a process on new memory stores that streams turns[0]
// in a new chat, queues turns[1:] behind it (enqueue), and dies: the
// chat and the turns' tickets, in order, as the crash left them.
func deadWithQueued(t *testing.T, turns ...string) (runs *memory.Store, chats *chatmemory.Store, chatID string, tks []*chat.Ticket) {
	t.Helper()
	runs = memory.New()
	chats = chatmemory.New(runs)
	a, die := dyingProcess(t, runs, chats)
	_, chatID = a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	for i, content := range turns {
		tks = append(tks, a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: content}))
		if i == 0 {
			a.streamed(tks[0].RunID)
		}
	}
	die()
	return runs, chats, chatID, tks
}

// A cancel of a queued turn whose process died before its run began
// (its run pending, bound nowhere) is kept for it: recovery starts the
// turn cancelled, and the turn behind it still runs.
func TestCancelOfAQueuedTurnOfADeadProcessWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, chats, chatID, tks := deadWithQueued(t, "one two three four", "five six", "seven eight")
	first, second, third := tks[0], tks[1], tks[2]

	b := newFixture(t, mem, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second})
	res, err := b.svc.Cancel(ctx, chat.CancelRequest{RunID: second.RunID})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status, "kept for the turn's relaunch")
	b.svc.Start(ctx)
	require.Equal(t, chat.StatusCompleted, b.settled(chatID, first.MessageID).Status)
	m2 := b.settled(chatID, second.MessageID)
	require.Equal(t, chat.StatusCancelled, m2.Status, m2.Error)
	rec, err := mem.GetRun(ctx, second.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	m3 := b.settled(chatID, third.MessageID)
	require.Equal(t, chat.StatusCompleted, m3.Status, m3.Error)
	require.Equal(t, "echo: seven eight", m3.Content)
}

// A message sent to a chat while recovery starts the queued turns of its
// dead process again is answered after them, in the order the messages
// came: each queued turn is placed in the chat's line at once, not once
// the one before it holds the turn, and the new message waits for that.
// (Before, it overtook every queued turn but the first.)
func TestMessageSentDuringRelaunchQueuesBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs, chats, chatID, tks := deadWithQueued(t, "one two three four five six", "seven eight", "nine ten")
	first, second, third := tks[0], tks[1], tks[2]

	// The same process restarted (its owner): recovery takes the first
	// run back at once, then starts the queued turns.
	b := newFixture(t, runs, chats, runtime.Config{Owner: "a", LeaseTTL: time.Second})
	b.svc.Start(ctx)
	fourth := b.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "eleven"})
	var ended time.Time
	for i, tk := range []*chat.Ticket{first, second, third, fourth} {
		m := b.settled(chatID, tk.MessageID)
		require.Equal(t, chat.StatusCompleted, m.Status, "turn %d: %s", i, m.Error)
		log, err := runs.Events(ctx, tk.RunID, 0, 0)
		require.NoError(t, err)
		if i > 0 {
			require.Equal(t, runtime.EventRunStarted, log[0].Type)
			require.False(t, log[0].Time.Before(ended), "turn %d starts after turn %d ended", i, i-1)
		}
		ended = log[len(log)-1].Time
	}
}

// dieAtTurn is deadChats whose n-th BeginTurn kills the process once its
// write is done: the turn is reserved, and nothing after it is written.
type dieAtTurn struct {
	deadChats
	n     int
	calls atomic.Int32
}

func (s *dieAtTurn) BeginTurn(ctx context.Context, t chat.Turn) error {
	err := s.deadChats.BeginTurn(ctx, t)
	if int(s.calls.Add(1)) == s.n {
		s.dead.Store(true)
	}
	return err
}

// A message sent with interrupt or rollback, queued when its process
// died (the run it supersedes not yet stopped), supersedes that run once
// both are taken back: recovery starts it with the strategy it was sent
// with, and the run ahead of it, recovered, is cancelled as superseded —
// with rollback, its turn deleted too. (Before, it was started as
// enqueue: the superseded run ran to its end first, and stayed.)
func TestInterruptQueuedWhenItsProcessDiedInterrupts(t *testing.T) {
	t.Parallel()
	for _, strategy := range []runcontrol.Strategy{runcontrol.Interrupt, runcontrol.Rollback} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			runs := memory.New()
			chats := chatmemory.New(runs)
			dead := &atomic.Bool{}
			gate := &dieAtTurn{deadChats: deadChats{Store: chats, dead: dead}, n: 2}
			a := newFixture(t, dyingStarts{dyingRuns{durableRuns: runs, dead: dead}}, gate,
				runtime.Config{Owner: "a", LeaseTTL: 300 * time.Millisecond})
			_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
			first := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID,
				Content: "one two three four five six seven eight nine ten eleven twelve"})
			a.streamed(first.RunID)
			second := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "stop that", Strategy: strategy})
			require.True(t, dead.Load(), "the process died once the second turn was reserved")
			for id, want := range map[string]runtime.RunStatus{first.RunID: runtime.RunRunning, second.RunID: runtime.RunPending} {
				rec, err := runs.GetRun(ctx, id)
				require.NoError(t, err)
				require.Equal(t, want, rec.Status, "run %s as the crash left it", id)
			}

			b := newFixture(t, runs, chats, runtime.Config{Owner: "a", LeaseTTL: time.Second})
			b.svc.Start(ctx)
			m2 := b.settled(chatID, second.MessageID)
			require.Equal(t, chat.StatusCompleted, m2.Status, m2.Error)
			require.Equal(t, "echo: stop that", m2.Content)
			require.Equal(t, second.RunID, m2.RunID)
			if strategy == runcontrol.Interrupt {
				m1 := b.settled(chatID, first.MessageID)
				require.Equal(t, chat.StatusCancelled, m1.Status, "interrupted")
				require.Equal(t, "superseded", m1.Error)
				return
			}
			// Rolled back: the first turn's messages and run are gone.
			_, err := chats.GetMessage(ctx, chatID, first.MessageID)
			require.ErrorIs(t, err, chat.ErrNotFound, "the rolled-back answer is deleted")
			_, err = runs.GetRun(ctx, first.RunID)
			require.ErrorIs(t, err, runtime.ErrRunNotFound, "the rolled-back run is deleted")
			msgs, err := chats.Messages(ctx, chatID)
			require.NoError(t, err)
			require.Len(t, msgs, 2, "only the second turn remains")
		})
	}
}

// slowPlacing is a chat queue whose runs take their place in a chat's
// line only after a delay, as across processes (a Redis round trip, a
// loaded server).
type slowPlacing struct{ runcontrol.ChatQueue }

func (q slowPlacing) Acquire(ctx context.Context, chatID, runID string, s runcontrol.Strategy) (*runcontrol.Turn, error) {
	if s != runcontrol.Reject {
		time.Sleep(100 * time.Millisecond)
	}
	return q.ChatQueue.Acquire(ctx, chatID, runID, s)
}

// A message that waits for its chat's turn is answered once it has its
// place in the chat's line, not before: a message sent after the answer,
// through any process sharing the queue, queues behind it — and so does
// one sent while its process is dead, since recovery starts the turn
// again in that place. (Before, the place was taken after the answer,
// and a process killed in between left the next message ahead of it.)
func TestQueuedMessageIsAnsweredOncePlaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs := memory.New()
	var q runcontrol.ChatQueue
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) {
		q = runcontrol.NewMemoryChatQueue(c.Control)
		c.Queue = slowPlacing{q}
	})
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six"})
	f.streamed(first.RunID)
	second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "seven", Strategy: runcontrol.Enqueue})
	_, err := q.Acquire(ctx, chatID, "probe", runcontrol.Reject)
	var busy *runcontrol.BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, []string{first.RunID, second.RunID}, busy.RunIDs, "the answered message is in the line")
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, second.MessageID).Status)
}
