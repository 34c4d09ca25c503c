package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// WAL checkpoints run off the writer. By default SQLite checkpoints in the
// transaction that pushes the WAL past 1,000 pages, after its commit but
// before the writer connection is free, so every few dozen group commits
// one of them also copies the WAL into the database file and fsyncs it
// while the next commit (and every delta it carries) waits. The store
// instead checkpoints on a connection of its own, every checkpointEvery
// after a transaction committed (every write of the store is one: see
// writerGate), and every checkpointIdle regardless, for the writes of
// other processes on the file. A PASSIVE checkpoint never blocks the
// writer: SQLite appends to the WAL while it copies. The writer keeps
// autocheckpointPages as a safety net should the checkpointer fall behind.
//
// SQLite writes the WAL from its start again only when a write
// transaction begins with all of the WAL copied. Under a steady stream of
// commits that never happens: the writer begins its next transaction
// before a checkpoint, copying what the last commit added, is done. Left
// alone, the WAL grows until the safety net checkpoints it inside a
// commit, syncing the database file while that commit waits (3–8 ms,
// several times a second at a thousand streaming runs; a growing WAL
// also makes each WAL sync dearer: docs/benchmarks.md). So once a
// checkpoint finds the WAL at finishPages or more, the checkpointer takes
// the writer (writerGate, behind the group commits waiting) and
// checkpoints again: that pass copies only what came since the first (a
// few commits' pages, then a sync of the database file: about 2 ms on
// the benchmarks' VM), and the next write transaction begins with the
// WAL all copied and starts it afresh.
const (
	checkpointEvery     = 100 * time.Millisecond
	checkpointIdle      = 2 * time.Second
	autocheckpointPages = 10000
	finishPages         = autocheckpointPages / 4
)

// checkpointer is the store's WAL checkpoint loop.
type checkpointer struct {
	db    *sql.DB     // its own connection
	gate  *writerGate // the store's writer, held for a finishing pass
	dirty atomic.Bool // a transaction committed since the last checkpoint
	// ctx ends when close is called (stop), so that a finishing pass
	// waiting for the writer gives up.
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{} // closed when the loop has returned
}

func newCheckpointer(db *sql.DB, gate *writerGate) *checkpointer {
	c := &checkpointer{db: db, gate: gate, done: make(chan struct{})}
	c.ctx, c.stop = context.WithCancel(context.Background())
	go c.loop()
	return c
}

// checkpoint runs a PASSIVE checkpoint and returns the WAL's size in
// pages (-1 when it could not run).
func (c *checkpointer) checkpoint(ctx context.Context) (log int) {
	var busy, copied int
	if err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied); err != nil {
		return -1
	}
	return log
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-t.C:
		case <-c.ctx.Done():
			return
		}
		if !c.dirty.Swap(false) && time.Since(last) < checkpointIdle {
			continue
		}
		last = time.Now()
		// A busy or failed checkpoint leaves the WAL as it is; the next
		// one (or the writer's safety net) copies it.
		if c.checkpoint(c.ctx) >= finishPages && c.gate.enter(c.ctx, false) == nil {
			c.checkpoint(c.ctx)
			c.gate.leave()
		}
	}
}

// close stops the loop and closes its connection.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.db.Close()
}
