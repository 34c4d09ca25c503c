package sqlite

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldSync replaces a walSync's fsync with one the test lets return.
type heldSync struct {
	calls   chan int   // each call's number, as it starts
	results chan error // what each call returns, sent by the test
	mu      sync.Mutex
	n       int
}

func holdSyncs(w *walSync) *heldSync {
	h := &heldSync{calls: make(chan int, 10), results: make(chan error)}
	w.fsync = func() error {
		h.mu.Lock()
		h.n++
		n := h.n
		h.mu.Unlock()
		h.calls <- n
		return <-h.results
	}
	return h
}

// commit counts one committed transaction and returns its number.
func commit(w *walSync) uint64 {
	w.begin()
	return w.wrote()
}

// The transactions committed while a sync is in flight share the next
// one; a transaction is durable only once a sync begun after it returns.
func TestWALSyncSharesOneSyncAmongWaiters(t *testing.T) {
	w := newWALSync(t.TempDir() + "/db")
	h := holdSyncs(w)
	waited := make(chan uint64, 3)
	wait := func(n uint64) {
		go func() {
			require.NoError(t, w.wait(n))
			waited <- n
		}()
	}
	wait(commit(w))
	require.Equal(t, 1, <-h.calls)
	// Committed after the first sync began: it cannot cover them.
	wait(commit(w))
	wait(commit(w))
	h.results <- nil
	require.Equal(t, uint64(1), <-waited)
	require.Equal(t, 2, <-h.calls, "one sync for the two transactions written meanwhile")
	h.results <- nil
	got := []uint64{<-waited, <-waited}
	require.ElementsMatch(t, []uint64{2, 3}, got)
	require.NoError(t, w.wait(3), "synced already: no sync")
	require.Equal(t, uint64(2), w.count())
	select {
	case n := <-h.calls:
		t.Fatalf("sync %d for transactions already synced", n)
	default:
	}
}

// After a failed sync what was written is of unknown durability: every
// later wait fails, while transactions synced before stay durable.
func TestWALSyncFailureIsSticky(t *testing.T) {
	w := newWALSync(t.TempDir() + "/db")
	h := holdSyncs(w)
	done := make(chan error, 1)
	first := commit(w)
	go func() { done <- w.wait(first) }()
	<-h.calls
	h.results <- nil
	require.NoError(t, <-done)

	second := commit(w)
	go func() { done <- w.wait(second) }()
	<-h.calls
	h.results <- errors.New("EIO")
	require.ErrorContains(t, <-done, "EIO")
	require.ErrorContains(t, w.wait(commit(w)), "EIO", "a later transaction is never reported durable")
	require.NoError(t, w.wait(first), "a transaction synced before the failure stays durable")
}

// A read waits for the transactions it may have seen, a transaction whose
// COMMIT is still in progress included.
func TestWALSyncReadWaitsForCommitInProgress(t *testing.T) {
	w := newWALSync(t.TempDir() + "/db")
	h := holdSyncs(w)
	w.begin() // COMMIT in progress: a read may see it already
	done := make(chan error, 1)
	go func() { done <- w.wait(w.visible()) }()
	n := w.wrote()
	require.Equal(t, uint64(1), n)
	require.Equal(t, 1, <-h.calls, "the read's wait syncs the transaction once written")
	h.results <- nil
	require.NoError(t, <-done)
}

// The observer is told of every sync: how long it took and its error.
func TestWALSyncObserved(t *testing.T) {
	w := newWALSync(t.TempDir() + "/db")
	h := holdSyncs(w)
	type seen struct {
		d   time.Duration
		err error
	}
	got := make(chan seen, 2)
	observe := func(d time.Duration, err error) { got <- seen{d, err} }
	w.observe.Store(&observe)
	done := make(chan error, 1)

	go func() { done <- w.wait(commit(w)) }()
	<-h.calls
	time.Sleep(20 * time.Millisecond) // the sync takes this long at least
	h.results <- nil
	require.NoError(t, <-done)
	first := <-got
	require.NoError(t, first.err)
	require.GreaterOrEqual(t, first.d, 20*time.Millisecond, "the observed time is the sync's")

	go func() { done <- w.wait(commit(w)) }()
	<-h.calls
	h.results <- errors.New("EIO")
	require.ErrorContains(t, <-done, "EIO")
	require.ErrorContains(t, (<-got).err, "EIO", "a failed sync is observed with its error")
	require.Empty(t, got, "one observation per sync")
}
