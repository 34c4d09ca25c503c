package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatpostgres "chatgraph/chat/store/postgres"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/internal/pgtest"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// durableRuns is what the run stores (memory, sqlite, postgres) offer the
// engine.
type durableRuns interface {
	runtime.Store
	runtime.Leaser
	runtime.Inspector
	runtime.BatchFinisher
	runtime.BulkClaimer
	runtime.OwnerLister
	runtime.RunStarter
	runtime.EffectLedger
}

// backend opens a real run store and the chat store in its database.
type backend struct {
	name string
	open func(t *testing.T) (durableRuns, chat.Store)
}

var backends = []backend{{"sqlite", openSQLite}, {"postgres", openPostgres}}

func openSQLite(t *testing.T) (durableRuns, chat.Store) {
	runs, err := rsqlite.Open(t.Context(), rsqlite.Config{Path: filepath.Join(t.TempDir(), "chatgraph.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	chats, err := chatsqlite.Open(t.Context(), runs)
	require.NoError(t, err)
	return runs, chats
}

// openPostgres opens the stores in a fresh schema, dropped at the end.
func openPostgres(t *testing.T) (durableRuns, chat.Store) {
	runs, err := rpostgres.Open(t.Context(), rpostgres.Config{URL: pgtest.URL(), Schema: pgtest.Schema(t, "chathistory"), MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	chats, err := chatpostgres.Open(t.Context(), runs)
	require.NoError(t, err)
	return runs, chats
}

// spyModel is the echo model, keeping what each call was given.
type spyModel struct {
	mu    sync.Mutex
	calls [][]llm.Message
}

func (m *spyModel) Stream(ctx context.Context, req llm.Request, onText func(string)) (llm.Response, error) {
	m.mu.Lock()
	m.calls = append(m.calls, slices.Clone(req.Messages))
	m.mu.Unlock()
	return llm.Echo{}.Stream(ctx, req, onText)
}

func (m *spyModel) all() [][]llm.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// spyDeps are node dependencies whose model "spy/echo" is spy, with the
// ledger in runs (as the server has it).
func spyDeps(t *testing.T, runs runtime.Store, spy *spyModel) nodes.Deps {
	models := llm.NewModels()
	require.NoError(t, models.Register("spy", spy))
	return nodes.Deps{Models: models, Ledger: nodes.NewStoreLedger(runs.(runtime.EffectLedger))}
}

// texts is role:content of each message.
func texts(ms []llm.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Role + ":" + m.Content
	}
	return out
}

// saveChat saves a graph (its JSON) and opens a chat on it.
func (f *fixture) saveChat(graph string) string {
	f.t.Helper()
	ctx := context.Background()
	graphID, chatID := chat.NewID("g_"), chat.NewID("c_")
	require.NoError(f.t, f.chats.CreateGraph(ctx, &chat.Graph{ID: graphID, Name: "history", Body: json.RawMessage(graph)}))
	require.NoError(f.t, f.chats.CreateChat(ctx, &chat.Chat{ID: chatID, GraphID: graphID}, 0))
	return chatID
}

const (
	flowEdge = `"data":{"channel":"flow"}`
	// spyGraph: chat_start -> agent (spy model) -> chat_output, with a
	// calculator the agent may call only once approved.
	spyGraph = `{"nodes":[{"id":"start","type":"chat_start","data":{}},
		{"id":"helper","type":"agent","data":{"name":"Helper","model":"spy/echo"}},
		{"id":"calc","type":"tool","data":{"name":"calculator","requireApproval":true}},
		{"id":"out","type":"chat_output","data":{}}],
		"edges":[{"id":"e1","source":"start","sourceHandle":"message","target":"helper","targetHandle":"input",` + flowEdge + `},
		{"id":"e2","source":"helper","sourceHandle":"output","target":"out","targetHandle":"input",` + flowEdge + `},
		{"id":"e3","source":"calc","sourceHandle":"tool","target":"helper","targetHandle":"tools","data":{"channel":"link"}}]}`
	// slowSpyGraph: chat_start -> agent (spy model, a word every 40 ms) ->
	// chat_output: its words reach the store in commits of their own.
	slowSpyGraph = `{"nodes":[{"id":"start","type":"chat_start","data":{}},
		{"id":"helper","type":"agent","data":{"name":"Helper","model":"spy/echo","tokenDelayMs":40}},
		{"id":"out","type":"chat_output","data":{}}],
		"edges":[{"id":"e1","source":"start","sourceHandle":"message","target":"helper","targetHandle":"input",` + flowEdge + `},
		{"id":"e2","source":"helper","sourceHandle":"output","target":"out","targetHandle":"input",` + flowEdge + `}]}`
	// gateGraph: chat_start -> approval -> agent (spy model) -> chat_output.
	gateGraph = `{"nodes":[{"id":"start","type":"chat_start","data":{}},{"id":"ok","type":"approval","data":{}},
		{"id":"helper","type":"agent","data":{"name":"Helper","model":"spy/echo"}},{"id":"out","type":"chat_output","data":{}}],
		"edges":[{"id":"e1","source":"start","sourceHandle":"message","target":"ok","targetHandle":"input",` + flowEdge + `},
		{"id":"e2","source":"ok","sourceHandle":"output","target":"helper","targetHandle":"input",` + flowEdge + `},
		{"id":"e3","source":"helper","sourceHandle":"output","target":"out","targetHandle":"input",` + flowEdge + `}]}`
)

// storedSize is the JSON size of what the run store keeps of a run: its
// input, its checkpoints and its event log (of its deltas, their text).
func storedSize(t *testing.T, runs runtime.Store, runID string) (input, checkpoints, events int) {
	t.Helper()
	ctx := context.Background()
	rec, err := runs.GetRun(ctx, runID)
	require.NoError(t, err)
	b, err := json.Marshal(rec.Input)
	require.NoError(t, err)
	input = len(b)
	cps, err := runs.Checkpoints(ctx, runID)
	require.NoError(t, err)
	for _, cp := range cps {
		b, err := json.Marshal(cp)
		require.NoError(t, err)
		checkpoints += len(b)
	}
	evs, err := runs.Events(ctx, runID, 0, 0)
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Type == nodes.EventNodeDelta {
			// The words' text alone: how many events carry them depends
			// on the commits' timing (deltas emitted while one commit is
			// written fold into one event).
			var d nodes.NodeDeltaData
			b, err := json.Marshal(ev.Data)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &d))
			events += len(d.Text)
			continue
		}
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		events += len(b)
	}
	return input, checkpoints, events
}

// A chat keeps its history once: every run of a 30-turn chat stores the
// same input size (a reference, not the branch), its checkpoints and
// events do not grow with the chat either, and the model still gets the
// whole branch on every turn.
func TestRunInputsStayBoundedAsTheChatGrows(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			spy := &spyModel{}
			f := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			chatID := f.saveChat(spyGraph)
			const turns = 30
			var want []string
			var first [3]int
			for i := range turns {
				content := fmt.Sprintf("turn %02d", i)
				tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: content})
				m := f.settled(chatID, tk.MessageID)
				require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
				require.Equal(t, "echo: "+content, m.Content)

				calls := spy.all()
				require.Len(t, calls, i+1)
				require.Equal(t, append(slices.Clone(want), "user:"+content), texts(calls[i]), "turn %d: the model gets the whole branch", i)
				want = append(want, "user:"+content, "assistant:echo: "+content)

				rec, err := runs.GetRun(context.Background(), tk.RunID)
				require.NoError(t, err)
				ci := nodes.AsChatInput(rec.Input)
				require.Empty(t, ci.History, "no inline history")
				in, cps, evs := storedSize(t, runs, tk.RunID)
				switch i {
				case 0:
					require.Nil(t, ci.HistoryFrom, "the first turn has no history")
				case 1:
					require.NotNil(t, ci.HistoryFrom)
					first = [3]int{in, cps, evs}
					require.Less(t, in, 300, "a reference, not a copy")
				default:
					require.Equal(t, chatID, ci.HistoryFrom.ChatID)
					require.Equal(t, first[0], in, "turn %d: the input does not grow with the chat", i)
					require.LessOrEqual(t, cps, first[1]+64, "turn %d: checkpoints do not grow with the chat", i)
					require.LessOrEqual(t, evs, first[2]+256, "turn %d: events do not grow with the chat", i)
				}
			}
		})
	}
}

// A run continued after an approval reads the history it started with:
// the model step that led to the approved call replays from the ledger
// (its request, history included, is the same), and the next call gets
// the same branch.
func TestContinuedRunReadsTheSameHistory(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			spy := &spyModel{}
			f := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			chatID := f.saveChat(spyGraph)
			tk := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello"})
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, tk.MessageID).Status)

			call := `/tool calculator {"expression":"1+2"}`
			tk = f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: call})
			require.Equal(t, chat.StatusInterrupted, f.settled(chatID, tk.MessageID).Status)
			hist := []string{"user:hello", "assistant:echo: hello", "user:" + call}
			require.Len(t, spy.all(), 2)
			require.Equal(t, hist, texts(spy.all()[1]))

			next := f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: chatID, MessageID: tk.MessageID,
				Resume: map[string]any{"approved": true}})
			m := f.settled(chatID, tk.MessageID)
			require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
			require.Equal(t, "tool calculator returned: 3", m.Content)
			calls := spy.all()
			require.Len(t, calls, 3, "the step that called the tool replayed: its request was the same")
			require.Equal(t, hist, texts(calls[2])[:3], "the continued run reads the same history")
			rec, err := runs.GetRun(context.Background(), next.RunID)
			require.NoError(t, err)
			require.NotNil(t, nodes.AsChatInput(rec.Input).HistoryFrom)
		})
	}
}

// The history is the branch as it was when the turn started: an earlier
// answer continued after the turn began (it had no content then) stays
// out of the turn's history when the turn is continued later.
func TestHistoryIsTheBranchAsTheTurnStarted(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			spy := &spyModel{}
			f := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			chatID := f.saveChat(gateGraph)
			one := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "first"})
			require.Equal(t, chat.StatusInterrupted, f.settled(chatID, one.MessageID).Status)
			two := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "second"})
			require.Equal(t, chat.StatusInterrupted, f.settled(chatID, two.MessageID).Status)

			approve := map[string]any{"approved": true}
			f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: chatID, MessageID: one.MessageID, Resume: approve})
			m := f.settled(chatID, one.MessageID)
			require.Equal(t, "echo: first", m.Content, m.Error)
			f.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: chatID, MessageID: two.MessageID, Resume: approve})
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, two.MessageID).Status)

			calls := spy.all()
			require.Len(t, calls, 2)
			require.Equal(t, []string{"user:first"}, texts(calls[0]))
			require.Equal(t, []string{"user:first", "user:second"}, texts(calls[1]),
				"the first answer had no content when the second turn started")
		})
	}
}

// dyingRuns is a run store whose process died: once dead, nothing
// the process writes reaches it (the engine that used it goes on, unseen).
type dyingRuns struct {
	durableRuns
	dead *atomic.Bool
}

func (s dyingRuns) AppendEvents(ctx context.Context, id string, token int64, evs []runtime.Event) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.AppendEvents(ctx, id, token, evs)
}

func (s dyingRuns) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.SaveCheckpoint(ctx, cp)
}

func (s dyingRuns) WriteBatches(ctx context.Context, b []runtime.WriteBatch) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.WriteBatches(ctx, b)
}

func (s dyingRuns) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.UpdateRun(ctx, r)
}

func (s dyingRuns) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	if s.dead.Load() {
		return l, nil
	}
	return s.durableRuns.RenewLease(ctx, l, ttl)
}

func (s dyingRuns) ReleaseLease(ctx context.Context, l runtime.Lease) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.ReleaseLease(ctx, l)
}

func (s dyingRuns) DeleteRun(ctx context.Context, id string) error {
	if s.dead.Load() {
		return nil
	}
	return s.durableRuns.DeleteRun(ctx, id)
}

// A run recovered after its process died reads the same history as the
// run did before the crash (the recovery's services resolve it).
func TestRecoveredRunReadsTheSameHistory(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			var dead atomic.Bool
			spyA, spyB := &spyModel{}, &spyModel{}
			a := newFixtureDeps(t, dyingRuns{durableRuns: runs, dead: &dead}, deadChats{Store: chats, dead: &dead},
				runtime.Config{Owner: "a", LeaseTTL: 300 * time.Millisecond}, spyDeps(t, runs, spyA))
			chatID := a.saveChat(slowSpyGraph)
			tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello"})
			require.Equal(t, chat.StatusCompleted, a.settled(chatID, tk.MessageID).Status)
			tk = a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four five six"})
			require.Eventually(t, func() bool {
				for _, ev := range a.pub.of(tk.RunID) {
					if ev.Type == "node_delta" {
						return true
					}
				}
				return false
			}, 10*time.Second, 2*time.Millisecond)
			dead.Store(true)
			want := []string{"user:hello", "assistant:echo: hello", "user:one two three four five six"}
			require.Equal(t, want, texts(spyA.all()[1]))

			bf := newFixtureDeps(t, runs, chats, runtime.Config{Owner: "b", LeaseTTL: time.Second}, spyDeps(t, runs, spyB))
			bf.svc.Start(context.Background())
			m := bf.settled(chatID, tk.MessageID)
			require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
			require.Equal(t, tk.RunID, m.RunID, "the same run, recovered")
			calls := spyB.all()
			require.Len(t, calls, 1)
			require.Equal(t, want, texts(calls[0]), "the recovered run reads the same history")
		})
	}
}

// Start rewrites runs stored with their history inline (an older build)
// to the reference, once: a run whose inline history the chat no longer
// gives back is kept inline, a second start changes nothing, and the
// migrated run, continued, reads the same history (its model step
// replays from the ledger).
func TestStartMigratesInlineHistory(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			runs, chats := b.open(t)
			spy := &spyModel{}
			a := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			chatID := a.saveChat(spyGraph)
			hello := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello"})
			require.Equal(t, chat.StatusCompleted, a.settled(chatID, hello.MessageID).Status)
			again := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "again"})
			require.Equal(t, chat.StatusCompleted, a.settled(chatID, again.MessageID).Status)
			call := `/tool calculator {"expression":"2*3"}`
			tk := a.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: call})
			require.Equal(t, chat.StatusInterrupted, a.settled(chatID, tk.MessageID).Status)

			// What an older build stored: the branch inline.
			inline := func(runID string, hist []nodes.Message, dropUserAttr bool) {
				rec, err := runs.GetRun(ctx, runID)
				require.NoError(t, err)
				ci := nodes.AsChatInput(rec.Input)
				ci.History, ci.HistoryFrom = hist, nil
				rec.Input = ci.Value()
				if dropUserAttr {
					delete(rec.Attrs, "userMessageId") // as a continue's record has them
				}
				require.NoError(t, runs.UpdateRun(ctx, rec))
			}
			h := func(kv ...string) []nodes.Message {
				var out []nodes.Message
				for i := 0; i < len(kv); i += 2 {
					out = append(out, nodes.Message{Role: kv[i], Content: kv[i+1]})
				}
				return out
			}
			inline(tk.RunID, h("user", "hello", "assistant", "echo: hello", "user", "again", "assistant", "echo: again"), true)
			// A history the chat does not give back (edited by hand): kept.
			inline(again.RunID, h("user", "hello", "assistant", "something else"), false)
			before := map[string]any{}
			for _, id := range []string{hello.RunID, again.RunID, tk.RunID} {
				rec, err := runs.GetRun(ctx, id)
				require.NoError(t, err)
				before[id] = rec.Input
			}
			oldSize, _, _ := storedSize(t, runs, tk.RunID)

			bf := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			bf.svc.Start(ctx)
			rec, err := runs.GetRun(ctx, tk.RunID)
			require.NoError(t, err)
			ci := nodes.AsChatInput(rec.Input)
			require.Empty(t, ci.History)
			require.NotNil(t, ci.HistoryFrom, "rewritten to the reference")
			require.Equal(t, chatID, ci.HistoryFrom.ChatID)
			require.Equal(t, call, ci.Content)
			newSize, _, _ := storedSize(t, runs, tk.RunID)
			require.Less(t, newSize, oldSize)
			kept, err := runs.GetRun(ctx, again.RunID)
			require.NoError(t, err)
			require.Equal(t, before[again.RunID], kept.Input, "a history the chat does not give back stays inline")
			first, err := runs.GetRun(ctx, hello.RunID)
			require.NoError(t, err)
			require.Equal(t, before[hello.RunID], first.Input, "a run without history is left alone")

			// A second start changes nothing, even a record an older
			// process wrote meanwhile: the migration ran once.
			inline(again.RunID, h("user", "hello", "assistant", "echo: hello"), false)
			after := map[string]any{}
			for _, id := range []string{hello.RunID, again.RunID, tk.RunID} {
				rec, err := runs.GetRun(ctx, id)
				require.NoError(t, err)
				after[id] = rec.Input
			}
			cf := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, spy))
			cf.svc.Start(ctx)
			for id, in := range after {
				rec, err := runs.GetRun(ctx, id)
				require.NoError(t, err)
				require.Equal(t, in, rec.Input, "run %s unchanged by the second start", id)
			}

			// The migrated run continues on the same history.
			n := len(spy.all())
			cf.send(chat.Request{Kind: chat.KindContinueMessage, ChatID: chatID, MessageID: tk.MessageID, Resume: map[string]any{"approved": true}})
			m := cf.settled(chatID, tk.MessageID)
			require.Equal(t, chat.StatusCompleted, m.Status, m.Error)
			require.Equal(t, "tool calculator returned: 6", m.Content)
			calls := spy.all()
			require.Len(t, calls, n+1, "the step that called the tool replayed: its request was the same")
			require.Equal(t, []string{"user:hello", "assistant:echo: hello", "user:again", "assistant:echo: again", "user:" + call},
				texts(calls[n])[:5])
		})
	}
}
