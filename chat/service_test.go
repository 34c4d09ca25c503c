package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatmemory "chatgraph/chat/store/memory"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// recorder is a Publisher that keeps every event by run.
type recorder struct {
	mu     sync.Mutex
	events map[string][]runtime.Event
	closed map[string]bool
}

func newRecorder() *recorder {
	return &recorder{events: map[string][]runtime.Event{}, closed: map[string]bool{}}
}

func (r *recorder) RunOpened(*chat.LiveRun, int64) {}
func (r *recorder) RunEvent(run *chat.LiveRun, ev runtime.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[run.ID] = append(r.events[run.ID], ev)
}
func (r *recorder) RunClosed(run *chat.LiveRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed[run.ID] = true
}

func (r *recorder) of(runID string) []runtime.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Event(nil), r.events[runID]...)
}

// fixture is a chat service on memory stores and in-process run control.
type fixture struct {
	t     *testing.T
	runs  runtime.Store
	chats chat.Store
	ctl   runcontrol.Controller
	svc   *chat.Service
	pub   *recorder
}

// newFixture builds a service on runs and chats; opts adjust its config.
func newFixture(t *testing.T, runs runtime.Store, chats chat.Store, ecfg runtime.Config, opts ...func(*chat.Config)) *fixture {
	t.Helper()
	return newFixtureDeps(t, runs, chats, ecfg, nodes.Deps{}, opts...)
}

// newFixtureDeps is newFixture with the node types' dependencies given.
func newFixtureDeps(t *testing.T, runs runtime.Store, chats chat.Store, ecfg runtime.Config, deps nodes.Deps, opts ...func(*chat.Config)) *fixture {
	t.Helper()
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, deps))
	ecfg.Registry, ecfg.Store = reg, runs
	eng, err := runtime.NewEngine(ecfg)
	require.NoError(t, err)
	ctl := runcontrol.NewMemory(runcontrol.MemoryConfig{})
	pub := newRecorder()
	cfg := chat.Config{Engine: eng, Store: chats, Control: ctl, Publisher: pub, DrainTimeout: time.Second,
		RecoveryInterval: 50 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := chat.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	return &fixture{t: t, runs: runs, chats: chats, ctl: ctl, svc: svc, pub: pub}
}

func newMemFixture(t *testing.T) *fixture {
	runs := memory.New()
	return newFixture(t, runs, chatmemory.New(runs), runtime.Config{})
}

// graph saves chat_start -> agent -> chat_output (agent data given) and
// opens a chat on it.
func (f *fixture) chatOn(agentData string) (graphID, chatID string) {
	f.t.Helper()
	body := agentGraph(agentData)
	graphID, chatID = chat.NewID("g_"), chat.NewID("c_")
	ctx := context.Background()
	require.NoError(f.t, f.chats.CreateGraph(ctx, &chat.Graph{ID: graphID, Name: "test", Body: body}))
	require.NoError(f.t, f.chats.CreateChat(ctx, &chat.Chat{ID: chatID, GraphID: graphID}, 0))
	return graphID, chatID
}

// agentGraph is the body of a graph chat_start -> agent -> chat_output,
// the agent's data given.
func agentGraph(agentData string) json.RawMessage {
	body, err := json.Marshal(map[string]any{
		"nodes": []map[string]any{
			{"id": "start", "type": "chat_start", "data": map[string]any{}},
			{"id": "helper", "type": "agent", "data": json.RawMessage(agentData)},
			{"id": "out", "type": "chat_output", "data": map[string]any{}},
		},
		"edges": []map[string]any{
			{"id": "e1", "source": "start", "sourceHandle": "message", "target": "helper", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
			{"id": "e2", "source": "helper", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
		},
	})
	if err != nil {
		panic(err) // the data is the test's own JSON
	}
	return body
}

// settled waits until message id is final and returns it.
func (f *fixture) settled(chatID, id string) *chat.Message {
	f.t.Helper()
	var m *chat.Message
	require.Eventually(f.t, func() bool {
		var err error
		m, err = f.chats.GetMessage(context.Background(), chatID, id)
		require.NoError(f.t, err)
		return m.Status.Settled()
	}, 10*time.Second, 5*time.Millisecond, "message %s never settled", id)
	return m
}

// requireCode requires err to be a *chat.Error with code and returns it.
func requireCode(t *testing.T, err error, code chat.Code) *chat.Error {
	t.Helper()
	var ce *chat.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, code, ce.Code)
	return ce
}

func (f *fixture) send(req chat.Request) *chat.Ticket {
	f.t.Helper()
	tk, err := f.svc.Send(context.Background(), req)
	require.NoError(f.t, err)
	return tk
}

func TestStreamChatAnswersAndStreams(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello there"})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "echo: hello there", m.Content)
	evs := f.pub.of(tk.RunID)
	require.Equal(t, runtime.EventRunStarted, evs[0].Type)
	require.Equal(t, runtime.EventRunCompleted, evs[len(evs)-1].Type)
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq, "gap-free seq")
	}
	user, err := f.chats.GetMessage(context.Background(), chatID, tk.UserMessageID)
	require.NoError(t, err)
	require.Equal(t, chat.RoleUser, user.Role)
	require.Equal(t, user.ID, m.ParentID)
}

func TestStreamAgentChatStartsAtTheAgent(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamAgentChat, ChatID: chatID, AgentNodeID: "helper", Content: "direct"})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "echo: direct", m.Content)
	rec, err := f.runs.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Equal(t, []string{"helper"}, rec.EntryNodeIDs)

	_, err = f.svc.Send(context.Background(), chat.Request{Kind: chat.KindStreamAgentChat, ChatID: chatID, AgentNodeID: "out", Content: "x"})
	requireCode(t, err, chat.CodeInvalid)
}

func TestRetryAndEditBranch(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one"})
	f.settled(chatID, first.MessageID)

	retry := f.send(chat.Request{Kind: chat.KindRetryMessage, ChatID: chatID, MessageID: first.MessageID})
	again := f.settled(chatID, retry.MessageID)
	require.Equal(t, "echo: one", again.Content)
	require.Equal(t, first.UserMessageID, again.ParentID, "a retry answers the same user message in a new branch")
	require.NotEqual(t, first.MessageID, retry.MessageID)

	edit := f.send(chat.Request{Kind: chat.KindEditUserMessage, ChatID: chatID, MessageID: first.UserMessageID, Content: "two"})
	edited := f.settled(chatID, edit.MessageID)
	require.Equal(t, "echo: two", edited.Content)
	orig, err := f.chats.GetMessage(context.Background(), chatID, first.UserMessageID)
	require.NoError(t, err)
	require.Equal(t, "one", orig.Content, "an edit never overwrites history")
}

// approvalChat saves chat_start -> approval -> chat_output as g_approve
// and opens the chat c_approve on it.
func (f *fixture) approvalChat() {
	f.t.Helper()
	g := `{"nodes":[{"id":"start","type":"chat_start","data":{}},{"id":"ok","type":"approval","data":{}},
		{"id":"out","type":"chat_output","data":{}}],
		"edges":[{"id":"e1","source":"start","sourceHandle":"message","target":"ok","targetHandle":"input","data":{"channel":"flow"}},
		{"id":"e2","source":"ok","sourceHandle":"output","target":"out","targetHandle":"input","data":{"channel":"flow"}}]}`
	ctx := context.Background()
	require.NoError(f.t, f.chats.CreateGraph(ctx, &chat.Graph{ID: "g_approve", Name: "approve", Body: json.RawMessage(g)}))
	require.NoError(f.t, f.chats.CreateChat(ctx, &chat.Chat{ID: "c_approve", GraphID: "g_approve"}, 0))
}

func TestContinueAfterApproval(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	ctx := context.Background()
	f.approvalChat()
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: "c_approve", Content: "please"})
	m := f.settled("c_approve", tk.MessageID)
	require.Equal(t, chat.StatusInterrupted, m.Status)

	next := f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: "c_approve", MessageID: tk.MessageID,
		Resume: map[string]any{"approved": true}})
	require.Equal(t, tk.MessageID, next.MessageID, "a continue writes the same assistant message")
	done := f.settled("c_approve", tk.MessageID)
	require.Equal(t, chat.StatusCompleted, done.Status)
	require.Equal(t, next.RunID, done.RunID)

	// The interrupted run was continued: a second continue from it loses.
	_, err := f.svc.Send(ctx, chat.Request{Kind: chat.KindContinueMessage, FromRunID: tk.RunID})
	requireCode(t, err, chat.CodeConflict)
}

func TestCancelBeforeTheRunExists(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":50}`)
	res, err := f.svc.Cancel(context.Background(), chat.CancelRequest{ChatID: chatID, ClientRequestID: "req-1"})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status, "the intent is kept for a run that does not exist yet")
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "never answered", ClientRequestID: "req-1"})
	m := f.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCancelled, m.Status)
	for _, ev := range f.pub.of(tk.RunID) {
		require.NotEqual(t, runtime.EventNodeStarted, ev.Type, "no node starts after a cancel that came first")
	}
}

func TestCancelFinishedRunIsAConflict(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hi"})
	f.settled(chatID, tk.MessageID)
	<-waitClosed(t, f, tk.RunID)
	_, err := f.svc.Cancel(context.Background(), chat.CancelRequest{RunID: tk.RunID})
	ce := requireCode(t, err, chat.CodeConflict)
	require.Contains(t, ce.Message, "already ended completed")
}

// endGate is a run store whose group commits that end a run completed
// wait for open: the run has decided its end and still holds its binding.
type endGate struct {
	*memory.Store
	reached chan struct{} // closed when a commit waits
	open    chan struct{}
	once    sync.Once
}

func (g *endGate) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	for _, b := range bs {
		if b.Finish != nil && b.Finish.Status == runtime.RunCompleted {
			g.once.Do(func() { close(g.reached) })
			<-g.open
		}
	}
	return g.Store.WriteBatches(ctx, bs)
}

// A cancel that reaches a run which had already decided its end (its
// terminal commit under way, its binding still held) answers with that
// end, as for any finished run, not "cancelled" for a run that then
// completes.
func TestCancelRacingTheEndAnswersTheEnd(t *testing.T) {
	t.Parallel()
	inner := memory.New()
	runs := &endGate{Store: inner, reached: make(chan struct{}), open: make(chan struct{})}
	f := newFixture(t, runs, chatmemory.New(inner), runtime.Config{})
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hi"})
	<-runs.reached
	time.AfterFunc(50*time.Millisecond, func() { close(runs.open) })
	_, err := f.svc.Cancel(context.Background(), chat.CancelRequest{RunID: tk.RunID})
	ce := requireCode(t, err, chat.CodeConflict)
	require.Contains(t, ce.Message, "already ended completed")
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, tk.MessageID).Status)
}

// The same when the run is another process's: the cancel reaches it
// through the shared run control and answers with the end the store
// then has.
func TestCancelRacingTheEndOfAnotherProcesssRun(t *testing.T) {
	t.Parallel()
	inner := memory.New()
	runs := &endGate{Store: inner, reached: make(chan struct{}), open: make(chan struct{})}
	chats := chatmemory.New(inner)
	a := newFixture(t, runs, chats, runtime.Config{Owner: "a"})
	b := newFixture(t, runs, chats, runtime.Config{Owner: "b"}, func(c *chat.Config) { c.Control = a.ctl })
	_, chatID := a.chatOn(`{"name":"Helper"}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hi"})
	<-runs.reached
	require.Nil(t, b.svc.Live(tk.RunID), "the run is a's")
	time.AfterFunc(50*time.Millisecond, func() { close(runs.open) })
	_, err := b.svc.Cancel(context.Background(), chat.CancelRequest{RunID: tk.RunID})
	ce := requireCode(t, err, chat.CodeConflict)
	require.Contains(t, ce.Message, "already ended completed")
}

func waitClosed(t *testing.T, f *fixture, runID string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			f.pub.mu.Lock()
			c := f.pub.closed[runID]
			f.pub.mu.Unlock()
			if c {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("run %s never closed", runID)
	}()
	return done
}

func TestDoubleTexting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		strategy  runcontrol.Strategy
		firstWant chat.Status
	}{
		{runcontrol.Enqueue, chat.StatusCompleted},
		{runcontrol.Interrupt, chat.StatusCancelled},
	} {
		t.Run(string(tc.strategy), func(t *testing.T) {
			t.Parallel()
			f := newMemFixture(t)
			_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
			first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four"})
			second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "again", Strategy: tc.strategy})
			require.Equal(t, tc.firstWant, f.settled(chatID, first.MessageID).Status)
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, second.MessageID).Status)
		})
	}
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		f := newMemFixture(t)
		_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
		first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three"})
		_, err := f.svc.Send(context.Background(), chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "no", Strategy: runcontrol.Reject})
		var busy *runcontrol.BusyError
		require.ErrorAs(t, err, &busy)
		require.Equal(t, chat.StatusCompleted, f.settled(chatID, first.MessageID).Status)
	})
}

// deadChats drops the message writes (answers, deletes) of a dead process.
type deadChats struct {
	chat.Store
	dead *atomic.Bool
}

func (s deadChats) FinishMessage(ctx context.Context, m *chat.Message) error {
	if s.dead.Load() {
		return nil
	}
	return s.Store.FinishMessage(ctx, m)
}

func (s deadChats) DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error {
	if s.dead.Load() {
		return nil
	}
	return s.Store.DeleteMessages(ctx, chatID, ids, activeLeafID)
}

// A run whose process died mid-run is recovered by the next service on
// the same stores: the same run, its log continued gap-free, its message
// written.
func TestRecoveryOfARunWhosProcessDied(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := chatmemory.New(mem)
	a, die := dyingProcess(t, mem, chats)
	_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six"})
	a.streamed(tk.RunID)
	die()

	b := newFixture(t, mem, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second})
	// b's recovery loop takes the run over once a's lease expired.
	b.svc.Start(context.Background())
	m := b.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "echo: one two three four five six", m.Content)
	require.Equal(t, tk.RunID, m.RunID, "the same run")
	log, err := mem.Events(context.Background(), tk.RunID, 0, 0)
	require.NoError(t, err)
	for i, ev := range log {
		require.EqualValues(t, i+1, ev.Seq)
	}
	require.Equal(t, runtime.EventRunCompleted, log[len(log)-1].Type)
	require.NotEmpty(t, b.pub.of(tk.RunID), "the recovered run streams through the new service")
}

// A cancel of a run whose process died, sent before recovery took it
// back (no process has it bound), is kept for it: the run is recovered
// cancelled, and its message keeps what it had streamed — where it was
// answered 409 "not bound" and the run then completed.
func TestCancelOfARunAwaitingRecoveryWins(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := chatmemory.New(mem)
	a, die := dyingProcess(t, mem, chats)
	_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six seven eight"})
	a.streamed(tk.RunID)
	die()

	b := newFixture(t, mem, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second})
	res, err := b.svc.Cancel(context.Background(), chat.CancelRequest{RunID: tk.RunID})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status, "kept for the run's recovery")
	b.svc.Start(context.Background())
	m := b.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCancelled, m.Status)
	require.Equal(t, tk.RunID, m.RunID)
	rec, err := mem.GetRun(context.Background(), tk.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	log, err := mem.Events(context.Background(), tk.RunID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, strings.Join(deltasOf(log), ""), m.Content, "the text of the log")
	require.NotEmpty(t, m.Content)
}

// A run that ended while its process died before writing the answer gets
// its answer written by the next start, from the run's checkpoints.
func TestStartWritesAnswersOfEndedRuns(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := chatmemory.New(mem)
	var dead atomic.Bool
	a := newFixture(t, mem, deadChats{Store: chats, dead: &dead}, runtime.Config{})
	_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two"})
	require.Eventually(t, func() bool { return len(a.pub.of(tk.RunID)) > 0 }, 5*time.Second, time.Millisecond)
	dead.Store(true) // the answer's write is lost
	require.Eventually(t, func() bool {
		rec, err := mem.GetRun(context.Background(), tk.RunID)
		return err == nil && rec.Status == runtime.RunCompleted && a.svc.Live(tk.RunID) == nil
	}, 5*time.Second, time.Millisecond)
	m, err := chats.GetMessage(context.Background(), chatID, tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusRunning, m.Status, "the answer was not written")

	b := newFixture(t, mem, chats, runtime.Config{})
	b.svc.Start(context.Background())
	m = b.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "echo: one two", m.Content)
}

// One client's runs are bounded by MaxRunsPerClient; another client (and
// a call with no client named) is not held back by them.
func TestRunsPerClientBounded(t *testing.T) {
	t.Parallel()
	runs := memory.New()
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) {
		c.MaxRunsPerClient, c.DrainTimeout = 2, time.Millisecond
	})
	chats, svc := f.chats, f.svc
	graphID, _ := f.chatOn(`{"name":"Helper","tokenDelayMs":10000}`)
	newChat := func() string {
		id := chat.NewID("c_")
		require.NoError(t, chats.CreateChat(context.Background(), &chat.Chat{ID: id, GraphID: graphID}, 0))
		return id
	}
	a := chat.WithClient(context.Background(), "10.0.0.1")
	b := chat.WithClient(context.Background(), "10.0.0.2")
	for range 2 {
		_, err := svc.Send(a, chat.Request{Kind: chat.KindStreamChat, ChatID: newChat(), Content: "slow"})
		require.NoError(t, err)
	}
	_, err := svc.Send(a, chat.Request{Kind: chat.KindStreamChat, ChatID: newChat(), Content: "one too many"})
	require.ErrorIs(t, err, chat.ErrTooManyRuns)
	_, err = svc.Send(b, chat.Request{Kind: chat.KindStreamChat, ChatID: newChat(), Content: "another client"})
	require.NoError(t, err)
	_, err = svc.Send(context.Background(), chat.Request{Kind: chat.KindStreamChat, ChatID: newChat(), Content: "no client"})
	require.NoError(t, err)
}

// countingChats counts FinishMessage calls per message.
type countingChats struct {
	chat.Store
	mu sync.Mutex
	n  map[string]int
}

func (s *countingChats) FinishMessage(ctx context.Context, m *chat.Message) error {
	s.mu.Lock()
	s.n[m.ID]++
	s.mu.Unlock()
	return s.Store.FinishMessage(ctx, m)
}

func (s *countingChats) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

// A turn that starts at once writes its answer running with the turn
// (one write less per turn); a turn queued behind another stays pending
// until its run starts.
func TestTurnWrittenRunningWhenItStartsAtOnce(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := &countingChats{Store: chatmemory.New(mem), n: map[string]int{}}
	f := newFixture(t, mem, chats, runtime.Config{})
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":30}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three"})
	m, err := chats.GetMessage(context.Background(), chatID, first.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusRunning, m.Status, "running from the turn's own write")
	second := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "again", Strategy: runcontrol.Enqueue})
	m, err = chats.GetMessage(context.Background(), chatID, second.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusPending, m.Status, "queued behind the first turn")
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, first.MessageID).Status)
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, second.MessageID).Status)
	require.Equal(t, 1, chats.count(first.MessageID), "only the final write")
	require.Equal(t, 2, chats.count(second.MessageID), "running when it started, then final")
}

// lostLease is a store whose lease renewals fail once lost is set, as when
// another process has taken the run over.
type lostLease struct {
	*memory.Store
	lost atomic.Bool
}

func (s *lostLease) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	if s.lost.Load() {
		return runtime.Lease{}, runtime.ErrFenced
	}
	return s.Store.RenewLease(ctx, l, ttl)
}

func (s *lostLease) RenewLeases(ctx context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	if s.lost.Load() {
		errs := make([]error, len(leases))
		for i := range errs {
			errs[i] = runtime.ErrFenced
		}
		return make([]runtime.Lease, len(leases)), errs, nil
	}
	return s.Store.RenewLeases(ctx, leases, ttl)
}

// A run whose lease this process lost is the new owner's: this process
// writes neither its message nor its terminal event; the new owner does.
func TestLostLeaseLeavesTheRunToTheNewOwner(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := chatmemory.New(mem)
	st := &lostLease{Store: mem}
	a := newFixture(t, st, chats, runtime.Config{Owner: "a", LeaseTTL: 150 * time.Millisecond})
	_, chatID := a.chatOn(`{"name":"Helper","tokenDelayMs":40}`)
	tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six"})
	require.Eventually(t, func() bool { return len(a.pub.of(tk.RunID)) > 2 }, 5*time.Second, time.Millisecond)
	st.lost.Store(true)
	require.Eventually(t, func() bool { return a.svc.Live(tk.RunID) == nil }, 5*time.Second, time.Millisecond,
		"the run stops here once its lease is lost")
	for _, ev := range a.pub.of(tk.RunID) {
		require.False(t, ev.Type.Terminal(), "a terminal event from the process that lost the run: %s", ev.Type)
	}
	m, err := chats.GetMessage(context.Background(), chatID, tk.MessageID)
	require.NoError(t, err)
	require.Equal(t, chat.StatusRunning, m.Status, "the message is left to the new owner")

	b := newFixture(t, mem, chats, runtime.Config{Owner: "b"})
	b.svc.Start(context.Background())
	m = b.settled(chatID, tk.MessageID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "echo: one two three four five six", m.Content)
}

// A turn whose process died after writing its messages and reservation,
// before the run began, is failed with code lost by the next start: no
// message is left pending without a run that will finish it.
func TestStartSettlesLostReservations(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	chats := chatmemory.New(mem)
	f := newFixture(t, mem, chats, runtime.Config{})
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	ctx := context.Background()
	now := time.Now().UTC()
	user := &chat.Message{ID: "m_u", ChatID: chatID, Role: chat.RoleUser, Content: "hi", RunID: "r_lost", TurnRunID: "r_lost",
		Status: chat.StatusCompleted, CreatedAt: now}
	asst := &chat.Message{ID: "m_a", ChatID: chatID, ParentID: "m_u", Role: chat.RoleAssistant, RunID: "r_lost", TurnRunID: "r_lost",
		Status: chat.StatusPending, CreatedAt: now}
	require.NoError(t, chats.BeginTurn(ctx, chat.Turn{ChatID: chatID, ActiveLeafID: "m_a", Messages: []*chat.Message{user, asst},
		Run: &runtime.RunRecord{ID: "r_lost", RootID: "r_lost", ChatID: chatID, Kind: "stream_chat", Status: runtime.RunPending,
			Attrs: map[string]any{"messageId": "m_a"}, CreatedAt: now, UpdatedAt: now}}))
	f.svc.Start(ctx)
	m, err := chats.GetMessage(ctx, chatID, "m_a")
	require.NoError(t, err)
	require.Equal(t, chat.StatusFailed, m.Status)
	require.Contains(t, m.Error, "before the run started")
	rec, err := mem.GetRun(ctx, "r_lost")
	require.NoError(t, err)
	require.Equal(t, runtime.RunFailed, rec.Status)
	log, err := mem.Events(ctx, "r_lost", 0, 0)
	require.NoError(t, err)
	require.Len(t, log, 2)
	require.Equal(t, "lost", log[1].Data.(*runtime.RunFailedData).Code)
}

// finishedThenNext sends a turn from the publisher the moment it sees a
// run's terminal event, as a client does that reads run_completed and
// sends its next message at once.
type finishedThenNext struct {
	*recorder
	next func() error
	errs chan error
}

func (p *finishedThenNext) RunEvent(run *chat.LiveRun, ev runtime.Event) {
	p.recorder.RunEvent(run, ev)
	if ev.Type.Terminal() && p.next != nil {
		select {
		case p.errs <- p.next(): // the first run's end only: errs holds one
		default:
		}
	}
}

// A run's place under the run limits is free by the time its terminal
// event goes out: the client's next turn, sent on run_completed, is not
// refused for the run that just ended.
func TestEndedRunFreesItsPlaceBeforeItsTerminalEvent(t *testing.T) {
	t.Parallel()
	runs := memory.New()
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) {
		c.MaxRunsPerClient, c.MaxRunsPerChat, c.MaxRuns = 1, 1, 1
	})
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	client := chat.WithClient(context.Background(), "10.0.0.1")
	pub := &finishedThenNext{recorder: newRecorder(), errs: make(chan error, 1)}
	var once sync.Once
	pub.next = func() error {
		var err error
		once.Do(func() {
			_, err = f.svc.Send(client, chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "next"})
		})
		return err
	}
	f.svc.SetPublisher(pub)
	_, err := f.svc.Send(client, chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "first"})
	require.NoError(t, err)
	require.NoError(t, <-pub.errs, "the next turn is admitted")
}

// Chat calls start at most MaxStartingTurns at once: the others wait, in
// the order they came, and one whose context ends while it waits is
// refused with nothing written.
func TestStartingTurnsAreBounded(t *testing.T) {
	t.Parallel()
	runs := memory.New()
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) { c.MaxStartingTurns = 1 })
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	leave, err := f.svc.EnterStart(t.Context())
	require.NoError(t, err)

	// A call whose context ends while it waits: refused, nothing written.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = f.svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "too late"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	msgs, err := f.chats.ListMessages(t.Context(), chatID, 0, 100)
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Zero(t, f.svc.StartsWaiting())

	// Calls that wait start one at a time, in the order they came (their
	// user messages are written as they start), once the place is free.
	const n = 3
	var started atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.svc.Send(t.Context(), chat.Request{Kind: chat.KindStreamChat, ChatID: chatID,
				Content: fmt.Sprintf("turn %d", i), Strategy: runcontrol.Enqueue})
			assert.NoError(t, err)
			started.Add(1)
		}()
		require.Eventually(t, func() bool { return f.svc.StartsWaiting() == int64(i+1) }, 5*time.Second, time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, started.Load(), "a call started while the only place was held")
	leave()
	wg.Wait()
	require.Zero(t, f.svc.StartsWaiting())
	msgs, err = f.chats.ListMessages(t.Context(), chatID, 0, 100)
	require.NoError(t, err)
	var asked []string
	for _, m := range msgs {
		if m.Role == chat.RoleUser {
			asked = append(asked, m.Content)
		} else {
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, m.ID).Status)
		}
	}
	require.Equal(t, []string{"turn 0", "turn 1", "turn 2"}, asked)
}

// BusyStartingTurns bounds the chat calls starting at once only while the
// engine's commits lag over BusyCommitLag: otherwise a call starts at
// once, places or not, unless calls are waiting, behind which it waits
// whatever the lag.
func TestBusyStartingTurnsBoundOnlyWhileCommitsLag(t *testing.T) {
	t.Parallel()
	runs := memory.New()
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) {
		c.BusyStartingTurns, c.BusyCommitLag = 1, time.Millisecond
	})
	var lag atomic.Int64
	f.svc.SetCommitLag(func() time.Duration { return time.Duration(lag.Load()) })
	_, chatID := f.chatOn(`{"name":"Helper"}`)
	enter := func() func() {
		t.Helper()
		leave, err := f.svc.EnterStart(t.Context())
		require.NoError(t, err)
		return leave
	}

	// No lag: calls start at once, though more than one starts.
	leaveA, leaveB := enter(), enter()
	_, err := f.svc.Send(t.Context(), chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "quiet", Strategy: runcontrol.Enqueue})
	require.NoError(t, err)
	leaveA()
	leaveB()

	// Lagging: the one place is taken, and the next call waits for it.
	lag.Store(int64(5 * time.Millisecond))
	leave := enter()
	sent := make(chan error, 1)
	go func() {
		_, err := f.svc.Send(t.Context(), chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "busy", Strategy: runcontrol.Enqueue})
		sent <- err
	}()
	require.Eventually(t, func() bool { return f.svc.StartsWaiting() == 1 }, 5*time.Second, time.Millisecond)

	// The lag is over, but a call waits: the next one waits behind it.
	lag.Store(0)
	entered := make(chan func(), 1)
	go func() { entered <- enter() }()
	require.Eventually(t, func() bool { return f.svc.StartsWaiting() == 2 }, 5*time.Second, time.Millisecond)
	select {
	case err := <-sent:
		t.Fatalf("a call started while the only place was held (err %v)", err)
	case <-entered:
		t.Fatal("a call overtook one waiting")
	case <-time.After(20 * time.Millisecond):
	}
	leave()
	require.NoError(t, <-sent)
	(<-entered)()
	require.Zero(t, f.svc.StartsWaiting())

	// Lagging, the place taken; the lag over and no call waiting: a call
	// starts at once again.
	lag.Store(int64(5 * time.Millisecond))
	leave = enter()
	lag.Store(0)
	done := make(chan struct{})
	go func() { enter()(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a call waited with no lag and no call waiting")
	}
	leave()
}

// A turn takes its graph from the engine's cached plan of that version
// instead of decoding the body again, and a turn after the graph changed
// runs the new version.
func TestTurnsRunTheGraphVersionTheyRead(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	ctx := context.Background()
	graphID, chatID := f.chatOn(`{"name":"Helper"}`)
	v1, err := f.chats.GetGraph(ctx, graphID)
	require.NoError(t, err)
	before, err := f.svc.GraphOf(v1)
	require.NoError(t, err)
	tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one"})
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, tk.MessageID).Status)

	cached, err := f.svc.GraphOf(v1)
	require.NoError(t, err)
	again, err := f.svc.GraphOf(v1)
	require.NoError(t, err)
	require.Same(t, cached, again, "the compiled version's graph is shared, not decoded per turn")
	require.NotSame(t, before, cached, "nothing was compiled before the first turn")
	require.Equal(t, before, cached)

	// The agent node renamed: a new plan version.
	v2 := *v1
	v2.Body = json.RawMessage(strings.ReplaceAll(string(v1.Body), `"helper"`, `"helper2"`))
	require.NoError(t, f.chats.UpdateGraph(ctx, &v2, v1.PlanVersion))
	require.Equal(t, v1.PlanVersion+1, v2.PlanVersion)
	g2, err := f.svc.GraphOf(&v2)
	require.NoError(t, err)
	require.Equal(t, "helper2", g2.Nodes[1].ID)
	require.Equal(t, v2.PlanVersion, g2.PlanVersion)

	tk = f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "two"})
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, tk.MessageID).Status)
	var agents []string
	for _, ev := range f.pub.of(tk.RunID) {
		if ev.Type == runtime.EventNodeStarted && strings.HasPrefix(ev.NodeID, "helper") {
			agents = append(agents, ev.NodeID)
		}
	}
	require.Equal(t, []string{"helper2"}, agents)
}

// A chat whose graph was deleted takes no turn: the call is a conflict
// that names the graph, and nothing is written.
func TestTurnOnADeletedGraphIsAConflict(t *testing.T) {
	t.Parallel()
	f := newMemFixture(t)
	ctx := context.Background()
	graphID, chatID := f.chatOn(`{"name":"Helper"}`)
	require.NoError(t, f.chats.DeleteGraph(ctx, graphID))
	_, err := f.svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello"})
	ce := requireCode(t, err, chat.CodeConflict)
	require.Contains(t, ce.Message, graphID)
	msgs, err := f.chats.ListMessages(ctx, chatID, 0, 0)
	require.NoError(t, err)
	require.Empty(t, msgs)
	_, err = f.svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: "c_nope", Content: "hello"})
	require.ErrorIs(t, err, chat.ErrNotFound)
}

// supersedingQueue answers every turn that waits (one that does not get
// the chat at once) as superseded, before any cancel of its binding
// arrives — as the Redis queue does when its script sees the mark ahead
// of the cancel's pub/sub message.
type supersedingQueue struct{ runcontrol.ChatQueue }

func (q supersedingQueue) Acquire(ctx context.Context, chatID, runID string, s runcontrol.Strategy) (*runcontrol.Turn, error) {
	if s == runcontrol.Reject {
		return q.ChatQueue.Acquire(ctx, chatID, runID, s)
	}
	return nil, runcontrol.SupersededBy(chatID, "r_newer")
}

// A queued turn the queue reports superseded ends cancelled with that
// cause (its message cancelled, "superseded"), whether or not the cancel
// of its binding has come yet; it is not a run that failed to start.
func TestSupersededWhileQueuedIsCancelled(t *testing.T) {
	t.Parallel()
	runs := memory.New()
	f := newFixture(t, runs, chatmemory.New(runs), runtime.Config{}, func(c *chat.Config) {
		c.Queue = supersedingQueue{runcontrol.NewMemoryChatQueue(c.Control)}
	})
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":20}`)
	first := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six"})
	queued := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "queued"})
	m := f.settled(chatID, queued.MessageID)
	require.Equal(t, chat.StatusCancelled, m.Status)
	require.Equal(t, "superseded", m.Error)
	rec, err := runs.GetRun(context.Background(), queued.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	require.Equal(t, chat.StatusCompleted, f.settled(chatID, first.MessageID).Status)
}
