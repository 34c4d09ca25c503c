package runtime_test

import (
	"context"
	"errors"
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
