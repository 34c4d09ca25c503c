package durabench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"chatgraph/internal/pgtest"
	"chatgraph/runtime"
	"chatgraph/runtime/store/postgres"
	"chatgraph/runtime/store/sqlite"
	"chatgraph/transport"
)

func registry() *runtime.Registry {
	reg := runtime.NewRegistry()
	pass := runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
		return runtime.Result{Output: in.First()}, nil
	})
	newPass := func(*runtime.Node) (runtime.Executor, error) { return pass, nil }
	out := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	reg.MustRegister(runtime.NodeType{Name: "src", Entry: true, Ports: []runtime.Port{out}, New: newPass})
	in := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}
	reg.MustRegister(runtime.NodeType{Name: "pass", New: newPass, Ports: []runtime.Port{in, out}})
	// effect is pass with an external effect: in sync mode each waits
	// until everything before it is durable, one commit per step.
	reg.MustRegister(runtime.NodeType{Name: "effect", New: newPass, Ports: []runtime.Port{in, out},
		DefaultEffect: runtime.EffectExternal})
	return reg
}

func chain(n int) *runtime.Graph { return chainOf(n, "pass") }

// chainOf is a chain of n nodes: a source, then n-1 of type typ.
func chainOf(n int, typ string) *runtime.Graph {
	g := &runtime.Graph{ID: fmt.Sprintf("chain%d-%s", n, typ), PlanVersion: 1}
	g.Nodes = append(g.Nodes, runtime.Node{ID: "n0", Type: "src"})
	for i := 1; i < n; i++ {
		g.Nodes = append(g.Nodes, runtime.Node{ID: fmt.Sprintf("n%d", i), Type: typ})
		g.Edges = append(g.Edges, runtime.Edge{ID: fmt.Sprintf("e%d", i), Source: fmt.Sprintf("n%d", i-1), SourceHandle: "out",
			Target: fmt.Sprintf("n%d", i), TargetHandle: "in", Data: runtime.EdgeData{Channel: runtime.ChannelFlow}})
	}
	return g
}

// observer is what the server gives the engine as its StoreObserver
// (transport.StoreObserver: every store call the engine makes observed in
// the store latency histogram). It also counts the calls that are store
// transactions into commits, when given.
func observer(commits *atomic.Int64) runtime.StoreObserver {
	lat := transport.StoreObserver(prometheus.NewRegistry())
	return func(op string, d time.Duration, err error) {
		lat(op, d, err)
		if commits != nil && runtime.WriteOp(op) {
			commits.Add(1)
		}
	}
}

func openSQLite(b *testing.B) *sqlite.Store {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// engine builds an engine as the server does: on the store itself, with
// a StoreObserver (so the engine sees every capability of the store).
func engine(b *testing.B, st runtime.Store, mode runtime.Durability, commits *atomic.Int64) *runtime.Engine {
	e, err := runtime.NewEngine(runtime.Config{Registry: registry(), Store: st, Durability: mode, StoreObserver: observer(commits)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	return e
}

var seq atomic.Int64

func runChain(b *testing.B, e *runtime.Engine, p *runtime.Plan) {
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Plan: p, RunID: fmt.Sprintf("b%d", seq.Add(1)), Input: "x"})
	if err != nil || res.Status != runtime.RunCompleted {
		b.Fatalf("run: %v %+v", err, res)
	}
}

func w4(b *testing.B, mode runtime.Durability) { w4Of(b, mode, "pass") }

func w4Of(b *testing.B, mode runtime.Durability, typ string) {
	var commits atomic.Int64
	e := engine(b, openSQLite(b), mode, &commits)
	p, err := e.Compile(chainOf(100, typ))
	if err != nil {
		b.Fatal(err)
	}
	runChain(b, e, p) // warm up
	commits.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		runChain(b, e, p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/node")
	b.ReportMetric(float64(commits.Load())/float64(b.N)/100, "commits/node")
}

// BenchmarkW4SQLiteSync: chain of 100 in sync mode, every transition
// committed at once (the chain's nodes are pure: none waits for its commit).
func BenchmarkW4SQLiteSync(b *testing.B) { w4(b, runtime.DurabilitySync) }

// BenchmarkW4SQLiteSyncEffects: chain of 100 nodes with an external
// effect in sync mode: each waits until the step before it is durable —
// one commit per step.
func BenchmarkW4SQLiteSyncEffects(b *testing.B) { w4Of(b, runtime.DurabilitySync, "effect") }

// BenchmarkW4SQLiteBatched: chain of 100, group commit.
func BenchmarkW4SQLiteBatched(b *testing.B) { w4(b, runtime.DurabilityBatched) }

// BenchmarkW4SQLiteExit: chain of 100, persisted at the end.
func BenchmarkW4SQLiteExit(b *testing.B) { w4(b, runtime.DurabilityExit) }

// BenchmarkW4SQLiteBatchedConcurrent: 50 runs of 5-node chains in flight
// at once in batched mode; reports node checkpoints per second.
func BenchmarkW4SQLiteBatchedConcurrent(b *testing.B) {
	var commits atomic.Int64
	e := engine(b, openSQLite(b), runtime.DurabilityBatched, &commits)
	p, err := e.Compile(chain(5))
	if err != nil {
		b.Fatal(err)
	}
	commits.Store(0)
	b.ResetTimer()
	start := time.Now()
	work := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				runChain(b, e, p)
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	el := time.Since(start)
	// Each node writes a running and a terminal checkpoint.
	b.ReportMetric(float64(b.N*5*2)/el.Seconds(), "checkpoints/s")
	b.ReportMetric(float64(b.N)/el.Seconds(), "runs/s")
	b.ReportMetric(float64(commits.Load())/float64(b.N*5), "commits/node")
}

// BenchmarkRecovery1000: 1,000 runs whose process died mid-chain are
// claimed and finished by a fresh engine. Reports the time until all are
// claimed (resumed) and until all finish.
func BenchmarkRecovery1000(b *testing.B) {
	const runs = 1000
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		path := filepath.Join(dir, "rec.db")
		st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		// Effect nodes: each step waits for its commit, so a run writes a
		// batch a step (a chain of pure nodes commits in one or two, and
		// would finish before its writes stop).
		g := chainOf(10, "effect")
		// A "dead" engine: it creates the runs and gets half-way, then its
		// writes stop (its process is gone) and its leases are short.
		dead := &dying{Store: st, after: 5}
		de, err := runtime.NewEngine(runtime.Config{Registry: registry(), Store: dead, Owner: "dead", LeaseTTL: 50 * time.Millisecond,
			StoreObserver: observer(nil)})
		if err != nil {
			b.Fatal(err)
		}
		p, _ := de.Compile(g)
		var wg sync.WaitGroup
		for i := 0; i < runs; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				dead.cancel.Store(i, cancel)
				_, _ = de.Invoke(ctx, runtime.RunRequest{Plan: p, RunID: fmt.Sprintf("r%04d", i), Input: "x"})
				cancel()
			}()
		}
		wg.Wait()
		de.Close()
		time.Sleep(60 * time.Millisecond) // the dead leases expire
		// The engine that recovers them is built as the server's is.
		fresh, err := runtime.NewEngine(runtime.Config{Registry: registry(), Store: st, Owner: "fresh", StoreObserver: observer(nil)})
		if err != nil {
			b.Fatal(err)
		}
		var finished sync.WaitGroup
		finished.Add(runs)
		cfg := runtime.RecoveryConfig{Batch: runs,
			Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
				return runtime.RecoverRequest{Plan: p}, nil
			},
			Done: func(_ *runtime.RunRecord, res *runtime.RunResult, err error) {
				if err != nil || res.Status != runtime.RunCompleted {
					b.Errorf("recovered run: %v %+v", err, res)
				}
				finished.Done()
			}}
		b.StartTimer()
		start := time.Now()
		n, err := fresh.RecoverExpired(context.Background(), cfg)
		claimed := time.Since(start)
		if err != nil || n != runs {
			b.Fatalf("recovered %d of %d: %v", n, runs, err)
		}
		finished.Wait()
		all := time.Since(start)
		b.StopTimer()
		fresh.WaitRecovered()
		fresh.Close()
		b.ReportMetric(float64(claimed.Milliseconds()), "ms-resumed")
		b.ReportMetric(float64(all.Milliseconds()), "ms-finished")
		_ = st.Close()
		_ = os.RemoveAll(dir)
		b.StartTimer()
	}
}

// dying passes writes through until a run has written `after` batches,
// then drops that run's writes and cancels it, as if its process died.
type dying struct {
	*sqlite.Store
	after  int
	mu     sync.Mutex
	writes map[string]int
	cancel sync.Map // index -> cancel func (unused by the store itself)
}

func (d *dying) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	d.mu.Lock()
	if d.writes == nil {
		d.writes = map[string]int{}
	}
	var keep []runtime.WriteBatch
	for _, b := range bs {
		d.writes[b.RunID]++
		if d.writes[b.RunID] <= d.after {
			keep = append(keep, b)
		}
	}
	d.mu.Unlock()
	if len(keep) == 0 {
		return runtime.ErrFenced // the process is gone: nothing more is written
	}
	return d.Store.WriteBatches(ctx, keep)
}

func (d *dying) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	d.mu.Lock()
	dead := d.writes[r.ID] > d.after
	d.mu.Unlock()
	if dead {
		return runtime.ErrFenced
	}
	return d.Store.UpdateRun(ctx, r)
}

func (d *dying) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	return l, nil // a dead process renews nothing
}

func (d *dying) RenewLeases(_ context.Context, leases []runtime.Lease, _ time.Duration) ([]runtime.Lease, []error, error) {
	return leases, make([]error, len(leases)), nil
}

func (d *dying) ReleaseLease(context.Context, runtime.Lease) error { return nil }

// BenchmarkW4PostgresSync: chain of 100 over Postgres, sync durability.
func BenchmarkW4PostgresSync(b *testing.B) {
	st, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.URL(), Schema: pgtest.Schema(b, "w4bench")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	e := engine(b, st, runtime.DurabilitySync, nil)
	p, err := e.Compile(chain(100))
	if err != nil {
		b.Fatal(err)
	}
	runChain(b, e, p)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		runChain(b, e, p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/node")
}

// The engines above see every capability of the SQLite store: the
// recovery benchmark's dying store, which stands in for a dead process,
// hides none either.
func TestBenchEnginesSeeEveryCapability(t *testing.T) {
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "caps.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	caps := func(s runtime.Store) []string {
		e, err := runtime.NewEngine(runtime.Config{Registry: registry(), Store: s, StoreObserver: observer(nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.Capabilities()
	}
	want := []string{"Leaser", "BulkClaimer", "Inspector", "BatchWriter", "BatchFinisher", "RunStarter", "EffectLedger", "OwnerLister", "LeaseRenewer"}
	if got := caps(st); !slices.Equal(got, want) {
		t.Fatalf("engine on the SQLite store sees %v, want %v", got, want)
	}
	if got := caps(&dying{Store: st}); !slices.Equal(got, want) {
		t.Fatalf("engine on the dying store sees %v, want %v", got, want)
	}
}
