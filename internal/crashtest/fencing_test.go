package crashtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/pgtest"
	"chatgraph/runtime"
	"chatgraph/runtime/store/postgres"
)

// openShared opens two independent stores (two connection pools, as two
// processes would have) on one fresh schema, dropped after the test.
func openShared(t *testing.T) (*postgres.Store, *postgres.Store) {
	ctx := context.Background()
	schema := pgtest.Schema(t, "fence")
	open := func() *postgres.Store {
		st, err := postgres.Open(ctx, postgres.Config{URL: pgtest.URL(), Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return open(), open()
}

type ledger struct {
	mu   sync.Mutex
	runs map[string]map[string][]string // run -> node -> engines that executed it
}

func (l *ledger) add(run, node, engine string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs[run] == nil {
		l.runs[run] = map[string][]string{}
	}
	l.runs[run][node] = append(l.runs[run][node], engine)
}

func twoNodeRegistry(name string, l *ledger, hold <-chan struct{}) *runtime.Registry {
	reg := runtime.NewRegistry()
	exec := func(*runtime.Node) (runtime.Executor, error) {
		return runtime.ExecutorFunc(func(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
			l.add(fc.RunID(), n.ID, name)
			if hold != nil && n.ID == "b" {
				<-hold // this process is paused
			}
			return runtime.Result{Output: fmt.Sprint(n.ID, "(", in.First(), ")")}, nil
		}), nil
	}
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	reg.MustRegister(runtime.NodeType{Name: "src", Entry: true, Ports: []runtime.Port{out}, New: exec})
	reg.MustRegister(runtime.NodeType{Name: "step", New: exec, Ports: []runtime.Port{{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow}, out}})
	return reg
}

func twoNodeGraph() *runtime.Graph {
	return &runtime.Graph{ID: "fence", PlanVersion: 1,
		Nodes: []runtime.Node{{ID: "a", Type: "src"}, {ID: "b", Type: "step"}},
		Edges: []runtime.Edge{{ID: "e", Source: "a", SourceHandle: "out", Target: "b", TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}}}
}

// Two engines on one Postgres race to recover 1,000 orphaned runs: every
// run is taken by exactly one of them and no node is executed by both.
func TestTwoEnginesRaceOverOrphanedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 runs on Postgres")
	}
	stA, stB := openShared(t)
	ctx := context.Background()
	const runs = 1000
	now := time.Now()
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf("o%04d", i)
		require.NoError(t, stA.CreateRun(ctx, &runtime.RunRecord{ID: id, RootID: id, GraphID: "fence", PlanVersion: 1,
			EntryNodeIDs: []string{"a"}, Input: id, Status: runtime.RunRunning, CreatedAt: now, UpdatedAt: now}))
	}
	l := &ledger{runs: map[string]map[string][]string{}}
	g := twoNodeGraph()
	var wg sync.WaitGroup
	recovered := map[string]int{}
	var rmu sync.Mutex
	for _, side := range []struct {
		name string
		st   *postgres.Store
	}{{"A", stA}, {"B", stB}} {
		e, err := runtime.NewEngine(runtime.Config{Registry: twoNodeRegistry(side.name, l, nil), Store: side.st, Owner: side.name,
			Durability: runtime.DurabilityBatched})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer e.Close()
			cfg := runtime.RecoveryConfig{Batch: 50,
				Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
					return runtime.RecoverRequest{Graph: g}, nil
				},
				Done: func(rec *runtime.RunRecord, res *runtime.RunResult, err error) {
					if err == nil && res.Status == runtime.RunCompleted {
						rmu.Lock()
						recovered[side.name]++
						rmu.Unlock()
					}
				}}
			for {
				n, err := e.RecoverExpired(ctx, cfg)
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					e.WaitRecovered()
					if n, _ = e.RecoverExpired(ctx, cfg); n == 0 {
						e.WaitRecovered()
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("recovered: A %d, B %d", recovered["A"], recovered["B"])
	require.Equal(t, runs, recovered["A"]+recovered["B"])
	require.Len(t, l.runs, runs)
	for id, nodes := range l.runs {
		require.Len(t, nodes["a"], 1, "%s/a executed once", id)
		require.Len(t, nodes["b"], 1, "%s/b executed once", id)
		require.Equal(t, nodes["a"][0], nodes["b"][0], "%s ran in one engine only", id)
		rec, err := stB.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, rec.Status)
	}
}

// paused stops renewing leases, as a process stuck in a GC pause or cut off
// from the database would.
type paused struct{ *postgres.Store }

func (p paused) RenewLease(_ context.Context, l runtime.Lease, _ time.Duration) (runtime.Lease, error) {
	return l, nil
}

func (p paused) RenewLeases(_ context.Context, leases []runtime.Lease, _ time.Duration) ([]runtime.Lease, []error, error) {
	return leases, make([]error, len(leases)), nil
}

// A holder paused past its lease loses the run: another engine takes it
// over, and when the paused one wakes up its commit is rejected.
func TestPausedHolderIsFencedOff(t *testing.T) {
	stA, stB := openShared(t)
	ctx := context.Background()
	l := &ledger{runs: map[string]map[string][]string{}}
	hold := make(chan struct{})
	a, err := runtime.NewEngine(runtime.Config{Registry: twoNodeRegistry("A", l, hold), Store: paused{stA}, Owner: "A", LeaseTTL: 200 * time.Millisecond})
	require.NoError(t, err)
	defer a.Close()
	b, err := runtime.NewEngine(runtime.Config{Registry: twoNodeRegistry("B", l, nil), Store: stB, Owner: "B"})
	require.NoError(t, err)
	defer b.Close()
	g := twoNodeGraph()
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "p1", Input: "x"})
		aDone <- err
	}()
	// A is inside b's handler, paused; its lease runs out.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.runs["p1"]["b"]) == 1
	}, 10*time.Second, 10*time.Millisecond)
	var res *runtime.RunResult
	require.Eventually(t, func() bool {
		res, err = b.Recover(ctx, runtime.RecoverRequest{RunID: "p1", Graph: g})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "B takes the run over once A's lease expired")
	require.Equal(t, runtime.RunCompleted, res.Status)
	close(hold) // A wakes up and tries to commit
	aErr := <-aDone
	require.ErrorIs(t, aErr, runtime.ErrFenced, "the paused holder's commit is rejected")
	rec, err := stB.GetRun(ctx, "p1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, rec.Status, "B's outcome stands")
	evs, err := stB.Events(ctx, "p1", 0, 0)
	require.NoError(t, err)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq)
	}
	require.Equal(t, runtime.EventRunCompleted, evs[len(evs)-1].Type)
}
