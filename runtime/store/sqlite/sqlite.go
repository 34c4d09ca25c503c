package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
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
)

// Synchronous is SQLite's PRAGMA synchronous level for the store's file.
type Synchronous string

// Synchronous levels. A process crash (kill -9) loses no committed write
// at either level; they differ on power loss or an OS crash.
const (
	// SyncFull fsyncs the WAL at every commit: a committed write survives
	// power loss. The default.
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

// Store is a runtime.Store, runtime.Leaser and runtime.Inspector in one
// SQLite file (WAL mode). Writes go through one connection, so they are
// serialised in the process; SQLite's file lock serialises them with other
// processes on the same file. Reads use a separate pool and never wait for
// writes. A Store is safe for concurrent use; the caller closes it.
type Store struct {
	path string
	w    *sql.DB // exactly one connection: every write, in IMMEDIATE transactions
	r    *sql.DB // read-only pool
	// ws and rs hold the prepared statements of w and r: parsing SQL
	// costs more than running these statements.
	ws, rs *stmts
	log    *slog.Logger
	now    func() time.Time

	closeOnce sync.Once
	closeErr  error
}

var (
	_ runtime.Store     = (*Store)(nil)
	_ runtime.Leaser    = (*Store)(nil)
	_ runtime.Inspector = (*Store)(nil)
)

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
	s := &Store{path: cfg.Path, log: cfg.Logger, now: cfg.Now}
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
	w, err := sql.Open("sqlite", cfg.Path+"?"+common+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w, s.ws = w, newStmts(w)
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
		}
		return s.migrate(ctx)
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	for _, q := range txQueries {
		if _, err := s.ws.get(ctx, q); err != nil {
			s.ws.close()
			w.Close()
			return nil, fmt.Errorf("sqlite store: prepare: %w", err)
		}
	}

	r, err := sql.Open("sqlite", cfg.Path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
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
		s.closeErr = errors.Join(s.rs.close(), s.ws.close(), s.r.Close(), s.w.Close())
	})
	return s.closeErr
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

func (c *stmts) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := c.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmts) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := c.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (c *stmts) queryRow(ctx context.Context, q string, args ...any) scanner {
	st, err := c.get(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
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
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// jsonAny decodes a JSON column into its generic Go value; NULL is nil.
func jsonAny(b []byte) (any, error) {
	if b == nil {
		return nil, nil
	}
	var v any
	err := json.Unmarshal(b, &v)
	return v, err
}

func jsonInto(b []byte, dst any) error {
	if b == nil {
		return nil
	}
	return json.Unmarshal(b, dst)
}

// --- run records --------------------------------------------------------

const runCols = `id, parent_id, root_id, chat_id, graph_id, plan_version, kind, attrs, entry_node_ids,
	input, options, status, error, interrupts, last_seq, token, created_at, updated_at`

// runArgs returns the record's column values in runCols order, minus id,
// last_seq and token.
func runArgs(r *runtime.RunRecord) ([]any, error) {
	attrs, err := jsonText(r.Attrs)
	if err != nil {
		return nil, fmt.Errorf("attrs: %w", err)
	}
	entries, err := json.Marshal(r.EntryNodeIDs)
	if err != nil {
		return nil, err
	}
	input, err := jsonText(r.Input)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	opts, err := json.Marshal(r.Options)
	if err != nil {
		return nil, err
	}
	var interrupts any
	if r.Interrupts != nil {
		if interrupts, err = jsonText(r.Interrupts); err != nil {
			return nil, fmt.Errorf("interrupts: %w", err)
		}
	}
	return []any{r.ParentID, r.RootID, r.ChatID, r.GraphID, r.PlanVersion, r.Kind, attrs, string(entries),
		input, string(opts), string(r.Status), r.Error, interrupts, micros(r.CreatedAt), micros(r.UpdatedAt)}, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (*runtime.RunRecord, error) {
	var (
		r                                       runtime.RunRecord
		attrs, entries, input, opts, interrupts []byte
		status                                  string
		created, updated                        int64
	)
	if err := row.Scan(&r.ID, &r.ParentID, &r.RootID, &r.ChatID, &r.GraphID, &r.PlanVersion, &r.Kind,
		&attrs, &entries, &input, &opts, &status, &r.Error, &interrupts, &r.LastSeq, &r.Token, &created, &updated); err != nil {
		return nil, err
	}
	r.Status = runtime.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	var err error
	if r.Input, err = jsonAny(input); err != nil {
		return nil, fmt.Errorf("run %s input: %w", r.ID, err)
	}
	for _, f := range []struct {
		b   []byte
		dst any
	}{{attrs, &r.Attrs}, {entries, &r.EntryNodeIDs}, {opts, &r.Options}, {interrupts, &r.Interrupts}} {
		if err := jsonInto(f.b, f.dst); err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
	}
	return &r, nil
}

// CreateRun implements runtime.Store.
func (s *Store) CreateRun(ctx context.Context, r *runtime.RunRecord) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("sqlite store: create run %s: %w", r.ID, err)
	}
	args = append([]any{r.ID}, args...)
	args = append(args, r.LastSeq, r.Token)
	res, err := s.ws.exec(ctx, `INSERT INTO runs (id, parent_id, root_id, chat_id, graph_id, plan_version, kind,
	attrs, entry_node_ids, input, options, status, error, interrupts, created_at, updated_at, last_seq, token)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING`, args...)
	if err != nil {
		return fmt.Errorf("sqlite store: create run %s: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, r.ID)
	}
	return nil
}

// GetRun implements runtime.Store.
func (s *Store) GetRun(ctx context.Context, id string) (*runtime.RunRecord, error) {
	r, err := scanRun(s.rs.queryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: get run %s: %w", id, err)
	}
	return r, nil
}

// UpdateRun implements runtime.Store. It replaces every field of the
// record but LastSeq (the event log owns it); the lease is untouched.
func (s *Store) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("sqlite store: update run %s: %w", r.ID, err)
	}
	args = append(args, r.Token, r.ID, r.Token)
	res, err := s.ws.exec(ctx, `UPDATE runs SET parent_id = ?, root_id = ?, chat_id = ?, graph_id = ?,
	plan_version = ?, kind = ?, attrs = ?, entry_node_ids = ?, input = ?, options = ?, status = ?, error = ?,
	interrupts = ?, created_at = ?, updated_at = ?, token = ?
WHERE id = ? AND token <= ?`, args...)
	if err != nil {
		return fmt.Errorf("sqlite store: update run %s: %w", r.ID, err)
	}
	return s.applied(ctx, res, r.ID, r.Token)
}

// applied turns a fenced statement's result into nil, ErrRunNotFound or
// ErrFenced.
func (s *Store) applied(ctx context.Context, res sql.Result, runID string, token int64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err = s.fence(s.ws.queryRow(ctx, fenceQuery, runID), runID, token)
	if err == nil {
		// The row matched when we looked again: only a concurrent change
		// can explain it, and tokens only grow.
		err = fmt.Errorf("%w: run %s changed under the write", runtime.ErrFenced, runID)
	}
	return err
}

const (
	fenceQuery       = `SELECT token, last_seq FROM runs WHERE id = ?`
	advanceQuery     = `UPDATE runs SET last_seq = ? WHERE id = ? AND token <= ? AND last_seq = ?`
	insertEventQuery = `INSERT INTO events (run_id, seq, type, chat_id, node_id, attempt, at, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// txQueries are the statements run inside write transactions.
var txQueries = []string{fenceQuery, advanceQuery, insertEventQuery}

// fence checks token against the run's, read by row (fenceQuery), and
// returns the run's last seq.
func (s *Store) fence(row scanner, runID string, token int64) (lastSeq int64, err error) {
	var cur int64
	err = row.Scan(&cur, &lastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite store: run %s: %w", runID, err)
	}
	if token < cur {
		return 0, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, runID, cur, token)
	}
	return lastSeq, nil
}

// --- checkpoints --------------------------------------------------------

const cpCols = `node_id, status, plan_version, inputs_hash, effect, output, summary, error, error_code, error_trace,
	skip_reason, interrupt, resumes, attempt, attempt_id, replayed, started_at, updated_at, next_attempt_at, token`

// SaveCheckpoint implements runtime.Store: one statement that upserts the
// checkpoint only if the run's token is not newer than cp.Token.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	output, err := jsonText(cp.Output)
	if err != nil {
		return fmt.Errorf("sqlite store: checkpoint %s/%s output: %w", cp.RunID, cp.NodeID, err)
	}
	var interrupt any
	if cp.Interrupt != nil {
		if interrupt, err = jsonText(cp.Interrupt); err != nil {
			return fmt.Errorf("sqlite store: checkpoint %s/%s interrupt: %w", cp.RunID, cp.NodeID, err)
		}
	}
	res, err := s.ws.exec(ctx, `INSERT INTO checkpoints (run_id, `+cpCols+`)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND token <= ?)
ON CONFLICT (run_id, node_id) DO UPDATE SET
	status = excluded.status, plan_version = excluded.plan_version, inputs_hash = excluded.inputs_hash,
	effect = excluded.effect, output = excluded.output, summary = excluded.summary, error = excluded.error,
	error_code = excluded.error_code, error_trace = excluded.error_trace, skip_reason = excluded.skip_reason,
	interrupt = excluded.interrupt, resumes = excluded.resumes, attempt = excluded.attempt,
	attempt_id = excluded.attempt_id, replayed = excluded.replayed, started_at = excluded.started_at,
	updated_at = excluded.updated_at, next_attempt_at = excluded.next_attempt_at, token = excluded.token`,
		cp.RunID, cp.NodeID, string(cp.Status), cp.PlanVersion, cp.InputsHash, string(cp.Effect), output, cp.Summary,
		cp.Error, cp.ErrorCode, cp.ErrorTrace, cp.SkipReason, interrupt, cp.Resumes, cp.Attempt, cp.AttemptID,
		cp.Replayed, micros(cp.StartedAt), micros(cp.UpdatedAt), micros(cp.NextAttemptAt), cp.Token,
		cp.RunID, cp.Token)
	if err != nil {
		return fmt.Errorf("sqlite store: checkpoint %s/%s: %w", cp.RunID, cp.NodeID, err)
	}
	return s.applied(ctx, res, cp.RunID, cp.Token)
}

// Checkpoints implements runtime.Store: the run's checkpoints in the order
// their nodes were first saved.
func (s *Store) Checkpoints(ctx context.Context, runID string) ([]*runtime.Checkpoint, error) {
	rows, err := s.rs.query(ctx, `SELECT `+cpCols+` FROM checkpoints WHERE run_id = ? ORDER BY ord`, runID)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: checkpoints of %s: %w", runID, err)
	}
	defer rows.Close()
	var out []*runtime.Checkpoint
	for rows.Next() {
		cp := &runtime.Checkpoint{RunID: runID}
		var (
			status, effect            string
			output, interrupt         []byte
			started, updated, nextAtt int64
		)
		if err := rows.Scan(&cp.NodeID, &status, &cp.PlanVersion, &cp.InputsHash, &effect, &output, &cp.Summary,
			&cp.Error, &cp.ErrorCode, &cp.ErrorTrace, &cp.SkipReason, &interrupt, &cp.Resumes, &cp.Attempt,
			&cp.AttemptID, &cp.Replayed, &started, &updated, &nextAtt, &cp.Token); err != nil {
			return nil, fmt.Errorf("sqlite store: checkpoints of %s: %w", runID, err)
		}
		cp.Status, cp.Effect = runtime.NodeStatus(status), runtime.Effect(effect)
		cp.StartedAt, cp.UpdatedAt, cp.NextAttemptAt = fromMicros(started), fromMicros(updated), fromMicros(nextAtt)
		if cp.Output, err = jsonAny(output); err != nil {
			return nil, fmt.Errorf("sqlite store: checkpoint %s/%s output: %w", runID, cp.NodeID, err)
		}
		if interrupt != nil {
			cp.Interrupt = new(runtime.InterruptInfo)
			if err := json.Unmarshal(interrupt, cp.Interrupt); err != nil {
				return nil, fmt.Errorf("sqlite store: checkpoint %s/%s interrupt: %w", runID, cp.NodeID, err)
			}
		}
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: checkpoints of %s: %w", runID, err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) exists(ctx context.Context, runID string) error {
	var one int
	err := s.rs.queryRow(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	if err != nil {
		return fmt.Errorf("sqlite store: run %s: %w", runID, err)
	}
	return nil
}

// --- events -------------------------------------------------------------

// AppendEvents implements runtime.Store. Moving LastSeq (conditional on
// the token and on the current LastSeq) and inserting the events are one
// transaction.
func (s *Store) AppendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) (err error) {
	defer func() {
		if err != nil && !errors.Is(err, runtime.ErrRunNotFound) && !errors.Is(err, runtime.ErrFenced) && !errors.Is(err, runtime.ErrSeqConflict) {
			err = fmt.Errorf("sqlite store: append events to %s: %w", runID, err)
		}
	}()
	contiguous := true
	for i := range evs {
		contiguous = contiguous && evs[i].Seq == evs[0].Seq+int64(i)
	}
	if len(evs) == 0 || !contiguous {
		// Nothing to write; report fencing first, as for any write.
		if _, err := s.fence(s.ws.queryRow(ctx, fenceQuery, runID), runID, token); err != nil || len(evs) == 0 {
			return err
		}
		return fmt.Errorf("%w: run %s: batch seqs are not consecutive", runtime.ErrSeqConflict, runID)
	}
	data := make([]any, len(evs))
	for i := range evs {
		if data[i], err = jsonText(evs[i].Data); err != nil {
			return fmt.Errorf("event %d data: %w", evs[i].Seq, err)
		}
	}

	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	advance, err := s.ws.in(ctx, tx, advanceQuery)
	if err != nil {
		return err
	}
	res, err := advance.ExecContext(ctx, evs[len(evs)-1].Seq, runID, token, evs[0].Seq-1)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		fence, err := s.ws.in(ctx, tx, fenceQuery)
		if err != nil {
			return err
		}
		last, err := s.fence(fence.QueryRowContext(ctx, runID), runID, token)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, runID, last+1, evs[0].Seq)
	}
	insert, err := s.ws.in(ctx, tx, insertEventQuery)
	if err != nil {
		return err
	}
	for i := range evs {
		e := &evs[i]
		if _, err := insert.ExecContext(ctx, runID, e.Seq, string(e.Type), e.ChatID, e.NodeID, e.Attempt, micros(e.Time), data[i]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Events implements runtime.Store. Data comes back as json.RawMessage.
func (s *Store) Events(ctx context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.rs.query(ctx, `SELECT seq, type, chat_id, node_id, attempt, at, data FROM events
WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: events of %s: %w", runID, err)
	}
	defer rows.Close()
	var out []runtime.Event
	for rows.Next() {
		e := runtime.Event{RunID: runID}
		var (
			typ  string
			at   int64
			data []byte
		)
		if err := rows.Scan(&e.Seq, &typ, &e.ChatID, &e.NodeID, &e.Attempt, &at, &data); err != nil {
			return nil, fmt.Errorf("sqlite store: events of %s: %w", runID, err)
		}
		e.Type, e.Time = runtime.EventType(typ), fromMicros(at)
		if data != nil {
			e.Data = json.RawMessage(data)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: events of %s: %w", runID, err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// --- leases -------------------------------------------------------------

// ClaimRun implements runtime.Leaser in one conditional UPDATE.
func (s *Store) ClaimRun(ctx context.Context, runID, owner string, ttl time.Duration) (runtime.Lease, error) {
	now := s.now()
	expires := micros(now.Add(ttl))
	var token int64
	err := s.ws.queryRow(ctx, `UPDATE runs SET token = token + 1, lease_owner = ?, lease_expires_at = ?
WHERE id = ? AND (lease_owner = '' OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)
RETURNING token`, owner, expires, runID, owner, micros(now)).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		var holder string
		var until int64
		err := s.ws.queryRow(ctx, `SELECT lease_owner, coalesce(lease_expires_at, 0) FROM runs WHERE id = ?`, runID).Scan(&holder, &until)
		if errors.Is(err, sql.ErrNoRows) {
			return runtime.Lease{}, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
		}
		if err != nil {
			return runtime.Lease{}, fmt.Errorf("sqlite store: claim %s: %w", runID, err)
		}
		return runtime.Lease{}, fmt.Errorf("%w: run %s is held by %s until %s", runtime.ErrLeaseHeld, runID, holder,
			fromMicros(until).Format(time.RFC3339Nano))
	}
	if err != nil {
		return runtime.Lease{}, fmt.Errorf("sqlite store: claim %s: %w", runID, err)
	}
	return runtime.Lease{RunID: runID, Owner: owner, Token: token, ExpiresAt: fromMicros(expires)}, nil
}

// RenewLease implements runtime.Leaser.
func (s *Store) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	expires := micros(s.now().Add(ttl))
	res, err := s.ws.exec(ctx, `UPDATE runs SET lease_expires_at = ?
WHERE id = ? AND token = ? AND lease_owner = ? AND lease_owner != ''`, expires, l.RunID, l.Token, l.Owner)
	if err != nil {
		return runtime.Lease{}, fmt.Errorf("sqlite store: renew %s: %w", l.RunID, err)
	}
	if err := s.leaseApplied(ctx, res, l); err != nil {
		return runtime.Lease{}, err
	}
	l.ExpiresAt = fromMicros(expires)
	return l, nil
}

// ReleaseLease implements runtime.Leaser. Releasing a lease already
// released is a no-op.
func (s *Store) ReleaseLease(ctx context.Context, l runtime.Lease) error {
	res, err := s.ws.exec(ctx, `UPDATE runs SET lease_owner = '', lease_expires_at = NULL
WHERE id = ? AND token = ? AND lease_owner IN (?, '')`, l.RunID, l.Token, l.Owner)
	if err != nil {
		return fmt.Errorf("sqlite store: release %s: %w", l.RunID, err)
	}
	return s.leaseApplied(ctx, res, l)
}

func (s *Store) leaseApplied(ctx context.Context, res sql.Result, l runtime.Lease) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	var token int64
	var owner string
	err = s.ws.queryRow(ctx, `SELECT token, lease_owner FROM runs WHERE id = ?`, l.RunID).Scan(&token, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, l.RunID)
	}
	if err != nil {
		return fmt.Errorf("sqlite store: lease of %s: %w", l.RunID, err)
	}
	return fmt.Errorf("%w: run %s is at token %d (owner %q), lease has %d (owner %q)",
		runtime.ErrFenced, l.RunID, token, owner, l.Token, l.Owner)
}

// ExpiredRuns implements runtime.Leaser: running runs whose lease expired
// at now or that have none, oldest (CreatedAt) first. limit <= 0 means no
// limit.
func (s *Store) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rs.query(ctx, `SELECT id FROM runs
WHERE status = ? AND (lease_owner = '' OR lease_expires_at IS NULL OR lease_expires_at <= ?)
ORDER BY created_at, id LIMIT ?`, string(runtime.RunRunning), micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: expired runs: %w", err)
	}
	return collectIDs(rows)
}

func collectIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// --- inspection ---------------------------------------------------------

// ListRuns implements runtime.Inspector: runs matching f, newest
// (CreatedAt) first. After and Before are exclusive bounds.
func (s *Store) ListRuns(ctx context.Context, f runtime.RunFilter) ([]*runtime.RunRecord, error) {
	var (
		where []string
		args  []any
	)
	if len(f.Status) > 0 {
		where = append(where, `status IN (?`+strings.Repeat(`, ?`, len(f.Status)-1)+`)`)
		for _, st := range f.Status {
			args = append(args, string(st))
		}
	}
	if f.ChatID != "" {
		where, args = append(where, `chat_id = ?`), append(args, f.ChatID)
	}
	if f.GraphID != "" {
		where, args = append(where, `graph_id = ?`), append(args, f.GraphID)
	}
	if !f.After.IsZero() {
		where, args = append(where, `created_at > ?`), append(args, micros(f.After))
	}
	if !f.Before.IsZero() {
		where, args = append(where, `created_at < ?`), append(args, micros(f.Before))
	}
	q := `SELECT ` + runCols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list runs: %w", err)
	}
	defer rows.Close()
	var out []*runtime.RunRecord
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: list runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteRun implements runtime.Inspector.
func (s *Store) DeleteRun(ctx context.Context, runID string) error {
	n, err := s.deleteRuns(ctx, func(*sql.Tx) ([]string, error) { return []string{runID}, nil })
	if err != nil {
		return fmt.Errorf("sqlite store: delete run %s: %w", runID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	return nil
}

// deleteBatch bounds how many runs one retention transaction removes, so
// the write lock is never held for long.
const deleteBatch = 500

// DeleteFinishedBefore implements runtime.Inspector. It deletes in
// transactions of at most 500 runs.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time) (int, error) {
	total := 0
	for {
		n, err := s.deleteRuns(ctx, func(tx *sql.Tx) ([]string, error) {
			rows, err := tx.QueryContext(ctx, `SELECT id FROM runs WHERE status IN (?, ?, ?) AND updated_at < ? LIMIT ?`,
				string(runtime.RunCompleted), string(runtime.RunFailed), string(runtime.RunCancelled), micros(t), deleteBatch)
			if err != nil {
				return nil, err
			}
			return collectIDs(rows)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("sqlite store: retention: %w", err)
		}
		if n < deleteBatch {
			return total, nil
		}
	}
}

// deleteRuns removes the runs pick chooses, with their checkpoints and
// events, in one transaction, and returns how many runs it removed.
func (s *Store) deleteRuns(ctx context.Context, pick func(*sql.Tx) ([]string, error)) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	ids, err := pick(tx)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	in := `(?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	for _, table := range []string{"events", "checkpoints"} {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE run_id IN `+in, args...); err != nil {
			return 0, err
		}
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE id IN `+in, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return int(n), nil
}
