package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"chatgraph/runtime"
)

// What another store keeping its tables in this schema needs, so that one
// of its transactions can also reserve a run: the pool (Pool), the
// schema-qualified names of its tables (Table) and the reservation insert
// (ReserveRun); and so that its writes can join a run's group commit
// (Write).

// Write is an application's write in a run's transaction
// (runtime.Joined): WriteBatches runs it on tx after the batch's own
// writes, and an error rolls the whole group commit back. It must use tx
// only and may run more than once (a refused group commit is applied
// again run by run to find whose writes were refused).
type Write func(ctx context.Context, tx pgx.Tx) error

// Pool returns the store's connection pool (its connections' search_path
// is the schema). It closes with the store; the caller must not close it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns name qualified with the store's schema, quoted as SQL
// needs it (for example "chatgraph".chats). name must be a plain
// lower-case identifier.
func (s *Store) Table(name string) string { return s.ident + "." + name }

// ReserveRun inserts rec, whose Status must be runtime.RunPending, in tx:
// a reservation of the run id, which the creation of the run (CreateRun)
// later replaces. ErrRunExists if a record with the id exists, pending or
// not (a reservation racing another of the same id waits for it to
// commit). The record has no lease.
func (s *Store) ReserveRun(ctx context.Context, tx pgx.Tx, rec *runtime.RunRecord) error {
	if rec.Status != runtime.RunPending {
		return fmt.Errorf("postgres store: reserve run %s: status is %q, a reservation is %q", rec.ID, rec.Status, runtime.RunPending)
	}
	args, err := runArgs(rec)
	if err != nil {
		return fmt.Errorf("postgres store: reserve run %s: %w", rec.ID, err)
	}
	args = append([]any{rec.ID}, args...)
	args = append(args, rec.LastSeq, rec.Token)
	tag, err := tx.Exec(ctx, s.q.reserveRun, args...)
	if err != nil {
		return fmt.Errorf("postgres store: reserve run %s: %w", rec.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, rec.ID)
	}
	return nil
}
