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
