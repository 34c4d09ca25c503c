package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"chatgraph/runtime"
	"chatgraph/runtime/store/internal/rowjson"
)

// runCols are the columns scanRun reads, from runsFrom. The log's last
// seq is run_tails' while the run has a segment in the tail (tail.go),
// where fast grows leave it behind: the last column is the segment's
// first row (0: none), from which the store finds the segment's last seq
// (lastSeqFromMemory, completeLastSeq).
const runCols = `id, parent_id, root_id, chat_id, graph_id, plan_version, kind, attrs, entry_node_ids,
	input, options, status, error, interrupts, answers,
	coalesce(t.last_seq, runs.last_seq), runs.token, created_at, updated_at, coalesce(t.tail_from, 0)`

// runsFrom is what runCols reads: a run and its segment's run_tails row,
// found with one lookup.
const runsFrom = `runs LEFT JOIN run_tails t ON t.run_id = runs.id`

// runArgs returns the record's column values in runCols order, without
// id, last_seq and token.
func runArgs(r *runtime.RunRecord) ([]any, error) {
	j, err := rowjson.EncodeRun(r)
	if err != nil {
		return nil, err
	}
	return []any{r.ParentID, r.RootID, r.ChatID, r.GraphID, r.PlanVersion, r.Kind, text(j.Attrs), text(j.EntryNodeIDs),
		text(j.Input), text(j.Options), string(r.Status), r.Error, text(j.Interrupts), text(j.Answers),
		micros(r.CreatedAt), micros(r.UpdatedAt)}, nil
}

// text is a JSON column's value for SQLite: the text, or NULL.
func text(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

type scanner interface{ Scan(dest ...any) error }

// scanRun scans a row of runCols; tailFrom is the first row of the run's
// segment in the tail (0: none).
func scanRun(row scanner) (r *runtime.RunRecord, tailFrom int64, err error) {
	r = new(runtime.RunRecord)
	var (
		j                rowjson.Run
		status           string
		created, updated int64
	)
	if err := row.Scan(&r.ID, &r.ParentID, &r.RootID, &r.ChatID, &r.GraphID, &r.PlanVersion, &r.Kind, &j.Attrs, &j.EntryNodeIDs,
		&j.Input, &j.Options, &status, &r.Error, &j.Interrupts, &j.Answers, &r.LastSeq, &r.Token, &created, &updated, &tailFrom); err != nil {
		return nil, 0, err
	}
	r.Status = runtime.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	if err := j.DecodeInto(r); err != nil {
		return nil, 0, err
	}
	return r, tailFrom, nil
}

// overReservation ends the inserts that create a run: a pending record
// with the id is a reservation, replaced whole (every column: the lease
// too — the insert's or none); any other record stays and the insert
// changes no row (ErrRunExists). A reservation has no checkpoints or
// events (nothing writes a run before it is created), so there are none
// to replace.
const overReservation = `ON CONFLICT (id) DO UPDATE SET
	parent_id = excluded.parent_id, root_id = excluded.root_id, chat_id = excluded.chat_id,
	graph_id = excluded.graph_id, plan_version = excluded.plan_version, kind = excluded.kind,
	attrs = excluded.attrs, entry_node_ids = excluded.entry_node_ids, input = excluded.input,
	options = excluded.options, status = excluded.status, error = excluded.error,
	interrupts = excluded.interrupts, answers = excluded.answers, last_seq = excluded.last_seq,
	token = excluded.token, lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at,
	created_at = excluded.created_at, updated_at = excluded.updated_at
WHERE runs.status = 'pending'`

// insertRunQuery inserts a run record without a lease; an ON CONFLICT
// clause completes it.
const insertRunQuery = `INSERT INTO runs (id, parent_id, root_id, chat_id, graph_id, plan_version, kind,
	attrs, entry_node_ids, input, options, status, error, interrupts, answers, created_at, updated_at, last_seq, token)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
`

// createRunQuery inserts a run record without a lease over a reservation.
const createRunQuery = insertRunQuery + overReservation

// CreateRun implements runtime.Store. It replaces a pending record with
// the id (a reservation, see ReserveRun); any other is ErrRunExists.
func (s *Store) CreateRun(ctx context.Context, r *runtime.RunRecord) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("sqlite store: create run %s: %w", r.ID, err)
	}
	args = append([]any{r.ID}, args...)
	args = append(args, r.LastSeq, r.Token)
	return s.inTxOp(ctx, func(tx *sql.Tx) error {
		return s.insertRun(ctx, tx, "create run", createRunQuery, r.ID, args)
	}, "create run %s", r.ID)
}

// insertRun runs q, an insert of run id with args, in tx: ErrRunExists
// when it inserted no row. op names the insert in the statement's errors.
func (s *Store) insertRun(ctx context.Context, tx *sql.Tx, op, q, id string, args []any) error {
	res, err := s.ws.execIn(ctx, tx, q, args...)
	if err != nil {
		return fmt.Errorf("sqlite store: %s %s: %w", op, id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, id)
	}
	return nil
}

// getRunQuery reads a run record.
const getRunQuery = `SELECT ` + runCols + ` FROM ` + runsFrom + ` WHERE id = ?`

// GetRun implements runtime.Store. A run whose segment in the tail the
// store does not remember (another store on the file appends to it) is
// read again with the segment's last row, in one read transaction.
func (s *Store) GetRun(ctx context.Context, id string) (*runtime.RunRecord, error) {
	r, from, err := scanRun(s.rs.queryRow(ctx, getRunQuery, id))
	if err == nil && !s.lastSeqFromMemory(r, from) {
		err = s.inReadTx(ctx, []string{getRunQuery, pagesFromQuery}, func(tx *sql.Tx) error {
			if r, from, err = scanRun(s.rs.queryRowIn(ctx, tx, getRunQuery, id)); err != nil {
				return err
			}
			return s.completeLastSeq(ctx, tx, r, from)
		})
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: get run %s: %w", id, err)
	}
	return r, nil
}

// UpdateRun implements runtime.Store. It replaces every field of the
// record but LastSeq (the event log owns it), in one statement conditional
// on the token; the lease is untouched.
func (s *Store) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("sqlite store: update run %s: %w", r.ID, err)
	}
	return s.inTxOp(ctx, func(tx *sql.Tx) error {
		return s.updateRun(ctx, tx, "sqlite store: update run", r, args)
	}, "update run %s", r.ID)
}

const updateRunQuery = `UPDATE runs SET parent_id = ?, root_id = ?, chat_id = ?, graph_id = ?,
	plan_version = ?, kind = ?, attrs = ?, entry_node_ids = ?, input = ?, options = ?, status = ?, error = ?,
	interrupts = ?, answers = ?, created_at = ?, updated_at = ?, token = ?
WHERE id = ? AND token <= ?`

// finishRun is UpdateRun inside a batch's transaction, with the log's
// last seq its end compacted (0: none; the runs row's last_seq takes it)
// and the lease the batch releases (nil: none). It reports whether it
// released the lease: otherwise the caller still must.
//
// A run's end is one statement (finishQuery) in the common case: it
// writes only what a finish changes — leaving the indexed columns a run
// keeps from its creation alone, so SQLite maintains two of the runs'
// five indexes, not all five — and takes the log's last seq and the
// lease's release with it, where they were three statements. It changes
// the row only if the columns it does not write are those of r; when
// they are not (or the write is fenced, or the run missing) it writes
// step by step as before: the last seq, the whole record (UpdateRun),
// and leaves the release to the caller.
func (s *Store) finishRun(ctx context.Context, tx *sql.Tx, r *runtime.RunRecord, last int64, rel *runtime.Lease) (released bool, err error) {
	j, err := rowjson.EncodeRun(r)
	if err != nil {
		return false, fmt.Errorf("finish run %s: %w", r.ID, err)
	}
	// A release after the finish matches the token the finish wrote.
	release, owner := rel != nil && rel.Token == r.Token, ""
	if rel != nil {
		owner = rel.Owner
	}
	// On the writer's driver connection (execHot): a group commit of runs
	// that end together runs this once for each.
	n, err := s.execHotRows(ctx, finishQuery, []any{
		text(j.Attrs), string(r.Status), r.Error, text(j.Interrupts), text(j.Answers), micros(r.UpdatedAt), r.Token, last,
		release, owner, release, owner,
		r.ID, r.Token, r.ParentID, r.RootID, r.ChatID, r.GraphID, r.PlanVersion, r.Kind,
		text(j.EntryNodeIDs), text(j.Input), text(j.Options), micros(r.CreatedAt)})
	if err != nil {
		return false, fmt.Errorf("finish run %s: %w", r.ID, err)
	}
	if n == 1 {
		return release, nil
	}
	if last > 0 {
		if _, err := s.ws.execIn(ctx, tx, compactedQuery, last, r.ID); err != nil {
			return false, err
		}
	}
	args, err := runArgs(r)
	if err != nil {
		return false, fmt.Errorf("finish run %s: %w", r.ID, err)
	}
	return false, s.updateRun(ctx, tx, "finish run", r, args)
}

// finishQuery is a run's end in one statement (finishRun): the columns a
// finish changes, the log's last seq, and the lease's release when the
// batch releases the lease the finish's token names, on condition that
// the run's other columns are the record's.
const finishQuery = `UPDATE runs SET attrs = ?, status = ?, error = ?, interrupts = ?, answers = ?, updated_at = ?,
	token = ?, last_seq = max(last_seq, ?),
	lease_owner = CASE WHEN ? AND lease_owner IN (?, '') THEN '' ELSE lease_owner END,
	lease_expires_at = CASE WHEN ? AND lease_owner IN (?, '') THEN NULL ELSE lease_expires_at END
WHERE id = ? AND token <= ? AND parent_id = ? AND root_id = ? AND chat_id = ? AND graph_id = ?
	AND plan_version = ? AND kind = ? AND entry_node_ids IS ? AND input IS ? AND options IS ? AND created_at = ?`

// updateRun writes r, whose column values runArgs returned as args, in
// tx, conditional on its token. op prefixes the statement's errors.
func (s *Store) updateRun(ctx context.Context, tx *sql.Tx, op string, r *runtime.RunRecord, args []any) error {
	res, err := s.ws.execIn(ctx, tx, updateRunQuery, append(args, r.Token, r.ID, r.Token)...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, r.ID, err)
	}
	return s.applied(ctx, tx, res, r.ID, r.Token)
}

// CreateClaimed implements runtime.RunStarter: the record and its first
// lease (token r.Token+1) in one insert, which replaces a pending record
// with the id (a reservation) as CreateRun does.
func (s *Store) CreateClaimed(ctx context.Context, r *runtime.RunRecord, owner string, ttl time.Duration) (runtime.Lease, error) {
	l := runtime.Lease{RunID: r.ID, Owner: owner, Token: r.Token + 1, ExpiresAt: fromMicros(micros(s.now().Add(ttl)))}
	err := s.inTxOp(ctx, func(tx *sql.Tx) error { return s.createClaimed(ctx, tx, r, l) }, "create run %s", r.ID)
	if err != nil {
		return runtime.Lease{}, err
	}
	return l, nil
}

// createClaimed inserts r holding lease l in tx.
func (s *Store) createClaimed(ctx context.Context, tx *sql.Tx, r *runtime.RunRecord, l runtime.Lease) error {
	args, err := createClaimedArgs(nil, r, l)
	if err != nil {
		return err
	}
	return s.insertRun(ctx, tx, "create run", createClaimedQuery, r.ID, args)
}

// createClaimedArgs appends the values createClaimedQuery inserts for r
// holding lease l to args.
func createClaimedArgs(args []any, r *runtime.RunRecord, l runtime.Lease) ([]any, error) {
	cols, err := runArgs(r)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: create run %s: %w", r.ID, err)
	}
	args = append(append(append(args, r.ID), cols...), r.LastSeq, l.Token, l.Owner, micros(l.ExpiresAt))
	return args, nil
}

// createClaimedAll inserts the runs of the batches that create one
// (Create, holding Lease), in tx, as createClaimed would one by one, up
// to maxCreateRows in one statement (execRows): a statement that changed
// fewer rows than it carried met a run that exists, which creating its
// runs one by one names.
func (s *Store) createClaimedAll(ctx context.Context, tx *sql.Tx, creates []*runtime.WriteBatch) error {
	return execRows(ctx, s, creates, maxCreateRows, createClaimedQueries,
		func(args []any, b *runtime.WriteBatch) ([]any, error) {
			return createClaimedArgs(args, b.Create, *b.Lease)
		},
		func(b *runtime.WriteBatch) error { return s.createClaimed(ctx, tx, b.Create, *b.Lease) }, "create runs")
}

// maxCreateRows is the most runs one insert creates.
const maxCreateRows = 32

// createClaimedQueries are the inserts of n runs holding their first
// lease (n a power of two up to maxCreateRows), each over a reservation
// as createClaimedQuery.
var createClaimedQueries = func() map[int]string {
	m := map[int]string{}
	for n := 1; n <= maxCreateRows; n *= 2 {
		m[n] = createClaimedInto + "VALUES " + createClaimedRow + strings.Repeat(", "+createClaimedRow, n-1) + "\n" + overReservation
	}
	return m
}()

const createClaimedQuery = createClaimedInto + "VALUES " + createClaimedRow + "\n" + overReservation

// createClaimedInto and createClaimedRow are createClaimedQuery's
// columns and a row of its values.
const (
	createClaimedInto = `INSERT INTO runs (id, parent_id, root_id, chat_id, graph_id, plan_version, kind,
	attrs, entry_node_ids, input, options, status, error, interrupts, answers, created_at, updated_at, last_seq, token,
	lease_owner, lease_expires_at)
`
	createClaimedRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// applied turns the result of a statement conditional on the run's token,
// run in tx, into nil, ErrRunNotFound or ErrFenced.
func (s *Store) applied(ctx context.Context, tx *sql.Tx, res sql.Result, runID string, token int64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err = s.fence(ctx, tx, runID, token)
	if err == nil {
		// The row matched when we looked again: only a concurrent change
		// can explain it, and tokens only grow.
		err = fmt.Errorf("%w: run %s changed under the write", runtime.ErrFenced, runID)
	}
	return err
}

// fence checks token against the run's (in tx, when not nil) and returns
// the run's last seq.
func (s *Store) fence(ctx context.Context, tx *sql.Tx, runID string, token int64) (lastSeq int64, err error) {
	lastSeq, _, err = s.logState(ctx, tx, runID, token)
	return lastSeq, err
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
