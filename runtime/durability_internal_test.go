package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The committer's goroutine outlives a commit: it waits for the next run
// to be listed and commits it, instead of exiting and being started
// afresh (whose new stack would grow again in the store's deep calls at
// every commit of a lightly loaded server). It exits once nothing was
// listed for committerIdle, and at once when the engine closes.
func TestCommitterLoopWaitsForTheNextRun(t *testing.T) {
	quit := make(chan struct{})
	c := &committer{group: new(atomic.Pointer[func(func())]), hurry: make(chan struct{}, 1), wake: make(chan struct{}, 1), quit: quit, lag: new(commitLag)}
	running := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running
	}
	commitOne := func() {
		t.Helper()
		r := &run{}
		done := make(chan struct{})
		r.emu.Lock()
		r.cwait = done // closed when the committer has committed r
		c.add(r)
		r.emu.Unlock()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the listed run was not committed")
		}
	}

	commitOne()
	time.Sleep(50 * time.Millisecond)
	require.True(t, running(), "the loop exited after its commit")
	commitOne() // wakes the waiting loop
	require.True(t, running())

	// Idle for committerIdle: the loop exits, and the next run starts it.
	require.Eventually(t, func() bool { return !running() }, committerIdle+2*time.Second, 10*time.Millisecond)
	commitOne()
	require.True(t, running())

	// Closing ends the wait at once.
	close(quit)
	exited := make(chan struct{})
	go func() { c.wg.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(committerIdle / 2):
		t.Fatal("the loop waited out its idle time after the engine closed")
	}
	require.False(t, running())
	commitOne() // a run listed after the close is still committed
}

// chunkRenewer records the leases of each RenewLeases call and renews
// them all.
type chunkRenewer struct{ calls [][]Lease }

func (c *chunkRenewer) RenewLeases(_ context.Context, leases []Lease, ttl time.Duration) ([]Lease, []error, error) {
	c.calls = append(c.calls, slices.Clone(leases))
	out := make([]Lease, len(leases))
	for i, l := range leases {
		l.ExpiresAt = time.Now().Add(ttl)
		out[i] = l
	}
	return out, make([]error, len(leases)), nil
}

// A renewal round renews at most renewChunk leases a store call (a call
// is one transaction in front of the group commits), every due lease
// once, and each run gets its renewed lease.
func TestLeaseRenewalsGoOutInChunks(t *testing.T) {
	const runs = 2*renewChunk + 88
	st := &chunkRenewer{}
	e := &Engine{leaseTTL: time.Minute}
	lr := &leaseRenewals{e: e}
	view := &storeView{renewer: st}
	e.store = view
	due := make([]dueLease, runs)
	for i := range due {
		l := Lease{RunID: fmt.Sprintf("run-%d", i), Owner: "me", Token: int64(i + 1)}
		r := &run{e: e, store: view, lease: &l}
		lr.add(r) // registered, so that its outcome is applied
		due[i] = dueLease{r, l}
	}
	defer func() {
		for _, d := range due {
			lr.mu.Lock()
			delete(lr.runs, d.r)
			lr.mu.Unlock()
		}
		lr.empty <- struct{}{}
		lr.wg.Wait()
	}()
	lr.renew(due)

	sizes := make([]int, len(st.calls))
	seen := map[string]int{}
	for i, call := range st.calls {
		sizes[i] = len(call)
		for _, l := range call {
			seen[l.RunID]++
		}
	}
	require.Equal(t, []int{renewChunk, renewChunk, 88}, sizes)
	require.Len(t, seen, runs)
	for id, n := range seen {
		require.Equal(t, 1, n, "%s renewed once", id)
	}
	for _, d := range due {
		cur, _ := d.r.current()
		require.False(t, cur.ExpiresAt.IsZero(), "%s has its renewed lease", d.lease.RunID)
	}
}
