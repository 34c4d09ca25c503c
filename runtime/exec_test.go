package runtime_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

func invoke(t *testing.T, e *runtime.Engine, g *runtime.Graph, mod ...func(*runtime.RunRequest)) (*runtime.RunResult, *collect) {
	t.Helper()
	var c collect
	req := runtime.RunRequest{Graph: g, Input: "in", Sink: &c}
	for _, m := range mod {
		m(&req)
	}
	res, err := e.Invoke(context.Background(), req)
	require.NoError(t, err)
	checkLifecycle(t, c.events())
	return res, &c
}

func TestDisconnectedNodesNeverRun(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("a", "step").node("lone", "step").node("x", "step").node("y", "step").
		flow("s", "a").flow("x", "y").build()
	res, c := invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status)
	for _, id := range []string{"lone", "x", "y"} {
		require.Zero(t, k.execCount(id))
		require.Empty(t, c.types(id), "inactive node %s has no events", id)
	}
	start := c.events()[0].Data.(*runtime.RunStartedData)
	require.Equal(t, []string{"s", "a"}, start.ActiveNodeIDs)
}

func TestCycleOutsideActivePartDoesNotFailRun(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("a", "step").node("c1", "step").node("c2", "step").
		flow("s", "a").flow("c1", "c2").flow("c2", "c1").build()
	p, err := e.Compile(g)
	require.NoError(t, err)
	require.Len(t, p.Diagnostics().Warnings(), 1)
	res, _ := invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status)
	// An entry inside the warned part cannot start.
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: g, EntryNodeIDs: []string{"c1"}})
	var ge *runtime.GraphError
	require.ErrorAs(t, err, &ge)
	require.Equal(t, runtime.CodeFlowCycle, ge.Diagnostics[0].Code)
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: g, EntryNodeIDs: []string{"nope"}})
	require.ErrorIs(t, err, runtime.ErrUnknownEntry)
}

func TestConditionsAndJoins(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	// s -> r -(output == "left")-> L -> j ; r -(output == "right")-> R -> j
	mk := func(id, join string) *runtime.Graph {
		return newGraph(id).node("s", "start").node("r", "step", `{"output":"left"}`).node("L", "step").node("R", "step").
			node("j", "step", `{"join":"`+join+`"}`).node("after", "step").
			flow("s", "r").flow("r", "L", `output == "left"`).flow("r", "R", `output == "right"`).
			flow("L", "j").flow("R", "j").flow("j", "after").build()
	}
	res, c := invoke(t, e, mk("any", "any"))
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("L"))
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("R"))
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("j"))
	require.Equal(t, 1, k.execCount("j"), "join any after a router runs exactly once")
	out, _ := res.Output("j")
	require.Equal(t, "j(L(left))", out)
	require.Equal(t, []runtime.EventType{runtime.EventNodeSkipped}, c.types("R"))

	res, c = invoke(t, e, mk("all", "all"))
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("j"), "join all with a dead branch is skipped")
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("after"), "skips propagate")
	require.Equal(t, 1, k.execCount("j"), "j ran only in the any graph")
	require.Equal(t, []runtime.EventType{runtime.EventNodeSkipped}, c.types("after"))
}

// Runs of one plan reuse the dispatcher state of runs that ended (which
// edges were taken, with what, what each node still waits for, which
// nodes are ready): a run must see nothing of an earlier one. Here each
// run takes other edges, starts from another entry or stops with a node
// still ready, unlike the run before it.
func TestRunsOfOnePlanSeeNothingOfEarlierRuns(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	// s -(output == "s(a)")-> A -> j ; s -> B -> j ; j joins any;
	// s -(output == "s(f)")-> F, which fails first (priority), one node
	// at a time: the run ends failed with B still ready.
	p, err := e.Compile(newGraph("reuse").node("s", "start").node("A", "step").node("B", "step").
		node("j", "step", `{"join":"any"}`).node("F", "step", `{"fail":1000000000,"priority":1}`).
		flow("s", "A", `output == "s(a)"`).flow("s", "B").flow("A", "j").flow("B", "j").
		flow("s", "F", `output == "s(f)"`).build())
	require.NoError(t, err)
	cases := []struct {
		input   string
		entries []string
		status  runtime.RunStatus
		a, b, j string // their final status ("": not active), j's output
	}{
		{"a", nil, runtime.RunCompleted, "succeeded", "succeeded", "j(A(s(a)))(B(s(a)))"},
		{"b", nil, runtime.RunCompleted, "skipped", "succeeded", "j(B(s(b)))"},
		{"f", nil, runtime.RunFailed, "skipped", "skipped", ""},
		{"a", nil, runtime.RunCompleted, "succeeded", "succeeded", "j(A(s(a)))(B(s(a)))"},
		{"c", []string{"B"}, runtime.RunCompleted, "", "succeeded", "j(B(c))"}, // A is not even active
	}
	// check runs case i; assert, not require: it also runs off the test's goroutine.
	check := func(i int, sink runtime.EventSink) bool {
		c := cases[i%len(cases)]
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Plan: p, Input: c.input, EntryNodeIDs: c.entries,
			Options: runtime.RunOptions{MaxParallel: 1}, Sink: sink})
		if !assert.NoError(t, err) {
			return false
		}
		out, _ := res.Output("j")
		if out == nil {
			out = ""
		}
		return assert.Equal(t, c.status, res.Status, "case %d", i) &&
			assert.Equal(t, runtime.NodeStatus(c.a), res.NodeStatus("A"), "case %d", i) &&
			assert.Equal(t, runtime.NodeStatus(c.b), res.NodeStatus("B"), "case %d", i) &&
			assert.Equal(t, c.j, out, "case %d", i)
	}
	for i := range 4 * len(cases) {
		var sink collect
		require.True(t, check(i, &sink))
		checkLifecycle(t, sink.events())
	}
	// And runs in flight at once never share it.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if !check(g+i, nil) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Runs of one plan also reuse the worker queues of ended runs, once the
// last worker of the run has exited. An executor the kernel abandoned
// still returns into its ended run's queues, after that run's end: the
// next runs must see nothing of it (here: a completion of a, which would
// end a later run before its s completed). Not parallel: with one P the
// queues the abandoned executor's worker leaves are surely the ones the
// next run takes (a sync.Pool keeps an item per P).
func TestRunsOfOnePlanSeeNothingOfAnAbandonedExecutor(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	reg := runtime.NewRegistry()
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	flowOut := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	pass := func(n *runtime.Node) (runtime.Executor, error) {
		return runtime.ExecutorFunc(func(_ context.Context, n *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
			if n.Type == "work" && in.First() == "hang" {
				<-release // ignores its context
			}
			return runtime.Result{Output: in.First()}, nil
		}), nil
	}
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Ports: []runtime.Port{flowOut}, New: pass})
	reg.MustRegister(runtime.NodeType{Name: "work", Ports: []runtime.Port{{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow}, flowOut}, New: pass})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, CancelGrace: 20 * time.Millisecond})
	require.NoError(t, err)
	p, err := e.Compile(newGraph("abandon").node("s", "start").node("a", "work").flow("s", "a").build())
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res, err := e.Invoke(ctx, runtime.RunRequest{Plan: p, Input: "hang"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Equal(t, runtime.NodeCancelled, res.NodeStatus("a"))
	require.Equal(t, int64(1), e.AbandonedExecutors())
	once.Do(func() { close(release) }) // a returns, into the ended run's queues
	require.Eventually(t, func() bool { return e.AbandonedExecutors() == 0 }, 5*time.Second, time.Millisecond)

	for i := range 50 {
		var sink collect
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Plan: p, Input: i, Sink: &sink})
		require.NoError(t, err)
		checkLifecycle(t, sink.events())
		require.Equal(t, runtime.RunCompleted, res.Status, "run %d", i)
		out, ok := res.Output("a")
		require.True(t, ok, "run %d: a succeeded", i)
		require.Equal(t, i, out)
	}
}

func TestFailureRouting(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("bad", "step", `{"fail":99,"code":"nope"}`).
		node("ok", "step").node("onfail", "step").node("always", "step").
		flow("s", "bad").flow("bad", "ok").flow("bad", "onfail", "on_failure").flow("bad", "always", "always").build()
	res, c := invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status, "a handled failure does not fail the run")
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("ok"))
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("onfail"))
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("always"))
	out, _ := res.Output("onfail")
	require.Contains(t, out, "code:nope")
	var failed *runtime.NodeFailedData
	for _, ev := range c.events() {
		if ev.Type == runtime.EventNodeFailed {
			failed = ev.Data.(*runtime.NodeFailedData)
		}
	}
	require.True(t, failed.Handled)
	require.Equal(t, "nope", failed.Code)

	// continueOnError: success edges carry the error onwards.
	g = newGraph("g2").node("s", "start").node("bad", "step", `{"fail":99,"continueOnError":true}`).node("next", "step").
		flow("s", "bad").flow("bad", "next").build()
	res, _ = invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status)
	out, _ = res.Output("next")
	require.Contains(t, out, "bad failed attempt")
}

func TestFailFastCancelsSiblings(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("slow", "step", `{"hang":true}`).node("bad", "step", `{"fail":1}`).
		node("after", "step").node("later", "step").flow("s", "slow").flow("s", "bad").flow("slow", "after").flow("bad", "later").build()
	res, c := invoke(t, e, g)
	require.Equal(t, runtime.RunFailed, res.Status)
	var ne *runtime.NodeError
	require.ErrorAs(t, res.Err, &ne)
	require.Equal(t, "bad", ne.NodeID)
	require.Equal(t, runtime.NodeCancelled, res.NodeStatus("slow"))
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("after"))
	types := c.types("slow")
	require.Equal(t, runtime.EventNodeCancelled, types[len(types)-1])
	for _, ev := range c.events() {
		if ev.Type == runtime.EventNodeCancelled {
			require.Contains(t, ev.Data.(*runtime.NodeCancelledData).Cause, "another node failed")
		}
		if ev.Type == runtime.EventRunFailed {
			d := ev.Data.(*runtime.RunFailedData)
			require.Equal(t, "bad", d.NodeID)
			require.Equal(t, []string{"bad"}, d.FailedNodes)
		}
	}
}

func TestFailOpenFinishesIndependentBranches(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("bad", "step", `{"fail":1}`).node("b1", "step").
		node("good", "step", `{"sleepMs":20}`).node("g2", "step").
		flow("s", "bad").flow("bad", "b1").flow("s", "good").flow("good", "g2").build()
	res, _ := invoke(t, e, g, func(r *runtime.RunRequest) { r.Options.FailurePolicy = runtime.FailOpen })
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("g2"), "independent branch finished")
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("b1"))

	// maxNodeFailures turns fail_open into fail_fast after N failures.
	g = newGraph("g3").node("s", "start").node("f1", "step", `{"fail":1}`).node("f2", "step", `{"fail":1,"sleepMs":5}`).
		node("slow", "step", `{"hang":true}`).flow("s", "f1").flow("s", "f2").flow("s", "slow").build()
	res, _ = invoke(t, e, g, func(r *runtime.RunRequest) {
		r.Options = runtime.RunOptions{FailurePolicy: runtime.FailOpen, MaxNodeFailures: 2}
	})
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, runtime.NodeCancelled, res.NodeStatus("slow"))
}

func TestRetriesAndBackoff(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").
		node("flaky", "step", `{"fail":2,"code":"temp","retry":{"maxAttempts":3,"initialDelayMs":1,"backoff":"exponential","retryableErrors":["temp"]}}`).
		node("hard", "step", `{"fail":5,"code":"fatal","retry":{"maxAttempts":3,"retryableErrors":["temp"]}}`).
		node("after", "step").
		flow("s", "flaky").flow("flaky", "after").flow("s", "hard").build()
	res, c := invoke(t, e, g, func(r *runtime.RunRequest) { r.Options.FailurePolicy = runtime.FailOpen })
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("flaky"))
	require.Equal(t, 3, k.execCount("flaky"))
	require.Equal(t, []runtime.EventType{runtime.EventNodeStarted, runtime.EventNodeRetrying, runtime.EventNodeRetrying, runtime.EventNodeCompleted}, c.types("flaky"))
	var attempts []int
	for _, ev := range c.events() {
		if ev.NodeID == "flaky" && ev.Type == runtime.EventNodeRetrying {
			d := ev.Data.(*runtime.NodeRetryingData)
			attempts = append(attempts, d.Attempt)
			require.Equal(t, "temp", d.Code)
			require.Equal(t, d.Attempt, ev.Attempt)
		}
		if ev.NodeID == "flaky" && ev.Type == runtime.EventNodeCompleted {
			require.Equal(t, 3, ev.Attempt)
		}
	}
	require.Equal(t, []int{2, 3}, attempts)
	require.Equal(t, runtime.NodeFailed, res.NodeStatus("hard"))
	require.Equal(t, 1, k.execCount("hard"), "non-retryable code is not retried")
}

func TestRetryDelayTable(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	cases := []struct {
		name string
		p    runtime.RetryPolicy
		rnd  float64
		want []time.Duration // delays before retry 1, 2, 3, 4
	}{
		{"fixed", runtime.RetryPolicy{InitialDelayMs: 10, Backoff: runtime.BackoffFixed}, 0, []time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms}},
		{"linear", runtime.RetryPolicy{InitialDelayMs: 10, Backoff: runtime.BackoffLinear}, 0, []time.Duration{10 * ms, 20 * ms, 30 * ms, 40 * ms}},
		{"exponential", runtime.RetryPolicy{InitialDelayMs: 10, Backoff: runtime.BackoffExponential}, 0, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms}},
		{"default is exponential", runtime.RetryPolicy{InitialDelayMs: 5}, 0, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms}},
		{"clamped", runtime.RetryPolicy{InitialDelayMs: 10, MaxDelayMs: 25}, 0, []time.Duration{10 * ms, 20 * ms, 25 * ms, 25 * ms}},
		{"jitter lower bound", runtime.RetryPolicy{InitialDelayMs: 100, Backoff: runtime.BackoffFixed, Jitter: 0.5}, 0.999999, []time.Duration{50 * ms, 50 * ms, 50 * ms, 50 * ms}},
		{"jitter upper bound", runtime.RetryPolicy{InitialDelayMs: 100, Backoff: runtime.BackoffFixed, Jitter: 0.5}, 0, []time.Duration{100 * ms, 100 * ms, 100 * ms, 100 * ms}},
	}
	for _, tc := range cases {
		for i, want := range tc.want {
			got := tc.p.Delay(i+1, tc.rnd)
			require.InDelta(t, float64(want), float64(got), float64(time.Microsecond), "%s retry %d", tc.name, i+1)
		}
	}
	// Jitter stays within [d*(1-j), d] for any random draw; huge exponents do not overflow.
	p := runtime.RetryPolicy{InitialDelayMs: 1000, Jitter: 0.3, MaxDelayMs: 60000}
	for i := 0; i < 1000; i++ {
		d := p.Delay(1+i%70, float64(i)/1000)
		require.GreaterOrEqual(t, d, 0*ms)
		require.LessOrEqual(t, d, 60000*ms)
	}
	require.Greater(t, (&runtime.RetryPolicy{InitialDelayMs: 1}).Delay(200, 0), time.Duration(0))
	require.True(t, (&runtime.RetryPolicy{}).Retryable("anything"))
	require.False(t, (&runtime.RetryPolicy{RetryableErrors: []string{"a"}}).Retryable("b"))
}

func TestTimeoutAndPanic(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	var st = newMem()
	e := k.engine(t, st)
	g := newGraph("g").node("s", "start").node("slow", "step", `{"hang":true,"timeoutMs":20,"retry":{"maxAttempts":2}}`).
		node("boom", "step", `{"panic":true}`).flow("s", "slow").flow("s", "boom").build()
	res, c := invoke(t, e, g, func(r *runtime.RunRequest) { r.Options.FailurePolicy = runtime.FailOpen; r.RunID = "r-timeout" })
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, 2, k.execCount("slow"), "timed out attempts are retried")
	for _, ev := range c.events() {
		if ev.Type == runtime.EventNodeFailed {
			d := ev.Data.(*runtime.NodeFailedData)
			switch ev.NodeID {
			case "slow":
				require.Equal(t, runtime.ErrCodeTimeout, d.Code)
			case "boom":
				require.Equal(t, runtime.ErrCodePanic, d.Code)
				require.NotContains(t, d.Error, "goroutine", "no stack on the wire")
			}
		}
	}
	cps, err := st.Checkpoints(context.Background(), "r-timeout")
	require.NoError(t, err)
	for _, cp := range cps {
		if cp.NodeID == "boom" {
			require.Contains(t, cp.ErrorTrace, "goroutine", "the stack is kept in the checkpoint")
		}
	}
}

// stubborn ignores cancellation; the kernel must still end the run.
func TestAbandonsExecutorsThatIgnoreCancel(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	release := make(chan struct{})
	defer close(release)
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, Ports: []runtime.Port{{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				return runtime.Result{}, nil
			}), nil
		}})
	reg.MustRegister(runtime.NodeType{Name: "stubborn", Ports: []runtime.Port{{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				<-release
				return runtime.Result{}, fc.Emit("late", nil)
			}), nil
		}})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, CancelGrace: 50 * time.Millisecond})
	require.NoError(t, err)
	g := &runtime.Graph{ID: "g", Nodes: []runtime.Node{{ID: "s", Type: "start"}, {ID: "a", Type: "stubborn"}, {ID: "b", Type: "stubborn"}},
		Edges: []runtime.Edge{{ID: "e1", Source: "s", SourceHandle: "out", Target: "a", TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}},
			{ID: "e2", Source: "s", SourceHandle: "out", Target: "b", TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}}}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 30*time.Millisecond, errors.New("user pressed stop"))
	defer cancel()
	var c collect
	res, err := e.Invoke(ctx, runtime.RunRequest{Graph: g, Sink: &c})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.ErrorContains(t, res.Err, "user pressed stop")
	checkLifecycle(t, c.events())
	require.Equal(t, runtime.NodeCancelled, res.NodeStatus("a"))
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, newMem())
	started, release := k.hold("a")
	defer release()
	g := newGraph("g").node("s", "start").node("a", "step").node("b", "step").flow("s", "a").flow("a", "b").build()
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := e.Stream(ctx, runtime.RunRequest{Graph: g})
	require.NoError(t, err)
	var evs []runtime.Event
	go func() { <-started; cancel(errors.New("stop pressed")) }()
	for ev := range s.Events() {
		evs = append(evs, ev)
	}
	res, err := s.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	checkLifecycle(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, runtime.EventRunCancelled, last.Type)
	require.Equal(t, "stop pressed", last.Data.(*runtime.RunCancelledData).Cause)
	require.Equal(t, runtime.NodeCancelled, res.NodeStatus("a"))
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("b"))
	require.Zero(t, k.execCount("b"))

	// A run whose context is cancelled before it starts runs no node.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	res, _ = invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status)
	before := k.total.Load()
	var c2 collect
	res, err = e.Invoke(ctx2, runtime.RunRequest{Graph: g, Sink: &c2})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Equal(t, before, k.total.Load(), "no node executed")
	checkLifecycle(t, c2.events())
}

func TestEmitRules(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	var kept *runtime.FlowContext
	var errs []error
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, New: func(*runtime.Node) (runtime.Executor, error) {
		return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
			kept = fc
			errs = append(errs, fc.Emit("node_delta", map[string]any{"text": "hi"}), fc.Emit(runtime.EventNodeCompleted, nil))
			return runtime.Result{Output: 1}, nil
		}), nil
	}})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg})
	require.NoError(t, err)
	var c collect
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: &runtime.Graph{Nodes: []runtime.Node{{ID: "s", Type: "start"}}}, Sink: &c})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], runtime.ErrReservedEvent)
	require.ErrorIs(t, kept.Emit("node_delta", nil), runtime.ErrEmitClosed, "emits after the terminal event are dropped")
	require.Equal(t, []runtime.EventType{runtime.EventNodeStarted, "node_delta", runtime.EventNodeCompleted}, c.types("s"))
	checkLifecycle(t, c.events())
}

func TestLinksMaterializeOncePerRun(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("c1", "consumer").node("c2", "consumer").node("p", "producer").node("q", "producer").
		flow("s", "c1").flow("s", "c2").link("p", "c1").link("p", "c2").link("q", "p").build()
	res, _ := invoke(t, e, g)
	require.Equal(t, runtime.RunCompleted, res.Status)
	out, _ := res.Output("c1")
	require.Equal(t, []any{"art:p[art:q]"}, out)
	require.Equal(t, 1, k.execCount("mat:p"), "cached per run")
	require.Equal(t, 1, k.execCount("mat:q"))
	require.Zero(t, k.execCount("p"), "producers are not executed")
}

func TestDefaultEffectAndInterruptID(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	var predicted string
	reg.MustRegister(runtime.NodeType{Name: "ext", Entry: true, DefaultEffect: runtime.EffectExternal,
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				predicted = fc.InterruptID()
				return runtime.Result{}, runtime.Interrupt("ask", nil)
			}), nil
		}})
	e, err := runtime.NewEngine(runtime.Config{Registry: reg})
	require.NoError(t, err)
	g := &runtime.Graph{ID: "g", Nodes: []runtime.Node{{ID: "a", Type: "ext"}, {ID: "b", Type: "ext", Data: []byte(`{"effect":"read"}`)}}}
	p, err := e.Compile(g)
	require.NoError(t, err)
	o, _ := p.NodeOptions("a")
	require.Equal(t, runtime.EffectExternal, o.Effect)
	o, _ = p.NodeOptions("b")
	require.Equal(t, runtime.EffectRead, o.Effect, "data overrides the type default")
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Plan: p, EntryNodeIDs: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, predicted, res.Interrupts[0].ID, "executors can name their interrupt before returning it")
}
