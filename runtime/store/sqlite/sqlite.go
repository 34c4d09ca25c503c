package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"chatgraph/runtime"
	"chatgraph/runtime/store/internal/rowjson"
)

// Synchronous is SQLite's PRAGMA synchronous level for the store's file.
type Synchronous string

// Synchronous levels. A process crash (kill -9) loses no committed write
// at either level; they differ on power loss or an OS crash.
const (
	// SyncFull makes every write durable before it returns: a committed
	// write survives power loss. The default. In WAL mode the store
	// fsyncs the WAL itself once the writer is free, one fsync for every
	// transaction committed before it (walsync.go).
	SyncFull Synchronous = "FULL"
	// SyncNormal fsyncs only at WAL checkpoints: the last commits before a
	// power loss may be lost (the file is never corrupted). Several times
	// faster per write.
	SyncNormal Synchronous = "NORMAL"
)

// Config configures Open.
type Config struct {
	// Path is the database file (required). Its directory is created
	// (0700) when missing; the -wal and -shm files live beside it.
	Path string
	// Synchronous is SyncFull (default) or SyncNormal.
	Synchronous Synchronous
	// BusyTimeout is how long a write waits for another process holding
	// the file's write lock before failing. Default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read connection pool. Default 4.
	ReadConns int
	// Logger receives migration messages. Default: discard.
	Logger *slog.Logger
	// Now is the clock leases are measured with. Default time.Now.
	Now func() time.Time
}

// Store is a runtime.Store, runtime.Leaser, runtime.Inspector,
// runtime.BatchWriter and runtime.EffectLedger in one SQLite file (WAL
// mode). Writes go through one connection, so they are serialised in the
// process; SQLite's file lock serialises them with other processes on the
// same file. Reads use a separate pool and never wait for writes. A Store is safe for concurrent use; the caller closes it.
type Store struct {
	path string
	w    *sql.DB // exactly one connection: every write, in IMMEDIATE transactions
	// gate orders the transactions waiting for w (group commits first).
	gate writerGate
	r    *sql.DB // read-only pool
	// ws and rs hold the prepared statements of w and r: parsing SQL
	// costs more than running these statements.
	ws, rs *stmts
	// ck checkpoints the WAL on a connection of its own (checkpoint.go).
	ck *checkpointer
	// wal syncs committed transactions at SyncFull in WAL mode (nil
	// otherwise: SQLite syncs at COMMIT, or not at all at SyncNormal).
	wal  *walSync
	log  *slog.Logger
	now  func() time.Time
	busy time.Duration // Config.BusyTimeout
	// tails remembers the segments of run logs the store appended to the
	// event tail (tail.go).
	tails tails
	// pageScratch is the buffer the writer encodes the tail's pages in
	// (insertTail).
	pageScratch []byte
	// chunkScratch is the buffer the writer encodes chunks in (chunks).
	chunkScratch []byte
	// cpBuf is a group commit's checkpoints, rowArgs the values of its
	// multi-row statements (WriteBatches, execRows: the writer's).
	cpBuf   []*runtime.Checkpoint
	rowArgs []any
	// createBuf is a group commit's batches that create their run
	// (WriteBatches: the writer's).
	createBuf []*runtime.WriteBatch
	// wconn is the writer's connection while commitGated's transaction
	// (wtx) holds it, and raw the statements prepared on its driver
	// connection (rawexec.go); all are the writer's, used under the gate.
	wconn *sql.Conn
	wtx   *sql.Tx
	raw   rawStmts
	// tailRows is the writer's buffer of a logTx's rows to insert into
	// the tail (logTx.tail).
	tailRows []eventRow

	closeOnce sync.Once
	closeErr  error
}

var (
	_ runtime.Store          = (*Store)(nil)
	_ runtime.Leaser         = (*Store)(nil)
	_ runtime.Inspector      = (*Store)(nil)
	_ runtime.BatchWriter    = (*Store)(nil)
	_ runtime.JSONEventStore = (*Store)(nil)
	_ runtime.EffectLedger   = (*Store)(nil)
)

// writerCacheKiB is the writer connection's page cache (SQLite's default
// is 2 MiB). A group commit of streaming runs touches a page per run — the
// tail of its events, its runs row — so with a thousand runs streaming,
// the default cache spills dirty pages into the WAL in the middle of the
// transaction and reads back the pages it evicted at the next. 16 MiB
// holds the hot pages of a few thousand streaming runs; the cache fills
// only with pages the writer touches, but a busy server's writer touches
// enough to fill it (about 22 MB more resident memory). The writer's
// statement journals (a multi-row INSERT may have to undo itself) are
// kept in memory too (temp_store), not in a temporary file.
const writerCacheKiB = 16 << 10

// Open opens (creating it if needed) the store at cfg.Path and applies any
// missing schema migrations.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("sqlite store: Config.Path is required")
	}
	if strings.ContainsAny(cfg.Path, "?#") {
		return nil, fmt.Errorf("sqlite store: path %q must not contain '?' or '#'", cfg.Path)
	}
	level := cfg.Synchronous
	switch level {
	case "":
		level = SyncFull
	case SyncFull, SyncNormal:
	default:
		return nil, fmt.Errorf("sqlite store: unknown Synchronous %q (want FULL or NORMAL)", level)
	}
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	readConns := cfg.ReadConns
	if readConns <= 0 {
		readConns = 4
	}
	s := &Store{path: cfg.Path, log: cfg.Logger, now: cfg.Now, busy: busy}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}

	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=synchronous(%s)", busy.Milliseconds(), level)
	w, err := sql.Open("sqlite", cfg.Path+"?"+common+fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)"+
		"&_pragma=cache_size(-%d)&_pragma=temp_store(MEMORY)&_txlock=immediate", autocheckpointPages, writerCacheKiB))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w, s.ws = w, newStmts(w)
	// The checkpointer is there before the first write: the migration
	// commits in inTx, which marks it dirty.
	ck, err := sql.Open("sqlite", cfg.Path+"?"+common)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	ck.SetMaxOpenConns(1)
	ck.SetMaxIdleConns(1)
	ck.SetConnMaxLifetime(0)
	ck.SetConnMaxIdleTime(0)
	s.ck = newCheckpointer(ck, &s.gate)
	// Switching a new file to WAL (persistent in the file) and migrating
	// can meet another process doing the same; SQLite does not always wait
	// for it (busy_timeout), so retry within the same bound.
	err = retryBusy(ctx, busy, func() error {
		var mode string
		if err := w.QueryRowContext(ctx, `PRAGMA journal_mode=WAL`).Scan(&mode); err != nil {
			return err
		}
		if mode != "wal" {
			s.log.Warn("sqlite store: WAL mode unavailable; readers will wait for writers", "path", cfg.Path, "journal_mode", mode)
		} else if level == SyncFull && s.wal == nil {
			// Sync the WAL off the writer (walsync.go). Should the pool
			// ever reopen the connection, it is at FULL again: durable,
			// only slower.
			if _, err := w.ExecContext(ctx, `PRAGMA synchronous=NORMAL`); err != nil {
				return err
			}
			s.wal = newWALSync(cfg.Path)
		}
		if err := s.migrate(ctx); err != nil {
			return err
		}
		return s.inTx(ctx, func(tx *sql.Tx) error { return s.compactAll(ctx, tx) })
	})
	if err != nil {
		s.closeWriter()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	for _, q := range txQueries {
		if _, err := s.ws.get(ctx, q); err != nil {
			s.closeWriter()
			return nil, fmt.Errorf("sqlite store: prepare: %w", err)
		}
	}

	r, err := sql.Open("sqlite", cfg.Path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		s.closeWriter()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s.r, s.rs = r, newStmts(r)
	return s, nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the store's connections; the last connection to the file
// checkpoints the WAL into it. Calling Close again returns the first
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.rs.close(), s.r.Close(), s.closeWriter())
	})
	return s.closeErr
}

// Syncs returns how many times the store has fsynced its WAL itself
// (SyncFull in WAL mode; 0 otherwise, where SQLite syncs at COMMIT or at
// checkpoints): one per sync, however many transactions it covered.
func (s *Store) Syncs() uint64 {
	if s.wal == nil {
		return 0
	}
	return s.wal.count()
}

// ObserveSyncs makes fn, from now on, be told of every fsync of the WAL
// the store runs itself (see Syncs): how long it took and its error. A
// delta's way to its subscribers includes the sync of its commit, so
// this is the disk's share of the latency commit-then-publish adds;
// nil stops it. fn runs on the goroutine that synced, outside the
// store's locks; it must be quick and safe for concurrent use.
func (s *Store) ObserveSyncs(fn func(d time.Duration, err error)) {
	if s.wal == nil {
		return
	}
	if fn == nil {
		s.wal.observe.Store(nil)
		return
	}
	s.wal.observe.Store(&fn)
}

// closeWriter closes the checkpointer, the writer with its statements
// and the file walSync keeps open: all Open has made before the read
// pool (it closes them on a failure after that point).
func (s *Store) closeWriter() error {
	err := errors.Join(s.ck.close(), s.ws.close(), s.closeRaw(), s.w.Close())
	if s.wal != nil {
		err = errors.Join(err, s.wal.close())
	}
	return err
}

// retryBusy runs fn until it does not fail with SQLITE_BUSY, for at most
// bound.
func retryBusy(ctx context.Context, bound time.Duration, fn func() error) error {
	deadline := time.Now().Add(bound)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		err := fn()
		var se *sqlitedrv.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != 5 /* SQLITE_BUSY */ || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// stmts prepares each query text once per database handle and keeps it.
type stmts struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmts(db *sql.DB) *stmts { return &stmts{db: db, m: map[string]*sql.Stmt{}} }

// get returns q's statement, preparing it on a miss. The lock is never
// held while preparing: that needs the writer's only connection, which a
// transaction may hold while it waits for the lock in in.
func (c *stmts) get(ctx context.Context, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[q]
	c.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil { // closed meanwhile
		st.Close()
		return nil, errors.New("store closed")
	}
	if prev, ok := c.m[q]; ok { // prepared twice concurrently: keep one
		st.Close()
		return prev, nil
	}
	c.m[q] = st
	return st, nil
}

func (c *stmts) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := c.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRow runs q's one-row query with args. Once it has its statement,
// it runs without ctx's cancellation: a one-row read takes microseconds,
// and with a context that can end, database/sql and the driver would
// each start a goroutine to watch it, for every read.
func (c *stmts) queryRow(ctx context.Context, q string, args ...any) scanner {
	st, err := c.get(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(context.WithoutCancel(ctx), args...)
}

// in returns q's statement bound to tx. Statements used in transactions
// are prepared at Open (see txQueries): preparing one on the writer's only
// connection while tx holds it would wait forever, so a miss is prepared
// on tx itself.
func (c *stmts) in(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[q]
	c.mu.Unlock()
	if !ok { // not expected: txQueries are prepared at Open
		return tx.PrepareContext(ctx, q)
	}
	return tx.StmtContext(ctx, st), nil
}

// execIn runs q's statement with args in tx (see in).
func (c *stmts) execIn(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	st, err := c.in(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// queryIn runs q's query with args in tx (see in).
func (c *stmts) queryIn(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	st, err := c.in(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRowIn runs q's one-row query with args in tx (see in).
func (c *stmts) queryRowIn(ctx context.Context, tx *sql.Tx, q string, args ...any) scanner {
	st, err := c.in(ctx, tx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (c *stmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// --- encoding -----------------------------------------------------------

// micros is t's representation in the file: microseconds since the Unix
// epoch. The zero time keeps its own (negative) value.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// jsonText encodes v for a TEXT column; a nil v is NULL.
func jsonText(v any) (any, error) {
	b, err := rowjson.Bytes(v)
	return text(b), err
}
