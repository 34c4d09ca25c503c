package runtime_test

import (
	"context"
	"encoding/json"
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

// crashStore stands for a process that dies at a failpoint: from the
// moment it crashes nothing more reaches the underlying store, and the
// run's context is cancelled (the process's goroutines are gone).
type crashStore struct {
	runtime.Store
	crashed atomic.Bool
	kill    func()
	// failpoint decides, for each checkpoint write, whether to crash before
	// or after persisting it.
	failpoint func(cp *runtime.Checkpoint) (before, after bool)
	// eventFailpoint may crash before an event is appended.
	eventFailpoint func(ev runtime.Event) bool
}

func (s *crashStore) die() {
	if s.crashed.CompareAndSwap(false, true) {
		s.kill()
	}
}

func (s *crashStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if s.crashed.Load() {
		return nil
	}
	before, after := false, false
	if s.failpoint != nil {
		before, after = s.failpoint(cp)
	}
	if before {
		s.die()
		return nil
	}
	err := s.Store.SaveCheckpoint(ctx, cp)
	if after {
		s.die()
	}
	return err
}

func (s *crashStore) AppendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) error {
	if s.crashed.Load() {
		return nil
	}
	for _, ev := range evs {
		if s.eventFailpoint != nil && s.eventFailpoint(ev) {
			s.die() // the whole append is lost with the process
			return nil
		}
	}
	return s.Store.AppendEvents(ctx, runID, token, evs)
}

func (s *crashStore) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	if s.crashed.Load() {
		return nil
	}
	return s.Store.UpdateRun(ctx, r)
}

func (s *crashStore) leaser() runtime.Leaser { return s.Store.(runtime.Leaser) }

func (s *crashStore) ClaimRun(ctx context.Context, id, owner string, ttl time.Duration) (runtime.Lease, error) {
	return s.leaser().ClaimRun(ctx, id, owner, ttl)
}

func (s *crashStore) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	if s.crashed.Load() {
		return l, nil // a dead process renews nothing
	}
	return s.leaser().RenewLease(ctx, l, ttl)
}

func (s *crashStore) ReleaseLease(ctx context.Context, l runtime.Lease) error {
	if s.crashed.Load() {
		return nil
	}
	return s.leaser().ReleaseLease(ctx, l)
}

func (s *crashStore) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return s.leaser().ExpiredRuns(ctx, now, limit)
}

func TestRecoverAfterCrash(t *testing.T) {
	t.Parallel()
	type fp struct {
		name  string
		point func(cp *runtime.Checkpoint) (bool, bool)
		event func(ev runtime.Event) bool
		// maxExtra is how often b may run again after the crash.
		maxExtra int
	}
	points := []fp{
		{name: "before b's handler", point: func(cp *runtime.Checkpoint) (bool, bool) {
			return false, cp.NodeID == "b" && cp.Status == runtime.NodeRunning
		}, maxExtra: 1},
		{name: "after b's handler, before its commit", point: func(cp *runtime.Checkpoint) (bool, bool) {
			return cp.NodeID == "b" && cp.Status == runtime.NodeSucceeded, false
		}, maxExtra: 1},
		{name: "after b's commit, before its terminal event", point: func(cp *runtime.Checkpoint) (bool, bool) {
			return false, cp.NodeID == "b" && cp.Status == runtime.NodeSucceeded
		}, maxExtra: 0},
		{name: "while b's terminal event and edge are written", event: func(ev runtime.Event) bool {
			return ev.Type == runtime.EventEdgeTaken && ev.Data.(*runtime.EdgeTakenData).Source == "b"
		}, maxExtra: 0},
		{name: "in b's retry backoff", point: func(cp *runtime.Checkpoint) (bool, bool) {
			return false, cp.NodeID == "b" && !cp.NextAttemptAt.IsZero()
		}, maxExtra: 1},
	}
	for i, p := range points {
		t.Run(p.name, func(t *testing.T) {
			k := newKit(t)
			mem := newMem()
			// b and c have an external effect, so each starts only once
			// everything before it is durable (a pure node may start
			// before its own running checkpoint is committed): the crash
			// at b's checkpoints is where the dead process stopped, and c
			// never ran on a success of b that was not yet durable.
			bData := `{"effect":"external"}`
			if p.name == "in b's retry backoff" {
				bData = `{"effect":"external","fail":1,"retry":{"maxAttempts":3,"initialDelayMs":30}}`
			}
			g := newGraph(fmt.Sprintf("crash%d", i)).node("s", "start").node("a", "step").node("b", "step", bData).
				node("c", "step", `{"effect":"external"}`).node("side", "step").flow("s", "a").flow("a", "b").flow("b", "c").flow("s", "side").build()
			ctx, kill := context.WithCancel(context.Background())
			cs := &crashStore{Store: mem, kill: kill, failpoint: p.point, eventFailpoint: p.event}
			// A restarted server keeps its owner name and takes its leases back.
			same := func(c *runtime.Config) { c.Owner = "server-1" }
			crashed := k.engine(t, cs, same)
			res, _ := crashed.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "run", Input: "x"})
			require.True(t, cs.crashed.Load(), "the failpoint was hit")
			_ = res
			before := map[string]int{}
			for _, id := range []string{"s", "a", "b", "c", "side"} {
				before[id] = k.execCount(id)
			}
			rec, err := mem.GetRun(context.Background(), "run")
			require.NoError(t, err)
			require.Equal(t, runtime.RunRunning, rec.Status, "the dead process never finished the run")

			var live collect
			fresh := k.engine(t, mem, same)
			res, err = fresh.Recover(context.Background(), runtime.RecoverRequest{RunID: "run", Graph: g, Sink: &live})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			out, _ := res.Output("c")
			require.Equal(t, "c(b(a(s(x))))", out, "the no-crash result")
			require.Equal(t, before["s"], k.execCount("s"), "succeeded nodes are not executed again")
			require.Equal(t, before["a"], k.execCount("a"))
			require.LessOrEqual(t, k.execCount("b")-before["b"], p.maxExtra)
			require.Equal(t, 1, k.execCount("c"))

			log, err := mem.Events(context.Background(), "run", 0, 0)
			require.NoError(t, err)
			checkLifecycle(t, log)
			for _, ev := range live.events() {
				require.Greater(t, ev.Seq, int64(0))
			}
			stored, err := mem.GetRun(context.Background(), "run")
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, stored.Status)
			require.Equal(t, int64(len(log)), stored.LastSeq)
		})
	}
}

// A recovered node runs with the same attempt id as the attempt that was
// lost, so an idempotent executor can dedupe.
func TestRecoverKeepsAttemptID(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	var mu sync.Mutex
	var ids []string
	reg.MustRegister(runtime.NodeType{Name: "start", Entry: true, New: func(*runtime.Node) (runtime.Executor, error) {
		return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
			mu.Lock()
			ids = append(ids, fc.AttemptID())
			mu.Unlock()
			return runtime.Result{Output: "done"}, nil
		}), nil
	}})
	mem := newMem()
	ctx, kill := context.WithCancel(context.Background())
	cs := &crashStore{Store: mem, kill: kill, failpoint: func(cp *runtime.Checkpoint) (bool, bool) {
		return cp.Status == runtime.NodeSucceeded, false
	}}
	e1, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: cs, Owner: "server-1"})
	require.NoError(t, err)
	// An external node's running checkpoint is durable before its handler
	// runs (a pure node's need not be): the lost attempt left it behind.
	g := &runtime.Graph{ID: "g", PlanVersion: 1, Nodes: []runtime.Node{{ID: "s", Type: "start", Data: json.RawMessage(`{"effect":"external"}`)}}}
	_, _ = e1.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "r"})
	e2, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: mem, Owner: "server-1"})
	require.NoError(t, err)
	res, err := e2.Recover(context.Background(), runtime.RecoverRequest{RunID: "r", Graph: g})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Len(t, ids, 2)
	require.Equal(t, ids[0], ids[1])
	log, _ := mem.Events(context.Background(), "r", 0, 0)
	checkLifecycle(t, log)
	var stale int
	for _, ev := range log {
		if ev.Type == runtime.EventNodeRetrying && ev.Data.(*runtime.NodeRetryingData).Code == runtime.CodeStaleRunning {
			stale++
		}
	}
	require.Equal(t, 1, stale, "a node_retrying marks the re-run attempt")

	_, err = e2.Recover(context.Background(), runtime.RecoverRequest{RunID: "r", Graph: g})
	require.ErrorIs(t, err, runtime.ErrRunNotResumable, "a finished run is not recovered")
}

// crashBeforeB runs g as runID on an engine of owner with lease ttl whose
// store dies as node b's running checkpoint is written, and returns the
// run's record as the dead process left it. b must have a write or
// external effect: a pure node's running checkpoint may never be written
// on its own (the node may start, and end, before it is committed).
func crashBeforeB(t *testing.T, k *kit, mem runtime.Store, g *runtime.Graph, runID, owner string, ttl time.Duration) *runtime.RunRecord {
	t.Helper()
	ctx, kill := context.WithCancel(context.Background())
	cs := &crashStore{Store: mem, kill: kill, failpoint: func(cp *runtime.Checkpoint) (bool, bool) {
		return false, cp.NodeID == "b" && cp.Status == runtime.NodeRunning
	}}
	dead := k.engine(t, cs, func(c *runtime.Config) { c.LeaseTTL = ttl; c.Owner = owner })
	_, _ = dead.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: runID, Input: "x"})
	require.True(t, cs.crashed.Load())
	rec, err := mem.GetRun(context.Background(), runID)
	require.NoError(t, err)
	return rec
}

// A crashed run's lease expires; another engine's recovery pass claims it,
// and the dead holder's late writes are fenced off.
func TestRecoverExpiredLeases(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	mem := newMem()
	g := newGraph("lease").node("s", "start").node("a", "step").node("b", "step", `{"effect":"external"}`).flow("s", "a").flow("a", "b").build()
	oldRec := crashBeforeB(t, k, mem, g, "lr", "dead", 150*time.Millisecond)

	fresh := k.engine(t, mem, func(c *runtime.Config) { c.LeaseTTL = time.Second; c.Owner = "fresh" })
	done := make(chan *runtime.RunResult, 1)
	cfg := runtime.RecoveryConfig{
		Prepare: func(ctx context.Context, rec *runtime.RunRecord) (runtime.RecoverRequest, error) {
			return runtime.RecoverRequest{Graph: g}, nil
		},
		Done: func(_ *runtime.RunRecord, res *runtime.RunResult, err error) {
			require.NoError(t, err)
			done <- res
		},
	}
	n, err := fresh.RecoverExpired(context.Background(), cfg)
	require.NoError(t, err)
	require.Zero(t, n, "the lease has not expired yet")
	require.Eventually(t, func() bool {
		n, err := fresh.RecoverExpired(context.Background(), cfg)
		return err == nil && n == 1
	}, 5*time.Second, 20*time.Millisecond)
	res := <-done
	fresh.WaitRecovered()
	require.Equal(t, runtime.RunCompleted, res.Status)
	out, _ := res.Output("b")
	require.Equal(t, "b(a(s(x)))", out)

	// The dead holder wakes up: its token is older, every write is refused.
	err = mem.SaveCheckpoint(context.Background(), &runtime.Checkpoint{RunID: "lr", NodeID: "b", Status: runtime.NodeFailed, Token: oldRec.Token})
	require.ErrorIs(t, err, runtime.ErrFenced)
	err = mem.AppendEvents(context.Background(), "lr", oldRec.Token, []runtime.Event{{Seq: res.LastSeq + 1, RunID: "lr", Type: "node_delta"}})
	require.ErrorIs(t, err, runtime.ErrFenced)
	log, _ := mem.Events(context.Background(), "lr", 0, 0)
	checkLifecycle(t, log)
}

// An engine restarted with its predecessor's owner takes the run back at
// once (the lease has not expired), with a newer token that fences the
// predecessor; an engine with another owner still waits for the lease.
func TestRecoverOwnRunsAtOnce(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	mem := newMem()
	g := newGraph("own").node("s", "start").node("a", "step").node("b", "step", `{"effect":"external"}`).flow("s", "a").flow("a", "b").build()
	oldRec := crashBeforeB(t, k, mem, g, "own", "srv-1", time.Hour)

	cfg := func(done chan<- *runtime.RunResult) runtime.RecoveryConfig {
		return runtime.RecoveryConfig{
			Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
				return runtime.RecoverRequest{Graph: g}, nil
			},
			Done: func(_ *runtime.RunRecord, res *runtime.RunResult, err error) {
				require.NoError(t, err)
				done <- res
			},
		}
	}
	stranger := k.engine(t, mem, func(c *runtime.Config) { c.Owner = "srv-2" })
	n, err := stranger.RecoverExpired(context.Background(), cfg(nil))
	require.NoError(t, err)
	require.Zero(t, n, "another owner waits for the lease")

	done := make(chan *runtime.RunResult, 1)
	restarted := k.engine(t, mem, func(c *runtime.Config) { c.LeaseTTL = time.Hour; c.Owner = "srv-1" })
	n, err = restarted.RecoverExpired(context.Background(), cfg(done))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the same owner takes its run back at once")
	res := <-done
	restarted.WaitRecovered()
	require.Equal(t, runtime.RunCompleted, res.Status)
	out, _ := res.Output("b")
	require.Equal(t, "b(a(s(x)))", out)
	err = mem.SaveCheckpoint(context.Background(), &runtime.Checkpoint{RunID: "own", NodeID: "b", Status: runtime.NodeFailed, Token: oldRec.Token})
	require.ErrorIs(t, err, runtime.ErrFenced, "the predecessor is fenced")
	log, _ := mem.Events(context.Background(), "own", 0, 0)
	checkLifecycle(t, log)

	// A run the engine executes itself is never taken back by its own pass.
	started, release := k.hold("a")
	live := make(chan struct{})
	go func() {
		defer close(live)
		_, _ = restarted.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "live", Input: "y"})
	}()
	<-started
	n, err = restarted.RecoverExpired(context.Background(), cfg(nil))
	require.NoError(t, err)
	require.Zero(t, n)
	release()
	<-live // the engine is closed after its runs end
}

// A run a recovery pass claimed keeps its claim while its Launch waits to
// start it (for its chat's turn, say) far longer than the lease TTL:
// neither another engine nor the same engine's next pass claims it again,
// and once started it runs to its end under that claim, recovered once.
// A run given back instead is claimable at once.
func TestRecoverKeepsTheClaimWhileItsLaunchWaits(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	mem := newMem()
	g := newGraph("wait").node("s", "start").node("a", "step").node("b", "step", `{"effect":"external"}`).flow("s", "a").flow("a", "b").build()
	const ttl = 150 * time.Millisecond
	crashBeforeB(t, k, mem, g, "waits", "srv-1", time.Hour)
	crashBeforeB(t, k, mem, g, "given", "srv-1", time.Hour)

	claimed := make(chan *runtime.ClaimedRun, 2)
	cfg := runtime.RecoveryConfig{
		Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
			return runtime.RecoverRequest{Graph: g}, nil
		},
		Launch: func(_ *runtime.RunRecord, run *runtime.ClaimedRun) error {
			claimed <- run
			return nil
		},
	}
	restarted := k.engine(t, mem, func(c *runtime.Config) { c.LeaseTTL = ttl; c.Owner = "srv-1" })
	stranger := k.engine(t, mem, func(c *runtime.Config) { c.LeaseTTL = ttl; c.Owner = "srv-2" })
	n, err := restarted.RecoverExpired(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	runs := map[string]*runtime.ClaimedRun{}
	for range 2 {
		r := <-claimed
		runs[r.RunID()] = r
	}
	for range 5 { // 5 TTLs of waiting
		time.Sleep(ttl)
		for _, e := range []*runtime.Engine{stranger, restarted} {
			n, err := e.RecoverExpired(context.Background(), cfg)
			require.NoError(t, err)
			require.Zero(t, n, "a waiting claim is renewed")
		}
	}

	runs["given"].GiveBack()
	_, err = mem.ClaimRun(context.Background(), "given", "srv-3", time.Hour)
	require.NoError(t, err, "a claim given back is free at once")

	res, err := runs["waits"].Start(context.Background())
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	out, _ := res.Output("b")
	require.Equal(t, "b(a(s(x)))", out)
	_, err = runs["waits"].Start(context.Background())
	require.Error(t, err, "a claimed run starts once")
	log, _ := mem.Events(context.Background(), "waits", 0, 0)
	checkLifecycle(t, log)
	stale := 0
	for _, ev := range log {
		if ev.Type == runtime.EventNodeRetrying {
			stale++
		}
	}
	require.Equal(t, 1, stale, "recovered once")
}

// A claimed run started under a context already cancelled — a cancel
// that reached its binding while its process was down — ends cancelled,
// its end written, instead of failing to start (and being recovered
// again with the cancel forgotten); nothing executes again. A node its
// log shows started ends there: completed from its checkpoint when it had
// succeeded, cancelled when it was in flight.
func TestRecoverUnderACancelledContextEndsCancelled(t *testing.T) {
	t.Parallel()
	g := newGraph("stop").node("s", "start").node("a", "step").node("b", "step", `{"effect":"external"}`).flow("s", "a").flow("a", "b").build()
	t.Run("before b", func(t *testing.T) {
		t.Parallel()
		k, mem := newKit(t), newMem()
		crashBeforeB(t, k, mem, g, "stop", "srv-1", time.Hour)
		// How much of the log the crash let through varies: a node whose
		// start it holds ends completed (it had succeeded), one it does
		// not hold is skipped.
		crashed, err := mem.Events(context.Background(), "stop", 0, 0)
		require.NoError(t, err)
		want := runtime.EventNodeSkipped
		if lastOf(crashed, "s") != "" {
			want = runtime.EventNodeCompleted
		}
		log := recoverCancelled(t, k, mem, g, "stop")
		require.Equal(t, want, lastOf(log, "s"), "s had succeeded")
	})
	t.Run("while b runs", func(t *testing.T) {
		t.Parallel()
		k, mem := newKit(t), newMem()
		started, _ := k.hold("b")
		ctx, kill := context.WithCancel(context.Background())
		cs := &crashStore{Store: mem, kill: kill}
		dead := k.engine(t, cs, func(c *runtime.Config) { c.Owner = "srv-1"; c.LeaseTTL = time.Hour })
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = dead.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "stop", Input: "x"})
		}()
		<-started
		cs.die()
		<-done
		log := recoverCancelled(t, k, mem, g, "stop")
		require.Equal(t, runtime.EventNodeCancelled, lastOf(log, "b"), "b was in flight")
		require.Equal(t, runtime.EventNodeCompleted, lastOf(log, "a"))
	})
}

// recoverCancelled recovers run id of g, crashed under owner srv-1, under
// a cancelled context, and returns its log.
func recoverCancelled(t *testing.T, k *kit, mem runtime.Store, g *runtime.Graph, id string) []runtime.Event {
	t.Helper()
	before := k.execCount("b")
	claimed := make(chan *runtime.ClaimedRun, 1)
	restarted := k.engine(t, mem, func(c *runtime.Config) { c.Owner = "srv-1" })
	n, err := restarted.RecoverExpired(context.Background(), runtime.RecoveryConfig{
		Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
			return runtime.RecoverRequest{Graph: g}, nil
		},
		Launch: func(_ *runtime.RunRecord, run *runtime.ClaimedRun) error {
			claimed <- run
			return nil
		},
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("cancelled while its process was down"))
	res, err := (<-claimed).Start(ctx)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	rec, err := mem.GetRun(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status, "the end is written")
	require.Equal(t, before, k.execCount("b"), "nothing executes again")
	log, err := mem.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	checkLifecycle(t, log)
	require.Equal(t, runtime.EventRunCancelled, log[len(log)-1].Type)
	return log
}

// lastOf is the type of node's last event in log.
func lastOf(log []runtime.Event, node string) runtime.EventType {
	var t runtime.EventType
	for _, ev := range log {
		if ev.NodeID == node {
			t = ev.Type
		}
	}
	return t
}

// staleOwned lists, besides the store's own answer, runs that were
// running under the owner when a listing read them and have ended since.
type staleOwned struct {
	*memory.Store
	ended []string
}

func (s staleOwned) OwnedRuns(ctx context.Context, owner string, limit int) ([]string, error) {
	ids, err := s.Store.OwnedRuns(ctx, owner, limit)
	return append(ids, s.ended...), err
}

// A run that ends between a recovery pass listing its owner's runs and
// claiming one is left as it ended: nothing prepares, launches or
// resumes it, and the pass's claim is given back.
func TestRecoverSkipsRunsThatEndedMeanwhile(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	mem := newMem()
	g := newGraph("ended").node("s", "start").node("a", "step").flow("s", "a").build()
	e := k.engine(t, mem, func(c *runtime.Config) { c.Owner = "srv-1" })
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "done", Input: "x"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	before, err := mem.GetRun(context.Background(), "done")
	require.NoError(t, err)

	restarted := k.engine(t, staleOwned{Store: mem, ended: []string{"done"}}, func(c *runtime.Config) { c.Owner = "srv-1" })
	var prepared, launched atomic.Int32
	n, err := restarted.RecoverExpired(context.Background(), runtime.RecoveryConfig{
		Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
			prepared.Add(1)
			return runtime.RecoverRequest{Graph: g}, nil
		},
		Launch: func(*runtime.RunRecord, *runtime.ClaimedRun) error {
			launched.Add(1)
			return nil
		},
	})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, prepared.Load(), "an ended run is not prepared for recovery")
	require.Zero(t, launched.Load())
	after, err := mem.GetRun(context.Background(), "done")
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, after.Status)
	require.Equal(t, before.LastSeq, after.LastSeq)
	_, err = mem.ClaimRun(context.Background(), "done", "srv-2", time.Minute)
	require.NoError(t, err, "the pass gave its claim back")
}

// A continued run starts from its parent's checkpoints and the answers
// it was given, which are not its progress: in every durability mode
// (exit mode writes no checkpoint between a run's start and end) a crash
// of the continuation recovers it from the same point. The parent's
// succeeded nodes replay, the interrupt keeps its answer, and a fork
// executes again what came after its seq.
func TestRecoverContinuedRunKeepsItsStartingPoint(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Durability{runtime.DurabilitySync, runtime.DurabilityBatched, runtime.DurabilityExit} {
		t.Run(string(mode)+"/answered interrupt", func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			same := func(c *runtime.Config) { c.Owner = "server-1"; c.Durability = mode }
			g := newGraph("answered").node("s", "start").node("a", "step", `{"effect":"external"}`).
				node("ask", "step", `{"interrupt":"approve"}`).node("b", "step", `{"effect":"external"}`).
				flow("s", "a").flow("a", "ask").flow("ask", "b").build()
			res, err := k.engine(t, mem, same).Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "parent", Input: "x"})
			require.NoError(t, err)
			require.Equal(t, runtime.RunInterrupted, res.Status)

			crashWhileBRuns(t, k, mem, same, runtime.ResumeRequest{RunID: "parent", NewRunID: "child", Graph: g, Value: "yes"})
			res, err = k.engine(t, mem, same).Recover(context.Background(), runtime.RecoverRequest{RunID: "child", Graph: g})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status, "the answer was given again, not asked anew")
			out, _ := res.Output("b")
			require.Equal(t, "b(map[answer:yes])", out)
			require.Equal(t, 1, k.execCount("a"), "the parent's succeeded node replays")
			require.Equal(t, 2, k.execCount("b"), "the node the crash cut short runs once more")
			log, err := mem.Events(context.Background(), "child", 0, 0)
			require.NoError(t, err)
			checkLifecycle(t, log)
		})
		t.Run(string(mode)+"/fork", func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			same := func(c *runtime.Config) { c.Owner = "server-1"; c.Durability = mode }
			g := newGraph("fork").node("s", "start").node("a", "step", `{"effect":"external"}`).
				node("b", "step", `{"effect":"external"}`).node("c", "step", `{"effect":"external"}`).
				flow("s", "a").flow("a", "b").flow("b", "c").build()
			res, err := k.engine(t, mem, same).Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "parent", Input: "x"})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			parentLog, err := mem.Events(context.Background(), "parent", 0, 0)
			require.NoError(t, err)
			var atSeq int64
			for _, ev := range parentLog {
				if ev.Type == runtime.EventNodeCompleted && ev.NodeID == "a" {
					atSeq = ev.Seq
				}
			}
			require.NotZero(t, atSeq)

			crashWhileBRuns(t, k, mem, same, runtime.ResumeRequest{RunID: "parent", NewRunID: "child", Graph: g, AtSeq: atSeq})
			res, err = k.engine(t, mem, same).Recover(context.Background(), runtime.RecoverRequest{RunID: "child", Graph: g})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			require.Equal(t, 1, k.execCount("a"), "what the fork kept replays")
			require.Equal(t, 3, k.execCount("b"), "the parent's, the one the crash cut short, the recovered one")
			require.Equal(t, 2, k.execCount("c"), "what came after the fork's seq executes again, not replays the parent's")
			log, err := mem.Events(context.Background(), "child", 0, 0)
			require.NoError(t, err)
			checkLifecycle(t, log)
		})
	}
}

// crashWhileBRuns continues a run with req on an engine whose process
// dies while node b executes, and leaves the continuation running in mem.
func crashWhileBRuns(t *testing.T, k *kit, mem runtime.Store, mod func(*runtime.Config), req runtime.ResumeRequest) {
	t.Helper()
	started, _ := k.hold("b")
	ctx, kill := context.WithCancel(context.Background())
	cs := &crashStore{Store: mem, kill: kill}
	dead := k.engine(t, cs, mod)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = dead.Resume(ctx, req)
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("b never started")
	}
	cs.die()
	<-done
	rec, err := mem.GetRun(context.Background(), req.NewRunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunRunning, rec.Status, "the dead process never finished the run")
}
