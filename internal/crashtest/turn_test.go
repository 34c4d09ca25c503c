package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatpostgres "chatgraph/chat/store/postgres"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/internal/pgtest"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// The turn crash test kills a chat service between "the turn's messages
// are written" and "its run is created" (and a little past it), then lets
// a fresh service take over, and checks the chat and run stores agree:
// no message is left pending or running, and every run has its messages.
const (
	envTurnWorker = "CRASHTEST_TURN_WORKER"
	envTurnDB     = "CRASHTEST_TURN_DB" // "sqlite:<path>" or "postgres:<schema>"
	envTurnIter   = "CRASHTEST_TURN_ITER"
	envTurnFP     = "CRASHTEST_TURN_FP" // "<op>:<n>" or "after:<µs>"; empty: recover only
	turnChats     = 6
	turnLeaseTTL  = 300 * time.Millisecond
)

// turnOps are the writes of a turn's start, in order. A turn that holds
// its chat's turn (the first to a chat) writes its messages in the
// commit that creates its run and logs run_started (write_batches: the
// chat store is a chat.Joiner). A turn that waits in its chat's queue
// (the second) writes its messages with the run's reservation at once
// (begin_turn); its run's creation, with the answer marked running,
// follows when it starts (write_batches). Without a BatchFinisher store:
// the answer marked running (finish_message), the run's creation
// (create_claimed with a RunStarter store, create_run + claim_run
// without), the running run's writes (save_checkpoint, append_events). A
// failpoint kills the worker right after the n-th successful call of one
// of them, whichever turn makes it; or, for final_message, right before
// the n-th final answer is written (the run has ended, its end and its
// message are not committed).
var turnOps = []string{"begin_turn", "finish_message", "create_claimed", "create_run", "claim_run",
	"write_batches", "save_checkpoint", "append_events", "final_message"}

// turnStores opens the run store and the chat store of one database.
func turnStores(ctx context.Context, db string) (runtime.Store, chat.Store, func(), error) {
	kind, arg, _ := strings.Cut(db, ":")
	if kind == "sqlite" {
		runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: arg})
		if err != nil {
			return nil, nil, nil, err
		}
		chats, err := chatsqlite.Open(ctx, runs)
		if err != nil {
			_ = runs.Close()
			return nil, nil, nil, err
		}
		return runs, chats, func() { _ = chats.Close(); _ = runs.Close() }, nil
	}
	runs, err := rpostgres.Open(ctx, rpostgres.Config{URL: pgtest.URL(), Schema: arg})
	if err != nil {
		return nil, nil, nil, err
	}
	chats, err := chatpostgres.Open(ctx, runs)
	if err != nil {
		_ = runs.Close()
		return nil, nil, nil, err
	}
	return runs, chats, func() { _ = chats.Close(); _ = runs.Close() }, nil
}

// killer dies right after the n-th successful call of op.
type killer struct {
	op string
	n  int64
	c  atomic.Int64
}

func (k *killer) after(op string, err error) {
	if k != nil && err == nil && op == k.op && k.c.Add(1) == k.n {
		die()
	}
}

// killChats is a chat store whose writes report to the killer.
type killChats struct {
	chat.Store
	k *killer
}

func (s killChats) BeginTurn(ctx context.Context, t chat.Turn) error {
	err := s.Store.BeginTurn(ctx, t)
	s.k.after("begin_turn", err)
	return err
}

// TurnWrite and FinishWrite keep the store a chat.Joiner: a turn that
// starts at once writes its messages in its run's first commit and its
// answer in the commit of its end (both write_batches).
func (s killChats) TurnWrite(t chat.Turn) any { return s.Store.(chat.Joiner).TurnWrite(t) }

func (s killChats) FinishWrite(m *chat.Message) any {
	if m.Status.Settled() {
		// The run has ended; its end (with the answer) is not committed.
		s.k.after("final_message", nil)
	}
	return s.Store.(chat.Joiner).FinishWrite(m)
}

func (s killChats) FinishMessage(ctx context.Context, m *chat.Message) error {
	if m.Status.Settled() {
		s.k.after("final_message", nil)
	}
	err := s.Store.FinishMessage(ctx, m)
	s.k.after("finish_message", err)
	return err
}

// turnWorker is one server process: with a failpoint it opens this
// iteration's chats and sends a turn to each at once, and is killed;
// without, it only recovers, and exits 0 once no run or message is left
// unsettled.
func turnWorker() int {
	ctx := context.Background()
	runs, chats, closeStores, err := turnStores(ctx, os.Getenv(envTurnDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	defer closeStores()
	var k *killer
	fp := os.Getenv(envTurnFP)
	if op, arg, ok := strings.Cut(fp, ":"); ok {
		n, _ := strconv.ParseInt(arg, 10, 64)
		if op == "after" {
			time.AfterFunc(time.Duration(n)*time.Microsecond, die)
		} else {
			k = &killer{op: op, n: n}
		}
	}
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		return 2
	}
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: runs, LeaseTTL: turnLeaseTTL,
		StoreObserver: func(op string, _ time.Duration, err error) { k.after(op, err) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 2
	}
	svc, err := chat.New(chat.Config{Engine: eng, Store: killChats{chats, k}, Control: runcontrol.NewMemory(runcontrol.MemoryConfig{}),
		RecoveryInterval: 50 * time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	defer func() { _ = svc.Shutdown(ctx) }()
	svc.Start(ctx)
	if fp != "" {
		if err := sendTurns(ctx, chats, svc, os.Getenv(envTurnIter)); err != nil {
			fmt.Fprintln(os.Stderr, "turns:", err)
			return 1
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if bad, err := unsettled(ctx, runs, chats); err == nil && len(bad) == 0 {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	bad, err := unsettled(ctx, runs, chats)
	fmt.Fprintln(os.Stderr, "still unsettled after 30s:", bad, err)
	return 1
}

// sendTurns opens this iteration's chats on one graph and sends two
// turns to each at once: one holds the chat's turn and starts, the other
// waits in the chat's queue.
func sendTurns(ctx context.Context, chats chat.Store, svc *chat.Service, iter string) error {
	body, err := json.Marshal(map[string]any{
		"nodes": []map[string]any{
			{"id": "start", "type": "chat_start", "data": map[string]any{}},
			{"id": "helper", "type": "agent", "data": map[string]any{"name": "Helper", "tokenDelayMs": 1}},
			{"id": "out", "type": "chat_output", "data": map[string]any{}},
		},
		"edges": []map[string]any{
			{"id": "e1", "source": "start", "sourceHandle": "message", "target": "helper", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
			{"id": "e2", "source": "helper", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
		},
	})
	if err != nil {
		return err
	}
	g := &chat.Graph{ID: "g_" + iter, Name: "crash", Body: body}
	if err := chats.CreateGraph(ctx, g); err != nil {
		return err
	}
	errs := make(chan error, 2*turnChats)
	var wg sync.WaitGroup
	for i := range turnChats {
		id := fmt.Sprintf("c_%s_%d", iter, i)
		if err := chats.CreateChat(ctx, &chat.Chat{ID: id, GraphID: g.ID}, 0); err != nil {
			return err
		}
		for range 2 {
			wg.Go(func() {
				_, err := svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: id, Content: "one two three four five six"})
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// unsettled lists what a crash could leave half done: runs not ended,
// assistant messages not final.
func unsettled(ctx context.Context, runs runtime.Store, chats chat.Store) ([]string, error) {
	recs, err := runs.(runtime.Inspector).ListRuns(ctx, runtime.RunFilter{Limit: 10000})
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, r := range recs {
		if r.Status == runtime.RunPending || r.Status == runtime.RunRunning {
			bad = append(bad, "run "+r.ID+" "+string(r.Status))
		}
	}
	cs, err := chats.ListChats(ctx, "", chat.Page{})
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		msgs, err := chats.Messages(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if !m.Status.Settled() {
				run := "none"
				if r, err := runs.GetRun(ctx, m.RunID); err == nil {
					run = fmt.Sprintf("%s %s %q", r.ID, r.Status, r.Error)
				}
				bad = append(bad, fmt.Sprintf("message %s %s (run %s)", m.ID, m.Status, run))
			}
		}
	}
	return bad, nil
}

// checkTurns asserts the stores agree after recovery: every message final
// and, for an assistant message, matching the run that wrote it; every run
// ended, with the messages of its turn in its chat.
func checkTurns(t *testing.T, runs runtime.Store, chats chat.Store) (messages, lost int) {
	t.Helper()
	ctx := context.Background()
	cs, err := chats.ListChats(ctx, "", chat.Page{})
	require.NoError(t, err)
	for _, c := range cs {
		msgs, err := chats.Messages(ctx, c.ID)
		require.NoError(t, err)
		for _, m := range msgs {
			messages++
			require.True(t, m.Status.Settled(), "message %s of chat %s left %s", m.ID, c.ID, m.Status)
			require.NotEmpty(t, m.RunID, "message %s has no run", m.ID)
			rec, err := runs.GetRun(ctx, m.RunID)
			require.NoError(t, err, "message %s names run %s", m.ID, m.RunID)
			if m.Role == chat.RoleAssistant {
				require.Equal(t, chat.StatusOf(rec.Status), m.Status, "message %s vs run %s (%s)", m.ID, rec.ID, rec.Error)
				if m.Status == chat.StatusFailed && strings.HasPrefix(m.Error, "lost") {
					lost++
				}
			}
		}
	}
	recs, err := runs.(runtime.Inspector).ListRuns(ctx, runtime.RunFilter{Limit: 10000})
	require.NoError(t, err)
	for _, r := range recs {
		require.True(t, r.Status.Finished() || r.Status == runtime.RunInterrupted, "run %s left %s", r.ID, r.Status)
		require.NotEmpty(t, r.ChatID, "run %s", r.ID)
		for _, attr := range []string{"messageId", "userMessageId"} {
			id, _ := r.Attrs[attr].(string)
			require.NotEmpty(t, id, "run %s has no %s", r.ID, attr)
			m, err := chats.GetMessage(ctx, r.ChatID, id)
			require.NoError(t, err, "run %s without its %s %s", r.ID, attr, id)
			require.Equal(t, r.ID, m.RunID, "%s %s belongs to another run", attr, id)
		}
	}
	return messages, lost
}

func TestTurnCrashSQLite(t *testing.T) {
	t.Parallel()
	testTurnCrash(t, "sqlite:"+filepath.Join(t.TempDir(), "chatgraph.db"))
}

func TestTurnCrashPostgres(t *testing.T) {
	t.Parallel()
	testTurnCrash(t, "postgres:"+pgtest.Schema(t, "turncrash"))
}

// testTurnCrash kills a worker 20 times at random points of its turns'
// start, each time recovers with a fresh worker and checks the stores.
func testTurnCrash(t *testing.T, db string) {
	if testing.Short() {
		t.Skip("crash test re-executes the binary many times")
	}
	const wantKills = 20
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 11))
	t.Logf("seed %d", seed)
	worker := func(iter int, fp string) (killed bool) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envTurnWorker+"=1", envTurnDB+"="+db, envTurnIter+"="+strconv.Itoa(iter), envTurnFP+"="+fp)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return false
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled():
			return true
		}
		t.Fatalf("worker (iteration %d, failpoint %q): %v\n%s", iter, fp, err, out)
		return false
	}
	kills := map[string]int{}
	total := 0
	for iter := 0; total < wantKills && iter < 4*wantKills; iter++ {
		fp := fmt.Sprintf("after:%d", rng.IntN(40_000))
		if rng.IntN(4) > 0 {
			fp = fmt.Sprintf("%s:%d", turnOps[rng.IntN(len(turnOps))], 1+rng.IntN(turnChats))
		}
		if worker(iter, fp) {
			total++
			kills[strings.SplitN(fp, ":", 2)[0]]++
		}
		require.False(t, worker(iter, ""), "the recovering worker was killed")
	}
	require.GreaterOrEqual(t, total, wantKills, "kills by failpoint: %v", kills)
	runs, chats, closeStores, err := turnStores(context.Background(), db)
	require.NoError(t, err)
	defer closeStores()
	messages, lost := checkTurns(t, runs, chats)
	t.Logf("%d kills %v; %d messages consistent", total, kills, messages)
	// A queued turn whose process died before its run began is started by
	// the recovering worker (chat/relaunch.go), not failed.
	require.Zero(t, lost, "queued turns lost before their run began")
}
