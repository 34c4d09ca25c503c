package runtime_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// A run whose only in-flight node ignores its context still ends
// cancelled once the grace period is over, and the executor call left
// running is counted until it returns.
func TestCancelWinsOverAnExecutorThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	release := make(chan struct{})
	entered := make(chan struct{})
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Ports: []runtime.Port{{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				return runtime.Result{}, nil
			}), nil
		}})
	reg.MustRegister(runtime.NodeType{Name: "stubborn", Ports: []runtime.Port{{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				close(entered)
				<-release // ignores ctx
				return runtime.Result{}, nil
			}), nil
		}})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, CancelGrace: 50 * time.Millisecond})
	require.NoError(t, err)
	// One node in flight and nothing else ready: the case a dispatcher
	// running the node itself could never leave.
	g := &runtime.Graph{ID: "g", Nodes: []runtime.Node{{ID: "s", Type: "start"}, {ID: "a", Type: "stubborn"}},
		Edges: []runtime.Edge{{ID: "e1", Source: "s", SourceHandle: "out", Target: "a", TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}}}
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { <-entered; cancel(errors.New("stop pressed")) }()
	type result struct {
		res *runtime.RunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.Invoke(ctx, runtime.RunRequest{Graph: g})
		done <- result{res, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(30 * time.Second): // a bound for a hung run, not a timing assertion
		close(release)
		t.Fatal("the run did not end while its executor ignored the cancel")
	}
	require.NoError(t, got.err)
	require.Equal(t, runtime.RunCancelled, got.res.Status)
	require.Equal(t, runtime.NodeCancelled, got.res.NodeStatus("a"))
	require.EqualValues(t, 1, e.AbandonedExecutors(), "the executor still running is counted")

	close(release)
	require.Eventually(t, func() bool { return e.AbandonedExecutors() == 0 }, 10*time.Second, 5*time.Millisecond,
		"the count drops once the executor returns")
}

// A node with a timeout that ignores its context is abandoned at its
// deadline plus the grace and counted until it returns.
func TestTimedOutExecutorIsCounted(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	release := make(chan struct{})
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Ports: []runtime.Port{{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				<-release
				return runtime.Result{}, nil
			}), nil
		}})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, CancelGrace: 20 * time.Millisecond})
	require.NoError(t, err)
	g := &runtime.Graph{ID: "g", Nodes: []runtime.Node{{ID: "s", Type: "start", Data: []byte(`{"timeoutMs":10}`)}}}
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g})
	require.NoError(t, err)
	require.Equal(t, runtime.RunFailed, res.Status)
	require.EqualValues(t, 1, e.AbandonedExecutors())
	close(release)
	require.Eventually(t, func() bool { return e.AbandonedExecutors() == 0 }, 10*time.Second, 5*time.Millisecond)
}

// A run longer than MaxRunDuration is cancelled with ErrRunTimeLimit.
func TestRunWallClockLimit(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, newMem(), func(c *runtime.Config) { c.MaxRunDuration = 50 * time.Millisecond })
	g := newGraph("g").node("s", "start").node("a", "step", `{"hang":true}`).node("b", "step").flow("s", "a").flow("a", "b").build()
	var c collect
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, Sink: &c})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.ErrorIs(t, res.Err, runtime.ErrRunTimeLimit)
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("b"))
	checkLifecycle(t, c.events())
	last := c.events()[len(c.events())-1]
	require.Equal(t, runtime.EventRunCancelled, last.Type)
	require.Equal(t, runtime.ErrRunTimeLimit.Error(), last.Data.(*runtime.RunCancelledData).Cause)
}

// Nodes of Inline types that run beside others share workers, but never
// one held by an executor that blocks: here the blocking nodes start
// first (the Inline ones come a step later, behind "p") and wait until
// every Inline node has run.
func TestInlineNodesNeverWaitBehindABlockingExecutor(t *testing.T) {
	t.Parallel()
	const width = 6
	reg := runtime.NewRegistry()
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	in := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow}
	pass := func(*runtime.Node) (runtime.Executor, error) {
		return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
			return runtime.Result{Output: "x"}, nil
		}), nil
	}
	var mu sync.Mutex
	ran := 0
	allRan := make(chan struct{})
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Inline: true, Ports: []runtime.Port{out}, New: pass})
	reg.MustRegister(runtime.NodeType{Name: "mid", Inline: true, Ports: []runtime.Port{in, out}, New: pass})
	reg.MustRegister(runtime.NodeType{Name: "wait", Ports: []runtime.Port{in, out},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(ctx context.Context, _ *runtime.Node, _ runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
				select {
				case <-allRan:
					return runtime.Result{Output: "x"}, nil
				case <-ctx.Done():
					return runtime.Result{}, context.Cause(ctx)
				}
			}), nil
		}})
	reg.MustRegister(runtime.NodeType{Name: "brief", Inline: true, Ports: []runtime.Port{in, out},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				mu.Lock()
				if ran++; ran == width {
					close(allRan)
				}
				mu.Unlock()
				return runtime.Result{Output: "x"}, nil
			}), nil
		}})
	b := newGraph("brief").node("s", "start").node("p", "mid").flow("s", "p")
	for i := 0; i < width; i++ {
		b.node(fmt.Sprintf("w%d", i), "wait").flow("s", fmt.Sprintf("w%d", i))
		b.node(fmt.Sprintf("b%d", i), "brief").flow("p", fmt.Sprintf("b%d", i))
	}
	e, err := runtime.NewEngine(runtime.Config{Registry: reg})
	require.NoError(t, err)
	// The bound is for a run that hangs, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sink := &collect{}
	res, err := e.Invoke(ctx, runtime.RunRequest{Graph: b.build(), Sink: sink})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status, "an Inline node waited behind a blocking executor")
	for i := 0; i < width; i++ {
		require.Equal(t, runtime.NodeSucceeded, res.NodeStatus(fmt.Sprintf("w%d", i)))
		require.Equal(t, runtime.NodeSucceeded, res.NodeStatus(fmt.Sprintf("b%d", i)))
	}
	checkLifecycle(t, sink.events())
}

// Event times follow seq order although the dispatcher stamps a step's
// events with one clock reading while executors on workers emit their own.
func TestEventTimesNeverGoBack(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	in := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Inline: true, Ports: []runtime.Port{out},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				return runtime.Result{Output: "x"}, nil
			}), nil
		}})
	reg.MustRegister(runtime.NodeType{Name: "chatty", Ports: []runtime.Port{in, out},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				for i := 0; i < 20; i++ {
					if err := fc.Emit("chatty_said", i); err != nil {
						return runtime.Result{}, err
					}
				}
				return runtime.Result{Output: "x"}, nil
			}), nil
		}})
	b := newGraph("times").node("s", "start").node("j", "chatty")
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("c%d", i)
		b.node(id, "chatty").flow("s", id).flow(id, "j")
	}
	e, err := runtime.NewEngine(runtime.Config{Registry: reg})
	require.NoError(t, err)
	for range 20 {
		sink := &collect{}
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: b.build(), Sink: sink})
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, res.Status)
		checkLifecycle(t, sink.events()) // times never go back
	}
}

// GlobalMaxParallel bounds the executors of all runs at once, whether they
// run on workers or (Inline, alone) on their run's dispatcher, which hands
// its slot from one node of a chain to the next.
func TestGlobalMaxParallelBoundsEveryRun(t *testing.T) {
	t.Parallel()
	const limit = 2
	var running, most atomic.Int32
	body := func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
		now := running.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		for range 50 {
			goruntime.Gosched() // stay a while, so overlaps happen
		}
		running.Add(-1)
		return runtime.Result{Output: "x"}, nil
	}
	newBody := func(*runtime.Node) (runtime.Executor, error) { return runtime.ExecutorFunc(body), nil }
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	in := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}
	reg := runtime.NewRegistry()
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Inline: true, Ports: []runtime.Port{out}, New: newBody})
	reg.MustRegister(runtime.NodeType{Name: "inline", Inline: true, Ports: []runtime.Port{in, out}, New: newBody})
	reg.MustRegister(runtime.NodeType{Name: "work", Ports: []runtime.Port{in, out}, New: newBody})
	chain := newGraph("chain").node("s", "start")
	for i := 0; i < 6; i++ {
		chain.node(fmt.Sprintf("n%d", i), "inline")
		if i == 0 {
			chain.flow("s", "n0")
		} else {
			chain.flow(fmt.Sprintf("n%d", i-1), fmt.Sprintf("n%d", i))
		}
	}
	fan := newGraph("fan").node("s", "start").node("j", "inline")
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("w%d", i)
		fan.node(id, "work").flow("s", id).flow(id, "j")
		id = fmt.Sprintf("b%d", i)
		fan.node(id, "inline").flow("s", id).flow(id, "j")
	}
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, GlobalMaxParallel: limit})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		g := chain.build()
		if i%2 == 1 {
			g = fan.build()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g})
				if err != nil || res.Status != runtime.RunCompleted {
					t.Errorf("run: %v %v", err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int32(limit), "more executors at once than GlobalMaxParallel")
	require.Equal(t, int32(limit), most.Load(), "the runs overlapped up to the bound")
}
