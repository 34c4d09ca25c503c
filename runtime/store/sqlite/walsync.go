package sqlite

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// At synchronous=FULL SQLite fsyncs the WAL inside COMMIT, while the
// transaction still holds the file's one writer connection: every other
// write, and the next group commit with every delta it carries, waits for
// the disk. The store instead commits at synchronous=NORMAL (the frames
// reach the WAL file, not the disk) and makes them durable itself, after
// the writer is free: walSync fdatasyncs the -wal file once for every
// transaction written before the sync began, so the transactions that
// commit while one sync is in flight share the next. A write returns only
// once its transaction is synced (or hands the wait to its caller: see
// runtime.DeferSync), so a returned write survives power loss as at FULL.
// SQLite's own ordering still holds: it syncs the WAL header at every WAL
// restart and the WAL before every checkpoint, at NORMAL as at FULL.
//
// There is no goroutine: the first waiter whose transaction is not yet
// synced runs the sync, the others wait for it.
type walSync struct {
	path string // the -wal file

	mu   sync.Mutex
	cond sync.Cond
	// begun counts transactions that started to commit, written those
	// whose COMMIT returned, synced those known durable.
	begun, written, synced uint64
	syncs                  uint64 // fsyncs run
	syncing                bool
	err                    error // the first failed sync: every later wait fails
	f                      *os.File
	// fsync syncs the file (the syncing waiter's; tests replace it).
	fsync func() error
	// observe, when set, is told how long each sync took and how it
	// ended (Store.ObserveSyncs).
	observe atomic.Pointer[func(time.Duration, error)]
}

func newWALSync(dbPath string) *walSync {
	w := &walSync{path: dbPath + "-wal"}
	w.cond.L = &w.mu
	w.fsync = w.sync
	return w
}

// begin counts a transaction about to commit (under the writer gate, so
// transactions are counted in the order they commit).
func (w *walSync) begin() {
	w.mu.Lock()
	w.begun++
	w.mu.Unlock()
}

// wrote counts the committed transaction begin counted and returns its
// number, to wait for. A transaction that did not commit is counted too:
// syncing it costs nothing more.
func (w *walSync) wrote() uint64 {
	w.mu.Lock()
	w.written++
	n := w.written
	w.mu.Unlock()
	w.cond.Broadcast()
	return n
}

// visible returns the number of every transaction a read begun now may
// see: wait(visible()) after the read makes what it saw durable.
func (w *walSync) visible() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.begun
}

// wait returns once transaction n (and every one before it) is durable,
// running the sync itself when none is in flight.
func (w *walSync) wait(n uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.synced < n {
		if w.err != nil {
			return w.err
		}
		if w.syncing || w.written < n {
			w.cond.Wait()
			continue
		}
		w.syncing = true
		target := w.written
		w.mu.Unlock()
		start := time.Now()
		err := w.fsync()
		if observe := w.observe.Load(); observe != nil {
			(*observe)(time.Since(start), err)
		}
		w.mu.Lock()
		w.syncing = false
		w.syncs++
		if err != nil {
			w.err = fmt.Errorf("sqlite store: sync %s: %w", w.path, err)
		} else {
			w.synced = target
		}
		w.cond.Broadcast()
	}
	return nil
}

// sync fdatasyncs the WAL file (only the syncing waiter calls it),
// opened at the first sync. The file stays the same while the store's
// writer connection is open: SQLite deletes it only when the last
// connection to the database closes. (Should the pool ever replace that
// connection, the new one is at FULL and syncs its commits itself.)
func (w *walSync) sync() error {
	if w.f == nil {
		f, err := os.OpenFile(w.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		w.f = f
	}
	for {
		err := syscall.Fdatasync(int(w.f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// count returns how many syncs have run.
func (w *walSync) count() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncs
}

// close releases the WAL file, once a sync in flight has returned.
func (w *walSync) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.syncing {
		w.cond.Wait()
	}
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
