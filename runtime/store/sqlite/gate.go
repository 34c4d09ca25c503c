package sqlite

import (
	"context"
	"slices"
	"sync"
)

// writerGate orders the transactions that wait for the file's one writer
// connection. Every write of the store passes it: each runs in a
// transaction of inTx or inTxGated, single statements too (a run created
// or updated outside a batch, lease claims, renewals and releases,
// deleting effects), as do retention, the migration at Open and the
// transactions of stores sharing the file (Update). The engine's group
// commits (WriteBatches: the events and checkpoints of every live run,
// which subscribers see only once they are committed) go before every
// other waiting transaction, the others in their order of arrival, so a
// burst of other writes — a thousand turns starting at once, each writing
// its chat messages, or a thousand lease renewals — delays a commit by at
// most the one in progress, not by the whole queue. The committer is one
// goroutine per engine and waits for its commit before it gathers the
// next, so the other writes get the writer between two commits and are
// never starved.
type writerGate struct {
	mu             sync.Mutex
	busy           bool
	urgent, normal []chan struct{}
}

// enter waits for the writer; urgent waiters go first.
func (g *writerGate) enter(ctx context.Context, urgent bool) error {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if urgent {
		g.urgent = append(g.urgent, ch)
	} else {
		g.normal = append(g.normal, ch)
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		waiting := dequeue(&g.urgent, ch) || dequeue(&g.normal, ch)
		g.mu.Unlock()
		if !waiting {
			g.leave() // the writer was handed over meanwhile: pass it on
		}
		return ctx.Err()
	}
}

// dequeue removes ch from q and says whether it was there.
func dequeue(q *[]chan struct{}, ch chan struct{}) bool {
	i := slices.Index(*q, ch)
	if i < 0 {
		return false
	}
	*q = slices.Delete(*q, i, i+1)
	return true
}

// leave hands the writer to the next waiter, urgent first.
func (g *writerGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next chan struct{}
	switch {
	case len(g.urgent) > 0:
		next, g.urgent = g.urgent[0], g.urgent[1:]
	case len(g.normal) > 0:
		next, g.normal = g.normal[0], g.normal[1:]
	default:
		g.busy = false
		return
	}
	close(next)
}
