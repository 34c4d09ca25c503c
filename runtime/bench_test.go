package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// Benchmarks use trivial node bodies and a no-op sink, as the peer
// measurements they compare with do; they report per-node cost (ns/node,
// allocs/node) or throughput (runs/s). See docs/benchmarks.md.

func benchRegistry() *runtime.Registry {
	reg := runtime.NewRegistry()
	pass := runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
		return runtime.Result{Output: in.First()}, nil
	})
	newPass := func(*runtime.Node) (runtime.Executor, error) { return pass, nil }
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	reg.MustRegister(runtime.NodeType{Name: "src", Entry: true, Inline: true, Ports: []runtime.Port{out}, New: newPass})
	reg.MustRegister(runtime.NodeType{Name: "pass", Inline: true, New: newPass, Ports: []runtime.Port{
		{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}, out}})
	// work is pass without the Inline promise: each node on a worker of its own.
	reg.MustRegister(runtime.NodeType{Name: "work", New: newPass, Ports: []runtime.Port{
		{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}, out}})
	return reg
}

func chainGraph(id string, n int) *runtime.Graph {
	g := &runtime.Graph{ID: id, PlanVersion: 1, Nodes: make([]runtime.Node, n), Edges: make([]runtime.Edge, n-1)}
	g.Nodes[0] = runtime.Node{ID: "n0", Type: "src"}
	for i := 1; i < n; i++ {
		g.Nodes[i] = runtime.Node{ID: fmt.Sprintf("n%d", i), Type: "pass"}
		g.Edges[i-1] = runtime.Edge{ID: fmt.Sprintf("e%d", i), Source: fmt.Sprintf("n%d", i-1), SourceHandle: "out",
			Target: fmt.Sprintf("n%d", i), TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}
	}
	return g
}

func fanGraph(width int) *runtime.Graph { return fanGraphOf("fan", "pass", width) }

// fanGraphOf is start -> width nodes of type typ -> join.
func fanGraphOf(id, typ string, width int) *runtime.Graph {
	g := &runtime.Graph{ID: id, PlanVersion: 1}
	g.Nodes = append(g.Nodes, runtime.Node{ID: "s", Type: "src"}, runtime.Node{ID: "join", Type: "pass"})
	for i := 0; i < width; i++ {
		id := fmt.Sprintf("b%d", i)
		g.Nodes = append(g.Nodes, runtime.Node{ID: id, Type: typ})
		g.Edges = append(g.Edges,
			runtime.Edge{ID: "a" + id, Source: "s", SourceHandle: "out", Target: id, TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}},
			runtime.Edge{ID: "j" + id, Source: id, SourceHandle: "out", Target: "join", TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}})
	}
	return g
}

var noop = runtime.SinkFunc(func(runtime.Event) {})

func benchEngine(b *testing.B, store bool, lim runtime.Limits) *runtime.Engine {
	cfg := runtime.Config{Registry: benchRegistry(), Limits: lim}
	if store {
		cfg.Store = memory.New()
	}
	e, err := runtime.NewEngine(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func storeModes(b *testing.B, fn func(b *testing.B, store bool)) {
	b.Run("store=off", func(b *testing.B) { fn(b, false) })
	b.Run("store=memory", func(b *testing.B) { fn(b, true) })
}

func mustRun(b *testing.B, e *runtime.Engine, p *runtime.Plan) {
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Plan: p, Input: "x", Sink: noop})
	if err != nil || res.Status != runtime.RunCompleted {
		b.Fatalf("run: %v %v", err, res)
	}
}

// loopRuns compiles g and runs it b.N times, reporting the time per node
// (nodes per run); it returns the plan.
func loopRuns(b *testing.B, e *runtime.Engine, g *runtime.Graph, nodes int) *runtime.Plan {
	p, err := e.Compile(g)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		mustRun(b, e, p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
	return p
}

// BenchmarkW1Chain100: a chain of 100 nodes, per-node overhead.
func BenchmarkW1Chain100(b *testing.B) {
	storeModes(b, func(b *testing.B, store bool) {
		e := benchEngine(b, store, runtime.Limits{})
		p := loopRuns(b, e, chainGraph("w1", 100), 100)
		b.ReportMetric(testing.AllocsPerRun(20, func() { mustRun(b, e, p) })/100, "allocs/node")
	})
}

// BenchmarkW2FanOut50: start -> 50 parallel nodes -> join, per run.
func BenchmarkW2FanOut50(b *testing.B) {
	storeModes(b, func(b *testing.B, store bool) {
		loopRuns(b, benchEngine(b, store, runtime.Limits{}), fanGraph(50), 52)
	})
}

// BenchmarkW2FanOut50Workers: W2 with parallel nodes of a type that is not
// Inline, so each runs on a worker goroutine of its own.
func BenchmarkW2FanOut50Workers(b *testing.B) {
	loopRuns(b, benchEngine(b, false, runtime.Limits{}), fanGraphOf("fanw", "work", 50), 52)
}

// BenchmarkW3Throughput: 5-node chains, 50 runs in flight at once.
func BenchmarkW3Throughput(b *testing.B) {
	storeModes(b, func(b *testing.B, store bool) {
		e := benchEngine(b, store, runtime.Limits{})
		p, err := e.Compile(chainGraph("w3", 5))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		work := make(chan struct{}, 64)
		for w := 0; w < 50; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					mustRun(b, e, p)
				}
			}()
		}
		for i := 0; i < b.N; i++ {
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		el := time.Since(start)
		b.ReportMetric(float64(b.N)/el.Seconds(), "runs/s")
		b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/5, "ns/node")
	})
}

func benchCompile(b *testing.B, n int) {
	e := benchEngine(b, false, runtime.Limits{MaxNodes: n, MaxEdges: n})
	g := chainGraph("", n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.Compile(g); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
}

// BenchmarkW5Compile10k: validate + compile a 10,000-node chain.
func BenchmarkW5Compile10k(b *testing.B) { benchCompile(b, 10000) }

// BenchmarkW5Compile100k: validate + compile a 100,000-node chain.
func BenchmarkW5Compile100k(b *testing.B) { benchCompile(b, 100000) }

// BenchmarkW5FirstRun10k: compile and run a 10,000-node chain once, cold.
func BenchmarkW5FirstRun10k(b *testing.B) {
	e := benchEngine(b, false, runtime.Limits{MaxNodes: 10000, MaxEdges: 10000})
	g := chainGraph("", 10000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := e.Compile(g)
		if err != nil {
			b.Fatal(err)
		}
		mustRun(b, e, p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/node")
}

// BenchmarkStoreObserver: W1 on the memory store, without and with a
// StoreObserver (an atomic add per call): what timing every store call the
// engine makes costs.
func BenchmarkStoreObserver(b *testing.B) {
	for _, observed := range []bool{false, true} {
		b.Run(fmt.Sprintf("observed=%t", observed), func(b *testing.B) {
			var calls atomic.Int64
			cfg := runtime.Config{Registry: benchRegistry(), Store: memory.New()}
			if observed {
				cfg.StoreObserver = func(string, time.Duration, error) { calls.Add(1) }
			}
			e, err := runtime.NewEngine(cfg)
			if err != nil {
				b.Fatal(err)
			}
			loopRuns(b, e, chainGraph("obs", 100), 100)
			if observed {
				b.ReportMetric(float64(calls.Load())/float64(b.N)/100, "calls/node")
			}
		})
	}
}
