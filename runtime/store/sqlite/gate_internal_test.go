package sqlite

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An urgent waiter gets the writer before every normal one already
// waiting; a waiter whose context ends leaves the queue, and the writer
// still passes to the next.
func TestWriterGateServesUrgentFirst(t *testing.T) {
	var g writerGate
	ctx := context.Background()
	require.NoError(t, g.enter(ctx, false)) // held
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	wait := func(name string, urgent bool) {
		wg.Go(func() {
			require.NoError(t, g.enter(ctx, urgent))
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			g.leave()
		})
	}
	queued := func(n int) {
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.urgent)+len(g.normal) == n
		}, time.Second, time.Millisecond)
	}
	wait("n1", false)
	queued(1)
	wait("n2", false)
	queued(2)
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error)
	go func() { gone <- g.enter(cctx, false) }()
	queued(3)
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	queued(2)
	wait("u", true)
	queued(3)
	g.leave()
	wg.Wait()
	require.Equal(t, []string{"u", "n1", "n2"}, order)
	require.False(t, g.busy, "free once the last left")
}
