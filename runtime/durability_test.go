package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// allModes are the durability modes the tests run each in turn.
var allModes = []runtime.Durability{runtime.DurabilitySync, runtime.DurabilityBatched, runtime.DurabilityExit}

// Every mode ends with the same log in the store as the live stream.
func TestDurabilityModesKeepTheLog(t *testing.T) {
	t.Parallel()
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem, func(c *runtime.Config) { c.Durability = mode })
			g := newGraph("d").node("s", "start").node("a", "step").node("b", "step", `{"fail":1,"retry":{"maxAttempts":2}}`).
				node("c", "step").flow("s", "a").flow("s", "b").flow("a", "c").flow("b", "c").build()
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var c collect
					id := fmt.Sprintf("%s-%d", mode, i)
					res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: id, Sink: &c})
					require.NoError(t, err)
					require.Equal(t, runtime.RunCompleted, res.Status)
					stored, err := mem.Events(context.Background(), id, 0, 0)
					require.NoError(t, err)
					require.Equal(t, c.events(), stored)
					cps, err := mem.Checkpoints(context.Background(), id)
					require.NoError(t, err)
					require.Len(t, cps, 4)
					for _, cp := range cps {
						require.Equal(t, runtime.NodeSucceeded, cp.Status, cp.NodeID)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// exit mode writes only the run's start while the run is in flight; sync
// and batched mode have the running checkpoint of a node with an external
// effect on disk before its handler runs.
func TestDurabilityFlushPoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       runtime.Durability
		wantDuring bool
	}{{runtime.DurabilitySync, true}, {runtime.DurabilityExit, false}, {runtime.DurabilityBatched, true}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem)
			g := newGraph("fp").node("s", "start").node("a", "step", `{"effect":"external"}`).flow("s", "a").build()
			started, release := k.hold("a")
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "x", Options: runtime.RunOptions{Durability: tc.mode}})
				require.NoError(t, err)
				require.Equal(t, runtime.RunCompleted, res.Status)
			}()
			<-started
			cps, err := mem.Checkpoints(context.Background(), "x")
			require.NoError(t, err)
			evs, err := mem.Events(context.Background(), "x", 0, 0)
			require.NoError(t, err)
			if tc.wantDuring {
				// The external node's running checkpoint and started event are durable before it runs.
				var running bool
				for _, cp := range cps {
					running = running || (cp.NodeID == "a" && cp.Status == runtime.NodeRunning)
				}
				require.True(t, running, "%+v", cps)
				require.Equal(t, runtime.EventNodeStarted, evs[len(evs)-1].Type)
			} else {
				require.Empty(t, cps)
				require.Len(t, evs, 1)
				require.Equal(t, runtime.EventRunStarted, evs[0].Type)
			}
			release()
			<-done
			evs, err = mem.Events(context.Background(), "x", 0, 0)
			require.NoError(t, err)
			checkLifecycle(t, evs)
		})
	}
}

// committedSink checks, at every event it receives, that the store already
// holds that event (same seq, type, node and attempt): commit, then publish.
type committedSink struct {
	t     testing.TB
	st    runtime.Store
	mu    sync.Mutex
	got   []runtime.Event
	early []string
}

func (s *committedSink) Emit(ev runtime.Event) {
	stored, err := s.st.Events(context.Background(), ev.RunID, ev.Seq-1, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, ev)
	if err != nil || len(stored) == 0 || stored[0].Seq != ev.Seq || stored[0].Type != ev.Type ||
		stored[0].NodeID != ev.NodeID || stored[0].Attempt != ev.Attempt {
		s.early = append(s.early, fmt.Sprintf("seq %d %s %s: store has %v (%v)", ev.Seq, ev.Type, ev.NodeID, stored, err))
	}
}

// In every durability mode a sink receives an event only once the store
// has committed it, and the stream it receives is the stored log.
func TestSinkGetsOnlyCommittedEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem, func(c *runtime.Config) { c.Durability = mode })
			g := newGraph("c").node("s", "start").node("a", "step", `{"deltas":300}`).node("b", "step", `{"deltas":5,"fail":1,"retry":{"maxAttempts":2}}`).
				node("c", "step", `{"deltas":3}`).flow("s", "a").flow("s", "b").flow("a", "c").flow("b", "c").build()
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sink := &committedSink{t: t, st: mem}
					id := fmt.Sprintf("%s-%d", mode, i)
					res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: id, Sink: sink})
					require.NoError(t, err)
					require.Equal(t, runtime.RunCompleted, res.Status)
					stored, err := mem.Events(context.Background(), id, 0, 0)
					require.NoError(t, err)
					sink.mu.Lock()
					defer sink.mu.Unlock()
					require.Empty(t, sink.early, "events published before they were committed")
					require.Equal(t, stored, sink.got)
					checkLifecycle(t, stored)
				}()
			}
			wg.Wait()
		})
	}
}

func TestUnknownDurability(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	_, err := runtime.NewEngine(runtime.Config{Registry: k.reg, Durability: "eventually"})
	require.Error(t, err)
	e := k.engine(t, newMem())
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: newGraph("u").node("s", "start").build(),
		Options: runtime.RunOptions{Durability: "whenever"}})
	require.Error(t, err)
}

// Joined writes need a store that commits them: without a store the
// request is refused; a store that refuses them (the memory store knows
// no application data) refuses the run's first commit, so the run ends
// with the store's error and nothing of it is written or published.
func TestJoinedWritesRefused(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	g := newGraph("j").node("s", "start").build()
	_, err := k.engine(t, nil).Invoke(context.Background(), runtime.RunRequest{Graph: g,
		Joined: runtime.Joined{Writes: []any{"x"}}})
	require.ErrorContains(t, err, "Joined")

	mem := newMem()
	e := k.engine(t, mem)
	require.True(t, e.JoinsWrites())
	var got []runtime.Event
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "j1",
		Sink:   runtime.SinkFunc(func(ev runtime.Event) { got = append(got, ev) }),
		Joined: runtime.Joined{Writes: []any{"x"}}})
	require.ErrorContains(t, err, "joined writes")
	require.Empty(t, got, "nothing published")
	_, err = mem.GetRun(context.Background(), "j1")
	require.ErrorIs(t, err, runtime.ErrRunNotFound, "nothing written")

	// In exit mode too: the run is created in the commit its writes
	// join, not beforehand (a record left running would be recovered).
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "j2",
		Options: runtime.RunOptions{Durability: runtime.DurabilityExit},
		Joined:  runtime.Joined{Writes: []any{"x"}}})
	require.ErrorContains(t, err, "joined writes")
	_, err = mem.GetRun(context.Background(), "j2")
	require.ErrorIs(t, err, runtime.ErrRunNotFound, "nothing written in exit mode")
}

// acceptWrites is a store that takes joined writes of type string (and
// keeps them), leaving the rest of each batch to the memory store.
type acceptWrites struct {
	*memory.Store
	mu     sync.Mutex
	writes []string
}

func (s *acceptWrites) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	plain := make([]runtime.WriteBatch, len(bs))
	var got []string
	for i, b := range bs {
		for _, w := range b.Writes {
			got = append(got, w.(string))
		}
		b.Writes = nil
		plain[i] = b
	}
	if err := s.Store.WriteBatches(ctx, plain); err != nil {
		return err
	}
	s.mu.Lock()
	s.writes = append(s.writes, got...)
	s.mu.Unlock()
	return nil
}

// An exit-mode run with joined writes is created in its first commit
// (with them) and then renews its lease as any run: a node that outlasts
// the lease several times over does not lose it.
func TestExitRunWithJoinedWritesKeepsItsLease(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := &acceptWrites{Store: newMem()}
	e := k.engine(t, st, func(c *runtime.Config) { c.LeaseTTL = 60 * time.Millisecond })
	g := newGraph("exitj").node("s", "start").node("a", "step", `{"sleepMs":1000}`).flow("s", "a").build()
	type outcome struct {
		res *runtime.RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "exitj",
			Options: runtime.RunOptions{Durability: runtime.DurabilityExit},
			Joined: runtime.Joined{Writes: []any{"begin"},
				EndWrites: func(*runtime.RunResult) []any { return []any{"end"} }}})
		done <- outcome{res, err}
	}()
	require.Eventually(t, func() bool {
		_, err := st.GetRun(context.Background(), "exitj")
		return err == nil
	}, 10*time.Second, time.Millisecond, "the run's first commit")
	// Past its first lease: only a renewed lease keeps another owner out.
	time.Sleep(3 * 60 * time.Millisecond)
	_, err := st.ClaimRun(context.Background(), "exitj", "stranger", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the lease was renewed")
	o := <-done
	require.NoError(t, o.err)
	require.Equal(t, runtime.RunCompleted, o.res.Status)
	rec, err := st.GetRun(context.Background(), "exitj")
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, rec.Status)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Equal(t, []string{"begin", "end"}, st.writes)
}

// slowBirth is a store whose group commits that create a run take a
// while (as when they wait behind other transactions for the writer).
type slowBirth struct {
	*memory.Store
	delay time.Duration
}

func (s slowBirth) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	for _, b := range bs {
		if b.Create != nil {
			time.Sleep(s.delay)
		}
	}
	return s.Store.WriteBatches(ctx, bs)
}

// A run created in its first group commit has no record to renew a lease
// on until that commit is done: its lease renewal waits for it instead
// of taking the missing record for a lost lease.
func TestLeaseRenewalWaitsForTheRunsCreation(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := slowBirth{Store: newMem(), delay: 150 * time.Millisecond}
	e := k.engine(t, st, func(c *runtime.Config) { c.LeaseTTL = 60 * time.Millisecond })
	g := newGraph("born").node("s", "start").node("a", "step").flow("s", "a").build()
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "born"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
}

// heldStore is a memory store that calls hold before it applies each
// group commit: a test holds a commit there to see what the run does
// while it waits.
type heldStore struct {
	*memory.Store
	hold func([]runtime.WriteBatch)
}

func (s *heldStore) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	s.hold(bs)
	return s.Store.WriteBatches(ctx, bs)
}

// carries reports whether a commit carries node's checkpoint with status.
func carries(bs []runtime.WriteBatch, node string, status runtime.NodeStatus) bool {
	for _, b := range bs {
		for _, cp := range b.Checkpoints {
			if cp.NodeID == node && cp.Status == status {
				return true
			}
		}
	}
	return false
}

// In sync mode a pure node's handler may start before its running
// checkpoint is committed, while a node with an external effect starts
// only once everything before it is; either way the sink gets an event
// only after its commit.
func TestSyncStartsPureNodesWithoutWaiting(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	pStarted, pRelease := k.hold("p")
	xStarted, xRelease := k.hold("x")
	pRelease, xRelease = once(pRelease), once(xRelease)
	pCommit := make(chan struct{}) // closed by the test: p's commit may go on
	letCommit := once(func() { close(pCommit) })
	pSeen, xSeen := make(chan struct{}), make(chan struct{}) // the hold has seen p's (x's) running checkpoint
	var pEarly, xEarly atomic.Bool
	st := &heldStore{Store: newMem(), hold: func(bs []runtime.WriteBatch) {
		switch {
		case carries(bs, "p", runtime.NodeRunning):
			// Hold p's running checkpoint until p's handler runs. The
			// bound only keeps a run that waits for this commit from
			// hanging the test: it then fails below.
			select {
			case <-pStarted:
				pEarly.Store(true)
				close(pSeen)
				<-pCommit
			case <-time.After(10 * time.Second):
				close(pSeen)
			}
		case carries(bs, "x", runtime.NodeRunning):
			// x must not start while its running checkpoint is held. How
			// long it is held only bounds how surely a run that does not
			// wait is caught; a run that waits passes either way.
			select {
			case <-xStarted:
				xEarly.Store(true)
			case <-time.After(200 * time.Millisecond):
			}
			close(xSeen)
		}
	}}
	e := k.engine(t, st, func(c *runtime.Config) { c.Durability = runtime.DurabilitySync })
	g := newGraph("pure").node("s", "start").node("p", "step").node("x", "step", `{"effect":"external"}`).
		flow("s", "p").flow("p", "x").build()
	sink := &committedSink{t: t, st: st}
	type outcome struct {
		res *runtime.RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "pure", Sink: sink})
		done <- outcome{res, err}
	}()
	// On a failure below, let the run end before the engine closes.
	t.Cleanup(func() { letCommit(); pRelease(); xRelease(); <-done })

	<-pSeen
	require.True(t, pEarly.Load(), "p's handler runs while its running checkpoint's commit is held")
	// The run's creation may share the held commit (when the committer
	// had not taken the first step's writes yet): then nothing of the run
	// is committed, p's checkpoint included.
	cps, err := st.Checkpoints(context.Background(), "pure")
	if !errors.Is(err, runtime.ErrRunNotFound) {
		require.NoError(t, err)
	}
	for _, cp := range cps {
		require.NotEqual(t, "p", cp.NodeID, "p's running checkpoint is not committed yet")
	}
	sink.mu.Lock()
	for _, ev := range sink.got {
		require.NotEqual(t, "p", ev.NodeID, "p's events reach the sink only after their commit")
	}
	sink.mu.Unlock()
	letCommit()
	pRelease()

	<-xStarted
	<-xSeen
	require.False(t, xEarly.Load(), "x's handler started while its running checkpoint's commit was held")
	cps, err = st.Checkpoints(context.Background(), "pure")
	require.NoError(t, err)
	status := map[string]runtime.NodeStatus{}
	for _, cp := range cps {
		status[cp.NodeID] = cp.Status
	}
	require.Equal(t, map[string]runtime.NodeStatus{"s": runtime.NodeSucceeded, "p": runtime.NodeSucceeded,
		"x": runtime.NodeRunning}, status, "everything before x is durable when it starts")
	evs, err := st.Events(context.Background(), "pure", 0, 0)
	require.NoError(t, err)
	require.Equal(t, runtime.EventNodeStarted, evs[len(evs)-1].Type)
	require.Equal(t, "x", evs[len(evs)-1].NodeID)
	xRelease()
	o := <-done
	done <- o // for the cleanup
	require.NoError(t, o.err)
	require.Equal(t, runtime.RunCompleted, o.res.Status)

	stored, err := st.Events(context.Background(), "pure", 0, 0)
	require.NoError(t, err)
	checkLifecycle(t, stored)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Empty(t, sink.early, "events published before they were committed")
	require.Equal(t, stored, sink.got)
}

// once makes f safe to call more than once (it runs the first time).
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}

// A sync run's run_started waits for the run's first step: a pure entry
// that runs on the dispatcher, its edge and the next node's start (whose
// external effect waits for the commit) all join the one commit that
// creates the run — the effect node starts after one commit, not two —
// and every event still reaches the sink only once committed.
func TestFirstStepJoinsRunStartedCommit(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	begun := make(chan struct{}) // closed when the first commit begins
	var once sync.Once
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "inline", Entry: true, Inline: true,
		Ports: []runtime.Port{{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}},
		New: func(n *runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
				// Give a commit of run_started alone the time to begin:
				// none may while the first step runs. The bound only
				// decides how surely a run that commits early is caught.
				select {
				case <-begun:
				case <-time.After(100 * time.Millisecond):
				}
				return runtime.Result{Output: "s"}, nil
			}), nil
		}}))
	var mu sync.Mutex
	var commits [][]string // per commit: its events as type/node
	var beforeX int        // commits begun before x's handler ran
	xRan := false
	st := &heldStore{Store: newMem(), hold: func(bs []runtime.WriteBatch) {
		var evs []string
		for _, b := range bs {
			for _, ev := range b.Events {
				evs = append(evs, string(ev.Type)+"/"+ev.NodeID)
			}
		}
		once.Do(func() { close(begun) })
		mu.Lock()
		commits = append(commits, evs)
		if !xRan {
			beforeX++
		}
		mu.Unlock()
	}}
	xStarted, release := k.hold("x")
	go func() {
		<-xStarted
		mu.Lock()
		xRan = true
		mu.Unlock()
		release()
	}()
	e := k.engine(t, st, func(c *runtime.Config) { c.Durability = runtime.DurabilitySync })
	g := newGraph("first").node("s", "inline").node("x", "step", `{"effect":"external"}`).flow("s", "x").build()
	sink := &committedSink{t: t, st: st}
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "first", Sink: sink})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"run_started/", "node_started/s", "node_completed/s", "edge_taken/", "node_started/x"}, commits[0],
		"the first commit holds run_started and the whole first step")
	require.Equal(t, 1, beforeX, "x starts after one commit")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Empty(t, sink.early, "an event reached the sink before its commit")
	require.Equal(t, runtime.EventRunStarted, sink.got[0].Type)
}

// startCancel is a StartSink that cancels its run when told it started.
type startCancel struct {
	collect
	cancel  context.CancelFunc
	started []string
}

func (s *startCancel) Started(runID string) {
	s.started = append(s.started, runID)
	s.cancel()
}

// A StartSink hears of its run once run_started is emitted, before any
// node starts and before run_started is committed: a cancel there still
// lets the run be created and log run_started, and then no node starts —
// in every durability mode.
func TestStartSinkCancelsBeforeAnyNode(t *testing.T) {
	t.Parallel()
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem, func(c *runtime.Config) { c.Durability = mode })
			g := newGraph("startsink").node("s", "start").node("a", "step").flow("s", "a").build()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sink := &startCancel{cancel: cancel}
			res, err := e.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "ss", Sink: sink})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCancelled, res.Status)
			require.Equal(t, []string{"ss"}, sink.started)
			require.Zero(t, k.execCount("s")+k.execCount("a"), "no node ran")
			evs, err := mem.Events(context.Background(), "ss", 0, 0)
			require.NoError(t, err)
			var types []runtime.EventType
			for _, ev := range evs {
				types = append(types, ev.Type)
			}
			require.Equal(t, runtime.EventRunStarted, types[0])
			require.Equal(t, runtime.EventRunCancelled, types[len(types)-1])
			require.NotContains(t, types, runtime.EventNodeStarted)
			require.Equal(t, len(evs), len(sink.events()), "the sink got the log")
		})
	}
}

// A StartSink given to Stream hears of the run's start too (the stream
// tees the events to it and passes Started on).
func TestStreamPassesStartedOn(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, newMem())
	g := newGraph("streamstart").node("s", "start").node("a", "step").flow("s", "a").build()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &startCancel{cancel: cancel}
	s, err := e.Stream(ctx, runtime.RunRequest{Graph: g, RunID: "st", Sink: sink})
	require.NoError(t, err)
	for range s.Events() {
	}
	res, err := s.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Equal(t, []string{"st"}, sink.started)
	require.Zero(t, k.execCount("s")+k.execCount("a"), "no node ran")
}

// deferringStore is a memory store that, like the SQLite store at
// synchronous=FULL, makes each group commit visible before it is durable
// and hands the committer the wait for its sync (runtime.DeferSync). The
// test decides when each commit's sync returns.
type deferringStore struct {
	*memory.Store
	t       testing.TB
	mu      sync.Mutex
	commits []*deferredCommit
	written chan *deferredCommit // each commit, once written
	// releasing: every sync, held or to come, returns.
	releasing bool
}

// releaseAll lets every sync return, those the test holds and those to
// come (the test may have released some already).
func (s *deferringStore) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.releasing {
		return
	}
	s.releasing = true
	for _, c := range s.commits {
		select {
		case <-c.release:
		default:
			close(c.release)
		}
	}
}

type deferredCommit struct {
	last     int64         // the highest seq it wrote
	runs     []string      // the runs it wrote to, one per batch
	release  chan struct{} // closed by the test: the sync returns
	returned chan struct{} // closed when the sync has returned
	synced   bool          // under the store's mu
}

func (s *deferringStore) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	if err := s.Store.WriteBatches(ctx, bs); err != nil {
		return err
	}
	c := &deferredCommit{release: make(chan struct{}), returned: make(chan struct{})}
	for _, b := range bs {
		c.runs = append(c.runs, b.RunID)
		for _, ev := range b.Events {
			c.last = max(c.last, ev.Seq)
		}
	}
	s.mu.Lock()
	s.commits = append(s.commits, c)
	if s.releasing {
		close(c.release)
	}
	s.mu.Unlock()
	if !runtime.DeferSync(ctx, func() error {
		<-c.release
		s.mu.Lock()
		c.synced = true
		s.mu.Unlock()
		close(c.returned)
		return nil
	}) {
		s.t.Error("a group commit did not ask to defer its sync")
		s.mu.Lock()
		c.synced = true
		s.mu.Unlock()
	}
	s.written <- c
	return nil
}

// durable reports whether seq and every seq before it are synced.
func (s *deferringStore) durable(seq int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.commits {
		if !c.synced {
			return false
		}
		if c.last >= seq {
			return true
		}
	}
	return false
}

// durableSink records the events it gets and those it got before they
// (or any before them) were synced.
type durableSink struct {
	st    *deferringStore
	mu    sync.Mutex
	got   []runtime.Event
	early []int64
}

// published returns how many events the sink has got.
func (s *durableSink) published() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *durableSink) Emit(ev runtime.Event) {
	ok := s.st.durable(ev.Seq)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, ev)
	if !ok {
		s.early = append(s.early, ev.Seq)
	}
}

// With a store that syncs after it commits, the sync committer writes
// its next commit while the last one syncs once 64 writes (gatherMax)
// wait, and publishes each commit only once it and every commit before
// it are synced, in order.
func TestCommitterWritesWhileTheLastCommitSyncs(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	pStarted, pRelease := k.hold("p")
	pRelease = once(pRelease)
	st := &deferringStore{Store: newMem(), t: t, written: make(chan *deferredCommit, 100)}
	e := k.engine(t, st, func(c *runtime.Config) { c.Durability = runtime.DurabilitySync })
	g := newGraph("pipe").node("s", "start").node("p", "step", `{"deltas":100}`).flow("s", "p").build()
	sink := &durableSink{st: st}
	done := make(chan error, 1)
	go func() {
		_, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "pipe", Sink: sink})
		done <- err
	}()
	t.Cleanup(func() { pRelease(); st.releaseAll() })

	first := <-st.written // run_started and the first step, p's start with it
	<-pStarted            // p is pure: it starts before that commit is synced
	pRelease()
	var second *deferredCommit
	select {
	case second = <-st.written: // p's deltas, written while the first commit syncs
	case <-time.After(10 * time.Second):
		t.Fatal("the committer waited for the first commit's sync before writing the next")
	}
	require.Zero(t, sink.published(), "an event was published before its commit was synced")
	// The second commit's sync returns first: its events must still wait
	// for the first commit's.
	close(second.release)
	require.Never(t, func() bool { return sink.published() > 0 }, 100*time.Millisecond, 5*time.Millisecond,
		"the second commit was published before the first was synced")
	close(first.release)
	select {
	case <-second.returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the second commit's sync was never waited for")
	}
	st.releaseAll()
	require.NoError(t, <-done)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Empty(t, sink.early, "events published before they, or one before them, were synced")
	stored, err := st.Events(context.Background(), "pipe", 0, 0)
	require.NoError(t, err)
	require.Len(t, sink.got, len(stored))
	for i, ev := range sink.got {
		require.Equal(t, int64(i+1), ev.Seq, "published in seq order, with no gap")
		require.Equal(t, stored[i].Type, ev.Type)
	}
}

// While a commit's sync is in flight, the sync committer gathers the
// writes that come meanwhile (fewer than gatherMax, 64) and commits them
// together once the sync has returned, not one commit each as they come.
func TestSyncCommitterGathersWhileACommitSyncs(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := &deferringStore{Store: newMem(), t: t, written: make(chan *deferredCommit, 100)}
	e := k.engine(t, st, func(c *runtime.Config) { c.Durability = runtime.DurabilitySync })
	t.Cleanup(st.releaseAll)
	g := newGraph("gather").node("s", "start").node("p", "step").flow("s", "p").build()
	done := make(chan error, 4)
	run := func(id string) {
		go func() {
			_, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: id})
			done <- err
		}()
	}
	run("r0")
	first := <-st.written // r0's first writes: their sync waits for the test
	for i := 1; i <= 3; i++ {
		run(fmt.Sprintf("r%d", i))
	}
	require.Never(t, func() bool { return len(st.written) > 0 }, 300*time.Millisecond, 5*time.Millisecond,
		"a commit was written while the last one synced, with fewer than 64 writes waiting")
	close(first.release)
	var second *deferredCommit
	select {
	case second = <-st.written:
	case <-time.After(10 * time.Second):
		t.Fatal("no commit once the sync returned")
	}
	for i := 1; i <= 3; i++ {
		require.Contains(t, second.runs, fmt.Sprintf("r%d", i), "the writes gathered during the sync are in one commit")
	}
	st.releaseAll()
	for range 4 {
		require.NoError(t, <-done)
	}
}

// With a publish group set, every event of a sync or batched run reaches
// its sink inside a group call (a group commit's publishing), and the
// groups carry the events of many runs; exit mode publishes without one.
func TestPublishGroupWrapsEveryGroupCommit(t *testing.T) {
	t.Parallel()
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			e := k.engine(t, newMem(), func(c *runtime.Config) { c.Durability = mode })
			var inGroup, groups, outside, inside atomic.Int64
			var gmu sync.Mutex // one group at a time, as one committer per mode publishes
			e.SetPublishGroup(func(publish func()) {
				gmu.Lock()
				defer gmu.Unlock()
				groups.Add(1)
				inGroup.Store(1)
				publish()
				inGroup.Store(0)
			})
			sink := runtime.SinkFunc(func(runtime.Event) {
				if inGroup.Load() == 1 {
					inside.Add(1)
				} else {
					outside.Add(1)
				}
			})
			g := newGraph("pg").node("s", "start").node("a", "step").node("b", "step").flow("s", "a").flow("a", "b").build()
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: fmt.Sprintf("pg-%s-%d", mode, i), Sink: sink})
					require.NoError(t, err)
					require.Equal(t, runtime.RunCompleted, res.Status)
				}()
			}
			wg.Wait()
			if mode == runtime.DurabilityExit {
				require.Zero(t, groups.Load())
				require.Zero(t, inside.Load())
				require.Positive(t, outside.Load())
				return
			}
			require.Zero(t, outside.Load(), "events published outside a group")
			require.Positive(t, inside.Load())
			require.Positive(t, groups.Load())
		})
	}
}

// The commit observer hears of every group commit of the sync and
// batched committers, in stage order, and of nothing in exit mode: the
// commits' events add up to what the runs' sinks received, and each run
// is created and ended in one of them.
func TestCommitObserverSeesEveryGroupCommit(t *testing.T) {
	t.Parallel()
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			var mu sync.Mutex
			var commits []runtime.GroupCommit
			e := k.engine(t, newMem(), func(c *runtime.Config) {
				c.Durability = mode
				c.CommitObserver = func(gc runtime.GroupCommit) {
					mu.Lock()
					defer mu.Unlock()
					commits = append(commits, gc)
				}
			})
			var received atomic.Int64
			sink := runtime.SinkFunc(func(runtime.Event) { received.Add(1) })
			g := newGraph("co").node("s", "start").node("a", "step").node("b", "step").flow("s", "a").flow("a", "b").build()
			const runs = 10
			var wg sync.WaitGroup
			for i := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: fmt.Sprintf("co-%s-%d", mode, i), Sink: sink})
					require.NoError(t, err)
					require.Equal(t, runtime.RunCompleted, res.Status)
				}()
			}
			wg.Wait()
			sum := func() (creates, finishes, events int) {
				mu.Lock()
				defer mu.Unlock()
				for _, gc := range commits {
					creates, finishes, events = creates+gc.Creates, finishes+gc.Finishes, events+gc.Events
				}
				return
			}
			if mode == runtime.DurabilityExit {
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				require.Empty(t, commits, "exit mode has no group commits")
				return
			}
			// A run's last commit is observed after the run has ended.
			require.Eventually(t, func() bool {
				_, finishes, events := sum()
				return finishes == runs && int64(events) == received.Load()
			}, 5*time.Second, time.Millisecond)
			creates, _, _ := sum()
			require.Equal(t, runs, creates)
			mu.Lock()
			defer mu.Unlock()
			for _, gc := range commits {
				require.Equal(t, mode, gc.Durability)
				require.Positive(t, gc.Runs)
				require.Zero(t, gc.Refused)
				require.False(t, gc.Began.IsZero())
				require.LessOrEqual(t, time.Duration(0), gc.Written)
				require.LessOrEqual(t, gc.Written, gc.Durable)
				require.LessOrEqual(t, gc.Durable, gc.Published)
			}
		})
	}
}

// A run's terminal event is committed with the run's end: a batch that
// carries run_completed (or another terminal run event) carries the
// record's Finish too, so whoever the event reaches finds the run ended
// in the store. Many short runs at once, so that the committer takes runs'
// buffers while they end: with the event and the end buffered apart, as
// they were, this caught a batch with the event alone in most runs of
// the test (4 of 5 at twice as many runs).
func TestTerminalEventCommitsWithTheEnd(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	var split atomic.Int64
	st := &heldStore{Store: newMem(), hold: func(bs []runtime.WriteBatch) {
		for _, b := range bs {
			for _, ev := range b.Events {
				if ev.Seq > 0 && ev.NodeID == "" && ev.Type.Terminal() && b.Finish == nil {
					split.Add(1)
				}
			}
		}
	}}
	e := k.engine(t, st, func(c *runtime.Config) { c.Durability = runtime.DurabilitySync })
	g := newGraph("ends").node("s", "start").node("a", "step").flow("s", "a").build()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: fmt.Sprintf("end-%d-%d", w, i)})
				if err != nil || res.Status != runtime.RunCompleted {
					t.Errorf("run %d-%d: %v %v", w, i, res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, split.Load(), "terminal events committed without the run's end")
}
