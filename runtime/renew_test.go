package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// renewLog is a memory store that records the runs of every RenewLeases
// call and refuses the renewal of the runs in fence.
type renewLog struct {
	*memory.Store
	fence map[string]bool

	mu    sync.Mutex
	calls [][]string
}

func (s *renewLog) RenewLeases(ctx context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.RunID
	}
	s.mu.Lock()
	s.calls = append(s.calls, ids)
	s.mu.Unlock()
	renewed, errs, err := s.Store.RenewLeases(ctx, leases, ttl)
	if err != nil {
		return nil, nil, err
	}
	for i, l := range leases {
		if s.fence[l.RunID] {
			renewed[i], errs[i] = runtime.Lease{}, fmt.Errorf("%w: run %s was claimed elsewhere", runtime.ErrFenced, l.RunID)
		}
	}
	return renewed, errs, nil
}

// An engine renews the leases of all its runs together: one store call a
// round (every sixth of the TTL), not one write per run and renewal. The
// leases stay live over many TTLs; a run whose renewal is refused loses
// its lease — it is cancelled with ErrLeaseLost and renewed no more —
// while the runs renewed in the same calls keep theirs and complete.
func TestLeasesAreRenewedTogether(t *testing.T) {
	t.Parallel()
	const runs, ttl = 8, 120 * time.Millisecond
	k := newKit(t)
	st := &renewLog{Store: newMem(), fence: map[string]bool{"renew-3": true}}
	var single atomic.Int64
	e := k.engine(t, st, func(c *runtime.Config) {
		c.LeaseTTL = ttl
		c.StoreObserver = func(op string, _ time.Duration, _ error) {
			if op == "renew_lease" {
				single.Add(1)
			}
		}
	})
	g := newGraph("renew").node("s", "start").node("a", "step", `{"sleepMs":700}`).flow("s", "a").build()
	type outcome struct {
		res *runtime.RunResult
		err error
	}
	out := make([]chan outcome, runs)
	start := time.Now()
	for i := range runs {
		out[i] = make(chan outcome, 1)
		go func() {
			res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: fmt.Sprintf("renew-%d", i)})
			out[i] <- outcome{res, err}
		}()
	}
	// Several TTLs in: only renewed leases keep a stranger out.
	time.Sleep(4 * ttl)
	for i := range runs {
		if i == 3 {
			continue
		}
		_, err := st.ClaimRun(context.Background(), fmt.Sprintf("renew-%d", i), "stranger", time.Hour)
		require.ErrorIs(t, err, runtime.ErrLeaseHeld, "run %d's lease was renewed", i)
	}
	for i := range runs {
		o := <-out[i]
		if i == 3 {
			lost := o.err
			if lost == nil {
				lost = o.res.Err
			}
			require.ErrorIs(t, lost, runtime.ErrLeaseLost, "the refused renewal cancels its run")
			continue
		}
		require.NoError(t, o.err)
		require.Equal(t, runtime.RunCompleted, o.res.Status, "run %d", i)
	}
	elapsed := time.Since(start)

	require.Zero(t, single.Load(), "no lease was renewed on its own")
	st.mu.Lock()
	defer st.mu.Unlock()
	per := map[string]int{}
	for _, ids := range st.calls {
		seen := map[string]bool{}
		for _, id := range ids {
			require.False(t, seen[id], "a call renews a lease once")
			seen[id] = true
			per[id]++
		}
	}
	rounds := int(elapsed/(ttl/6)) + 2
	require.LessOrEqual(t, len(st.calls), rounds, "at most one call a round")
	require.Equal(t, 1, per["renew-3"], "a lost lease is renewed no more")
	for i := range runs {
		if i != 3 {
			// Renewed once a round or every other: far more renewals than calls would allow one by one.
			require.GreaterOrEqual(t, per[fmt.Sprintf("renew-%d", i)], 3, "run %d", i)
		}
	}
	total := 0
	for _, n := range per {
		total += n
	}
	require.Greater(t, total, len(st.calls), "calls carry several leases")
}

// stalledRenewals is a memory store whose first RenewLeases call blocks
// until release is closed (after telling stalled): the renewing goroutine
// held up past the lease's TTL.
type stalledRenewals struct {
	*memory.Store
	once             sync.Once
	stalled, release chan struct{}
}

func (s *stalledRenewals) RenewLeases(ctx context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.stalled)
		<-s.release
	}
	return s.Store.RenewLeases(ctx, leases, ttl)
}

// A recovery pass of the engine a run executes on, coming while that
// run's renewals are late (its lease expired in the store), renews the
// lease instead of claiming the run: the run is neither fenced nor
// recovered, and completes once. (Before, the pass's bulk claim took it,
// the run lost its lease, and the next pass ran it again.)
func TestRecoveryDoesNotClaimItsOwnLateRun(t *testing.T) {
	t.Parallel()
	const ttl = 150 * time.Millisecond
	k := newKit(t)
	st := &stalledRenewals{Store: newMem(), stalled: make(chan struct{}), release: make(chan struct{})}
	e := k.engine(t, st, func(c *runtime.Config) { c.LeaseTTL = ttl; c.Owner = "srv-1" })
	g := newGraph("late").node("s", "start").node("a", "step", `{"sleepMs":900}`).flow("s", "a").build()
	type outcome struct {
		res *runtime.RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "late"})
		done <- outcome{res, err}
	}()
	<-st.stalled
	time.Sleep(2 * ttl) // the run's lease expires in the store
	expired, err := st.ExpiredRuns(context.Background(), time.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, expired, "the lease expired in the store")

	var launched atomic.Int64
	n, err := e.RecoverExpired(context.Background(), runtime.RecoveryConfig{
		Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
			return runtime.RecoverRequest{Graph: g}, nil
		},
		Launch: func(*runtime.RunRecord, *runtime.ClaimedRun) error { launched.Add(1); return nil },
	})
	require.NoError(t, err)
	require.Zero(t, n, "its own executing run is not claimed")
	require.Zero(t, launched.Load())
	close(st.release)

	o := <-done
	require.NoError(t, o.err)
	require.NoError(t, o.res.Err)
	require.Equal(t, runtime.RunCompleted, o.res.Status)
	log, err := st.Events(context.Background(), "late", 0, 0)
	require.NoError(t, err)
	checkLifecycle(t, log)
	for _, ev := range log {
		require.NotEqual(t, runtime.EventNodeRetrying, ev.Type, "nothing ran again")
	}
}
