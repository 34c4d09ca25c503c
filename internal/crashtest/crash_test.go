package crashtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/sqlite"
)

const (
	envWorker  = "CRASHTEST_WORKER"
	envDir     = "CRASHTEST_DIR"
	envRuns    = "CRASHTEST_RUNS"
	envFP      = "CRASHTEST_FAILPOINT"
	backoffMs  = 150
	workerName = "crash-worker"
)

// Failpoint phases.
const (
	beforeHandler = "before_handler"
	beforeCommit  = "before_commit"
	afterCommit   = "after_commit"
	inBackoff     = "in_backoff"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		os.Exit(worker())
	}
	if os.Getenv(envTurnWorker) == "1" {
		os.Exit(turnWorker())
	}
	if os.Getenv(envStreamWorker) == "1" {
		os.Exit(streamWorker())
	}
	os.Exit(m.Run())
}

// graph: s -> a -> b -> c and s -> d -> c; d fails its first attempt and
// retries after a fixed backoff, so every run passes through a backoff.
func graph() *runtime.Graph {
	flow := runtime.EdgeData{Channel: runtime.ChannelFlow}
	e := func(id, s, t string) runtime.Edge {
		return runtime.Edge{ID: id, Source: s, SourceHandle: "out", Target: t, TargetHandle: "in", Data: flow}
	}
	return &runtime.Graph{ID: "crash", PlanVersion: 1,
		Nodes: []runtime.Node{{ID: "s", Type: "src"}, {ID: "a", Type: "step"}, {ID: "b", Type: "step", Data: []byte(`{"effect":"external"}`)},
			{ID: "c", Type: "step"}, {ID: "d", Type: "flaky", Data: []byte(fmt.Sprintf(`{"retry":{"maxAttempts":3,"initialDelayMs":%d,"backoff":"fixed"}}`, backoffMs))}},
		Edges: []runtime.Edge{e("e1", "s", "a"), e("e2", "a", "b"), e("e3", "b", "c"), e("e4", "s", "d"), e("e5", "d", "c")}}
}

var nodeIDs = []string{"s", "a", "b", "c", "d"}

// want is the no-crash result of run id.
func want(id string) string { return "c(b(a(s(" + id + ")))d(s(" + id + ")))" }

type failpoint struct {
	run, node, phase string
	at               time.Time // when the killed worker was reaped
}

func (f failpoint) String() string { return f.run + "|" + f.node + "|" + f.phase }

func parseFailpoint(s string) failpoint {
	p := strings.Split(s, "|")
	if len(p) != 3 {
		return failpoint{}
	}
	return failpoint{run: p[0], node: p[1], phase: p[2]}
}

func die() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }

// worker is the process that gets killed: it starts every run not yet
// created, recovers every run still running, and exits 0 when all ended.
func worker() int {
	dir := os.Getenv(envDir)
	n, _ := strconv.Atoi(os.Getenv(envRuns))
	fp := parseFailpoint(os.Getenv(envFP))
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "state.db")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	counter, err := os.OpenFile(filepath.Join(dir, "executions"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 2
	}
	var cmu sync.Mutex
	record := func(fc *runtime.FlowContext) {
		cmu.Lock()
		defer cmu.Unlock()
		fmt.Fprintf(counter, "%s %s %d %s %d\n", fc.RunID(), fc.NodeID(), fc.Attempt(), fc.AttemptID(), time.Now().UnixNano())
	}
	exec := func(fail bool) runtime.Factory {
		return func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(_ context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				if fp.phase == beforeHandler && fc.RunID() == fp.run && n.ID == fp.node {
					die()
				}
				record(fc)
				if fail && fc.Attempt() == 1 {
					return runtime.Result{}, runtime.Errorf("transient", "first attempt fails")
				}
				out := n.ID + "("
				for _, i := range in {
					out += fmt.Sprint(i.Value)
				}
				return runtime.Result{Output: out + ")"}, nil
			}), nil
		}
	}
	reg := runtime.NewRegistry()
	outP := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	inP := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}
	reg.MustRegister(runtime.NodeType{Name: "src", Entry: true, Ports: []runtime.Port{outP}, New: exec(false)})
	reg.MustRegister(runtime.NodeType{Name: "step", Ports: []runtime.Port{inP, outP}, New: exec(false)})
	reg.MustRegister(runtime.NodeType{Name: "flaky", Ports: []runtime.Port{inP, outP}, New: exec(true)})
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: &fpStore{Store: st, fp: fp}, Owner: workerName, LeaseTTL: 5 * time.Second})
	if err != nil {
		return 2
	}
	g := graph()
	// Runs go one after the other, so each crash costs little progress;
	// after the run holding the failpoint the worker stops (exit 3) even if
	// the failpoint was not hit, and the parent picks the next one.
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("run-%02d", i)
		rec, err := st.GetRun(ctx, id)
		if err == nil && rec.Status != runtime.RunRunning {
			continue
		}
		var res *runtime.RunResult
		if errors.Is(err, runtime.ErrRunNotFound) {
			res, err = eng.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: id, Input: id})
		} else {
			res, err = eng.Recover(ctx, runtime.RecoverRequest{RunID: id, Graph: g})
		}
		if err != nil || res.Status != runtime.RunCompleted {
			fmt.Fprintln(os.Stderr, id, err, res)
			return 1
		}
		if id == fp.run {
			return 3
		}
	}
	return 0
}

// fpStore kills the worker around the write that commits a node.
type fpStore struct {
	*sqlite.Store
	fp failpoint
}

func (s *fpStore) hit(cp *runtime.Checkpoint) (before, after bool) {
	if cp.RunID != s.fp.run || cp.NodeID != s.fp.node {
		return false, false
	}
	switch s.fp.phase {
	case beforeCommit:
		return cp.Status == runtime.NodeSucceeded, false
	case afterCommit:
		return false, cp.Status == runtime.NodeSucceeded
	case inBackoff:
		return false, !cp.NextAttemptAt.IsZero()
	}
	return false, false
}

func (s *fpStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	before, after := s.hit(cp)
	if before {
		die()
	}
	err := s.Store.SaveCheckpoint(ctx, cp)
	if after && err == nil {
		die()
	}
	return err
}

func (s *fpStore) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	var before, after bool
	for _, b := range bs {
		for _, cp := range b.Checkpoints {
			x, y := s.hit(cp)
			before, after = before || x, after || y
		}
	}
	if before {
		die()
	}
	err := runtimeApply(ctx, s.Store, bs)
	if after && err == nil {
		die()
	}
	return err
}

// runtimeApply applies batches in one transaction when the store can.
func runtimeApply(ctx context.Context, st *sqlite.Store, bs []runtime.WriteBatch) error {
	if bw, ok := any(st).(runtime.BatchWriter); ok {
		return bw.WriteBatches(ctx, bs)
	}
	for _, b := range bs {
		for _, cp := range b.Checkpoints {
			if err := st.SaveCheckpoint(ctx, cp); err != nil {
				return err
			}
		}
		if len(b.Events) > 0 {
			if err := st.AppendEvents(ctx, b.RunID, b.Token, b.Events); err != nil {
				return err
			}
		}
	}
	return nil
}

type execution struct {
	run, node string
	attempt   int
	attemptID string
	at        time.Time
}

func readExecutions(t *testing.T, dir string) []execution {
	f, err := os.Open(filepath.Join(dir, "executions"))
	require.NoError(t, err)
	defer f.Close()
	var out []execution
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) != 5 {
			continue // a line cut by the kill
		}
		a, _ := strconv.Atoi(p[2])
		ns, _ := strconv.ParseInt(p[4], 10, 64)
		out = append(out, execution{p[0], p[1], a, p[3], time.Unix(0, ns)})
	}
	return out
}

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test re-executes the binary many times")
	}
	const runs = 25
	const minCrashes = 50
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	t.Logf("seed dir %s", dir)
	ctx := context.Background()
	var crashes []failpoint
	done := false
	for iter := 0; iter < 1000 && !done; iter++ {
		fp := pickFailpoint(t, ctx, dir, runs, rng, len(crashes) >= minCrashes)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=1", envDir+"="+dir, envRuns+"="+strconv.Itoa(runs), envFP+"="+fp.String())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			done = true
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			// the failpoint's run finished without hitting it
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled():
			fp.at = time.Now()
			crashes = append(crashes, fp)
		default:
			t.Fatalf("worker failed (failpoint %s): %v\n%s", fp, err, out)
		}
	}
	require.True(t, done, "the runs finished")
	require.GreaterOrEqual(t, len(crashes), minCrashes)
	t.Logf("%d crashes", len(crashes))
	var reruns int
	defer func() { t.Logf("%d re-executions of an in-flight attempt", reruns) }()

	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "state.db")})
	require.NoError(t, err)
	defer st.Close()
	// A crash may cost every node in flight at that moment one more
	// execution, always of the same attempt (same attempt id); a node whose
	// success was committed never runs again.
	crashesIn := map[string]int{}
	committed := map[string]time.Time{}
	for _, c := range crashes {
		crashesIn[c.run]++
		if c.phase == afterCommit {
			committed[c.run+"/"+c.node] = c.at
		}
	}
	execs := readExecutions(t, dir)
	count := map[string]int{}
	attempts := map[string]map[string]bool{}
	byAttempt := map[string][]execution{}
	for _, x := range execs {
		k := x.run + "/" + x.node
		count[k]++
		if attempts[k] == nil {
			attempts[k] = map[string]bool{}
		}
		attempts[k][x.attemptID] = true
		byAttempt[k] = append(byAttempt[k], x)
		if at, ok := committed[k]; ok {
			require.True(t, x.at.Before(at), "%s ran again after its success was committed", k)
		}
	}
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf("run-%02d", i)
		rec, err := st.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, rec.Status, id)
		cps, err := st.Checkpoints(ctx, id)
		require.NoError(t, err)
		outs := map[string]any{}
		for _, cp := range cps {
			require.Equal(t, runtime.NodeSucceeded, cp.Status, "%s %s", id, cp.NodeID)
			outs[cp.NodeID] = cp.Output
		}
		require.Equal(t, want(id), outs["c"], "the no-crash result")
		extra := 0
		for _, n := range nodeIDs {
			k := id + "/" + n
			base := 1
			if n == "d" {
				base = 2 // its first attempt always fails
			}
			require.Len(t, attempts[k], base, "%s: a crash never starts a new attempt", k)
			require.GreaterOrEqual(t, count[k], base, k)
			require.LessOrEqual(t, count[k]-base, crashesIn[id], "%s ran more than once more per crash", k)
			extra += count[k] - base
		}
		// A crash costs a re-execution of each node whose success was
		// not yet committed. Pure nodes start before the commit of the
		// nodes before them, so that is s, a and d at most (a and d start
		// once s is done; b, an external effect, waits until s and a are
		// durable), or b, d and c: never more than three of the five.
		require.LessOrEqual(t, extra, 3*crashesIn[id], id)
		reruns += extra
		// The backoff is honoured across crashes and attempts stay bounded.
		d := byAttempt[id+"/d"]
		for j := 1; j < len(d); j++ {
			if d[j].attempt > d[j-1].attempt && d[j-1].attempt == 1 {
				require.GreaterOrEqual(t, d[j].at.Sub(d[0].at), time.Duration(backoffMs)*time.Millisecond, "%s retried early", id)
			}
			require.LessOrEqual(t, d[j].attempt, 3)
		}
		evs, err := st.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		checkLog(t, id, evs)
	}
}

// pickFailpoint chooses a node of an unfinished run that has not
// succeeded yet, and a phase; once enough crashes happened it returns an
// empty failpoint so the worker can finish.
func pickFailpoint(t *testing.T, ctx context.Context, dir string, runs int, rng *rand.Rand, enough bool) failpoint {
	if enough {
		return failpoint{}
	}
	path := filepath.Join(dir, "state.db")
	var cands []failpoint
	if _, err := os.Stat(path); err != nil {
		for _, n := range nodeIDs {
			cands = append(cands, failpoint{run: "run-00", node: n})
		}
	} else {
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		require.NoError(t, err)
		for i := 0; i < runs; i++ {
			id := fmt.Sprintf("run-%02d", i)
			done := map[string]bool{}
			if cps, err := st.Checkpoints(ctx, id); err == nil {
				for _, cp := range cps {
					done[cp.NodeID] = cp.Status == runtime.NodeSucceeded
				}
			}
			for _, n := range nodeIDs {
				if !done[n] {
					cands = append(cands, failpoint{run: id, node: n})
				}
			}
			if len(cands) > 0 {
				break // the first unfinished run: the one the worker is about to run
			}
		}
		require.NoError(t, st.Close())
	}
	if len(cands) == 0 {
		return failpoint{}
	}
	fp := cands[rng.IntN(len(cands))]
	phases := []string{beforeHandler, beforeCommit, afterCommit}
	if fp.node == "d" {
		phases = append(phases, inBackoff)
	}
	fp.phase = phases[rng.IntN(len(phases))]
	return fp
}

// checkLog asserts the lifecycle contract over a run's stored log.
func checkLog(t *testing.T, id string, evs []runtime.Event) {
	t.Helper()
	require.NotEmpty(t, evs, id)
	require.Equal(t, runtime.EventRunStarted, evs[0].Type, id)
	require.Equal(t, runtime.EventRunCompleted, evs[len(evs)-1].Type, id)
	started, ended := map[string]int{}, map[string]int{}
	runStarts := 0
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq, "%s: seq has no gaps", id)
		switch ev.Type {
		case runtime.EventRunStarted:
			runStarts++
		case runtime.EventNodeStarted:
			started[ev.NodeID]++
		case runtime.EventNodeCompleted, runtime.EventNodeFailed, runtime.EventNodeCancelled, runtime.EventNodeInterrupted:
			require.Equal(t, 1, started[ev.NodeID], "%s: %s ended before it started", id, ev.NodeID)
			ended[ev.NodeID]++
		}
	}
	require.Equal(t, 1, runStarts, id)
	for _, n := range nodeIDs {
		require.Equal(t, 1, started[n], "%s: %s has one node_started", id, n)
		require.Equal(t, 1, ended[n], "%s: %s has one terminal event", id, n)
	}
}
