package chat_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// closedRuns is a Publisher that drops the events and tells who waits
// for a run that it has closed.
type closedRuns struct {
	mu     sync.Mutex
	closed map[string]chan struct{}
}

func (p *closedRuns) wait(runID string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.closed[runID]
	if ch == nil {
		ch = make(chan struct{})
		p.closed[runID] = ch
	}
	return ch
}

func (p *closedRuns) RunOpened(*chat.LiveRun, int64)        {}
func (p *closedRuns) RunEvent(*chat.LiveRun, runtime.Event) {}
func (p *closedRuns) RunClosed(run *chat.LiveRun) {
	close(p.wait(run.ID))
}

// done waits until runID has closed (before this call or after).
func (p *closedRuns) done(runID string) {
	<-p.wait(runID)
	p.mu.Lock()
	delete(p.closed, runID)
	p.mu.Unlock()
}

// BenchmarkTurns: what a chat turn costs the service, the kernel and
// the stores, with no transport: 16 clients on one SQLite file (sync
// durability), each sending turn after turn of a one-word echo answer,
// each on a new chat, and waiting for its run to close. cpu-µs/turn is
// the process's CPU per turn.
func BenchmarkTurns(b *testing.B) { benchTurns(b, false) }

// BenchmarkTurnsIdempotent: BenchmarkTurns with each call idempotent (a
// clientRequestId the chat keeps): what looking for the id before the
// turn and keeping it with the turn add.
func BenchmarkTurnsIdempotent(b *testing.B) { benchTurns(b, true) }

func benchTurns(b *testing.B, idempotent bool) {
	const clients = 16
	ctx := context.Background()
	runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(b.TempDir(), "chatgraph.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer runs.Close()
	cs, err := chatsqlite.Open(ctx, runs)
	if err != nil {
		b.Fatal(err)
	}
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		b.Fatal(err)
	}
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: runs, Durability: runtime.DurabilitySync})
	if err != nil {
		b.Fatal(err)
	}
	pub := &closedRuns{closed: map[string]chan struct{}{}}
	svc, err := chat.New(chat.Config{Engine: eng, Store: cs, Control: runcontrol.NewMemory(runcontrol.MemoryConfig{}),
		Publisher: pub, DrainTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Shutdown(ctx)
	body := agentGraph(`{"name":"Helper"}`)
	if err := cs.CreateGraph(ctx, &chat.Graph{ID: "g_bench", Name: "bench", Body: body}); err != nil {
		b.Fatal(err)
	}
	// A chat of its own for each turn, as in the latency benchmarks: the
	// turn reads no history.
	turns := make(chan string, b.N)
	for i := range b.N {
		id := fmt.Sprintf("c_bench%07d", i)
		if err := cs.CreateChat(ctx, &chat.Chat{ID: id, GraphID: "g_bench"}, 0); err != nil {
			b.Fatal(err)
		}
		turns <- id
	}
	close(turns)
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for id := range turns {
				req := chat.Request{Kind: chat.KindStreamChat, ChatID: id, Content: "hello"}
				if idempotent {
					req.ClientRequestID, req.Idempotent = "req-"+id, true
				}
				tk, err := svc.Send(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				pub.done(tk.RunID)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/turn")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
