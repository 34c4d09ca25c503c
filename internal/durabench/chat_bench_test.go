package durabench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/runtime/store/sqlite"
)

// The chat recovery benchmark kills a real process running 1,000 chat
// turns (each agent mid-stream) and measures how a fresh chat service on
// the same SQLite file takes them back, as a restarted server does.
const (
	envChatWorker = "DURABENCH_CHAT_WORKER"
	envChatDB     = "DURABENCH_CHAT_DB"
	envChatTurns  = "DURABENCH_CHAT_TURNS"
	chatLeaseTTL  = time.Second // of the process that dies
	// tokenDelayMs paces the echo model: 10 s per token (the most a graph may ask), so every
	// turn is in flight when the worker is killed, and still is while the
	// fresh service takes it back.
	tokenDelayMs = 10_000
)

func TestMain(m *testing.M) {
	if os.Getenv(envChatWorker) == "1" {
		n, _ := strconv.Atoi(os.Getenv(envChatTurns))
		os.Exit(chatWorker(os.Getenv(envChatDB), n))
	}
	os.Exit(m.Run())
}

// chatStack is a chat service as the server builds it, on one SQLite file.
type chatStack struct {
	runs  *sqlite.Store
	chats *chatsqlite.Store
	svc   *chat.Service
}

func openChatStack(path string, leaseTTL time.Duration, pub chat.Publisher) (*chatStack, error) {
	ctx := context.Background()
	runs, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return nil, err
	}
	chats, err := chatsqlite.Open(ctx, runs)
	if err != nil {
		return nil, err
	}
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		return nil, err
	}
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: runs, LeaseTTL: leaseTTL, StoreObserver: observer(nil)})
	if err != nil {
		return nil, err
	}
	svc, err := chat.New(chat.Config{Engine: eng, Store: chats, Control: runcontrol.NewMemory(runcontrol.MemoryConfig{}),
		Publisher: pub, MaxRuns: 2000, DrainTimeout: time.Millisecond})
	if err != nil {
		return nil, err
	}
	return &chatStack{runs: runs, chats: chats, svc: svc}, nil
}

func (s *chatStack) close() {
	_ = s.svc.Shutdown(context.Background())
	_ = s.chats.Close()
	_ = s.runs.Close()
}

// streaming is a Publisher that closes all once every run it was told of
// has sent an event of type t (after the ones before it opened).
type streaming struct {
	t    runtime.EventType
	mu   sync.Mutex
	seen map[string]bool
	want int
	all  chan struct{}
}

func newStreaming(t runtime.EventType, want int) *streaming {
	return &streaming{t: t, seen: map[string]bool{}, want: want, all: make(chan struct{})}
}

func (s *streaming) RunOpened(*chat.LiveRun, int64) {}
func (s *streaming) RunClosed(*chat.LiveRun)        {}
func (s *streaming) RunEvent(r *chat.LiveRun, ev runtime.Event) {
	if s.t != "" && ev.Type != s.t {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seen[r.ID] {
		s.seen[r.ID] = true
		if len(s.seen) == s.want {
			close(s.all)
		}
	}
}

func (s *streaming) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// chatWorker is the server that dies: it sends a turn to each of 1,000
// chats and SIGKILLs itself once every run has started.
func chatWorker(path string, turns int) int {
	pub := newStreaming(runtime.EventRunStarted, turns)
	st, err := openChatStack(path, chatLeaseTTL, pub)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	body, _ := json.Marshal(map[string]any{
		"nodes": []map[string]any{
			{"id": "start", "type": "chat_start", "data": map[string]any{}},
			{"id": "helper", "type": "agent", "data": map[string]any{"name": "Helper", "tokenDelayMs": tokenDelayMs}},
			{"id": "out", "type": "chat_output", "data": map[string]any{}},
		},
		"edges": []map[string]any{
			{"id": "e1", "source": "start", "sourceHandle": "message", "target": "helper", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
			{"id": "e2", "source": "helper", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
		},
	})
	if err := st.chats.CreateGraph(ctx, &chat.Graph{ID: "g", Name: "recovery", Body: body}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var wg sync.WaitGroup
	for i := range turns {
		id := fmt.Sprintf("c%04d", i)
		if err := st.chats.CreateChat(ctx, &chat.Chat{ID: id, GraphID: "g"}, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		wg.Go(func() {
			if _, err := st.svc.Send(ctx, chat.Request{Kind: chat.KindStreamChat, ChatID: id,
				Content: "one two three four five six seven eight"}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		})
	}
	wg.Wait()
	select {
	case <-pub.all:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "the agents never all streamed")
		return 1
	}
}

// killedServer runs a server process with the given number of turns in
// flight and kills it; it returns the path of its SQLite file once the
// process's leases have expired.
func killedServer(tb testing.TB, turns int) string {
	path := filepath.Join(tb.TempDir(), "chatgraph.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envChatWorker+"=1", envChatDB+"="+path, envChatTurns+"="+strconv.Itoa(turns))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || !ee.Sys().(syscall.WaitStatus).Signaled() {
		tb.Fatalf("the worker was to be killed: %v\n%s", err, out)
	}
	time.Sleep(chatLeaseTTL) // the dead process's leases expire
	return path
}

// takeBack starts a fresh chat service on a killed server's file and
// requires its first recovery pass to take back all turns; it returns
// how long that took and how long until every run published an event.
func takeBack(tb testing.TB, path string, turns int) (resumed, streaming time.Duration) {
	pub := newStreaming("", turns)
	st, err := openChatStack(path, 0, pub) // the server's lease TTL
	if err != nil {
		tb.Fatal(err)
	}
	defer st.close()
	start := time.Now()
	n := st.svc.Start(context.Background())
	resumed = time.Since(start)
	select {
	case <-pub.all:
	case <-time.After(time.Minute):
		tb.Fatalf("took back %d runs; %d published since", n, pub.count())
	}
	streaming = time.Since(start)
	if n != turns {
		tb.Fatalf("the first pass took back %d runs of %d", n, turns)
	}
	return resumed, streaming
}

// A restarted server's first recovery pass takes back every run of the
// server that died, more than one claim's batch of them.
func TestChatRecoveryTakesBackEveryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	takeBack(t, killedServer(t, 250), 250)
}

// BenchmarkChatRecovery1000: a server process running 1,000 chat turns is
// killed (kill -9) while every run is in flight; a fresh chat service on
// the same SQLite file (built as the server builds it, sync durability)
// starts. Reports the time until its first recovery pass has taken all
// 1,000 runs back (ms-resumed) and until each has published its next
// event (ms-streaming: the agent's node_retrying, as its stale attempt
// runs again).
func BenchmarkChatRecovery1000(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		path := killedServer(b, 1000)
		b.StartTimer()
		resumed, streaming := takeBack(b, path, 1000)
		b.StopTimer()
		b.ReportMetric(float64(resumed.Milliseconds()), "ms-resumed")
		b.ReportMetric(float64(streaming.Milliseconds()), "ms-streaming")
		b.StartTimer()
	}
}
