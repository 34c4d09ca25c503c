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
// writer: SQLite appends to the WAL while it copies, and restarts the WAL
// from its start once a checkpoint has copied all of it. The writer keeps
// autocheckpointPages as a safety net should the checkpointer fall behind.
const (
	checkpointEvery     = 100 * time.Millisecond
	checkpointIdle      = 2 * time.Second
	autocheckpointPages = 10000
)

// checkpointer is the store's WAL checkpoint loop.
type checkpointer struct {
	db    *sql.DB       // its own connection
	dirty atomic.Bool   // a transaction committed since the last checkpoint
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the loop has returned
}

func newCheckpointer(db *sql.DB) *checkpointer {
	c := &checkpointer{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		if !c.dirty.Swap(false) && time.Since(last) < checkpointIdle {
			continue
		}
		last = time.Now()
		// A busy or failed checkpoint leaves the WAL as it is; the next
		// one (or the writer's safety net) copies it.
		_, _ = c.db.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
	}
}

// close stops the loop and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
