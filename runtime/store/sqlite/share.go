package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"chatgraph/runtime"
)

// What another store keeping its tables in this file needs, so that one
// of its transactions can also reserve a run: the writer (Update), the
// read pool (ReadDB) and the reservation insert (ReserveRun); so that its
// writes can join a run's group commit (Write); and prepared statements
// for both (Prepare, Stmt, ReadStmt, ReadRow).

// Write is an application's write in a run's transaction
// (runtime.Joined): WriteBatches runs it on tx after the batch's own
// writes, but before the event rows of the whole group are inserted (the
// last statements of the transaction), so it must not read the events
// table for them. An error rolls the whole group commit back. It must use
// tx only and may run more than once (a refused group commit is applied
// again run by run to find whose writes were refused).
type Write func(ctx context.Context, tx *sql.Tx) error

// Prepare prepares statements another store runs on the writer (in its
// Update or Write transactions, through Stmt) once, so they are not
// parsed again at every use. Call it before using them, outside any
// transaction of the store.
func (s *Store) Prepare(ctx context.Context, qs ...string) error {
	for _, q := range qs {
		if _, err := s.ws.get(ctx, q); err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
	}
	return nil
}

// Stmt returns q's writer statement bound to tx: prepared once when q
// was given to Prepare, else prepared on tx for this use only.
func (s *Store) Stmt(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	return s.ws.in(ctx, tx, q)
}

// Exec runs q, a write statement, with args in tx, a transaction on the
// store's writer (a joined write's, or Update's): on the writer's driver
// connection, prepared there once, without database/sql's per-call
// conversions and statement binding — as the store's own group-commit
// statements run (rawexec.go). A turn's writes in the chat store so cost
// the one goroutine every streaming delta waits for a little less. Any
// other transaction runs q as Stmt would.
func (s *Store) Exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if tx != s.wtx || s.wconn == nil {
		// Not the writer's transaction: as Stmt.
		st, err := s.ws.in(ctx, tx, q)
		if err != nil {
			return nil, err
		}
		return st.ExecContext(ctx, args...)
	}
	var res sql.Result
	err := s.wconn.Raw(func(dc any) error {
		var err error
		res, err = s.raw.execResult(ctx, dc, q, args)
		return err
	})
	return res, err
}

// ReadStmt returns q's statement on the read pool, prepared on first use
// and kept until the store closes (the caller must not close it).
func (s *Store) ReadStmt(ctx context.Context, q string) (*sql.Stmt, error) {
	return s.rs.get(ctx, q)
}

// ReadRow runs q's one-row query with args on the read pool, prepared as
// ReadStmt prepares it, and without ctx's cancellation once it has its
// statement, as the store's own one-row reads (see stmts.queryRow).
func (s *Store) ReadRow(ctx context.Context, q string, args ...any) interface{ Scan(...any) error } {
	return s.rs.queryRow(ctx, q, args...)
}

// Update runs fn in one IMMEDIATE transaction on the store's writer
// connection and commits it when fn returns nil (any error rolls it back).
// fn's writes are so serialised with every write of the store, and with
// other processes on the file through SQLite's lock. fn must use tx only:
// the writer has one connection, which tx holds until fn returns. When the
// file stays busy SQLite gives up after Config.BusyTimeout; Update then
// tries again within the same bound, so fn may run more than once and
// must have no effect outside tx.
func (s *Store) Update(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryBusy(ctx, s.busy, func() error { return s.inTx(ctx, fn) })
}

// ReadDB returns the store's pool of read-only connections (query_only),
// for reads of the file that need no transaction with a write. It closes
// with the store; the caller must not close it.
func (s *Store) ReadDB() *sql.DB { return s.r }

// ReserveRun inserts rec, whose Status must be runtime.RunPending, in tx
// (a transaction of Update): a reservation of the run id, which the
// creation of the run (CreateRun, CreateClaimed or a batch's Create)
// later replaces. ErrRunExists if a record with the id exists, pending or
// not. The record has no lease.
func (s *Store) ReserveRun(ctx context.Context, tx *sql.Tx, rec *runtime.RunRecord) error {
	if rec.Status != runtime.RunPending {
		return fmt.Errorf("sqlite store: reserve run %s: status is %q, a reservation is %q", rec.ID, rec.Status, runtime.RunPending)
	}
	args, err := runArgs(rec)
	if err != nil {
		return fmt.Errorf("sqlite store: reserve run %s: %w", rec.ID, err)
	}
	args = append([]any{rec.ID}, args...)
	args = append(args, rec.LastSeq, rec.Token)
	return s.insertRun(ctx, tx, "reserve run", reserveRunQuery, rec.ID, args)
}

const reserveRunQuery = insertRunQuery + `ON CONFLICT (id) DO NOTHING`
