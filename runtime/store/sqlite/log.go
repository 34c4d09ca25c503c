package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"chatgraph/runtime"
	"chatgraph/runtime/store/internal/rowjson"
)

const cpCols = `node_id, status, plan_version, inputs_hash, effect, output, summary, error, error_code, error_trace,
	skip_reason, interrupt, resumes, attempt, attempt_id, replayed, started_at, updated_at, next_attempt_at, token`

// saveCheckpointQuery upserts a checkpoint only if the run's token is not
// newer than the checkpoint's: the check and the write are one statement.
const saveCheckpointQuery = `INSERT INTO checkpoints (run_id, ` + cpCols + `)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND token <= ?)
` + checkpointUpsert

// checkpointUpsert ends the inserts of checkpoints: a node's checkpoint
// replaces its last.
const checkpointUpsert = `ON CONFLICT (run_id, node_id) DO UPDATE SET
	status = excluded.status, plan_version = excluded.plan_version, inputs_hash = excluded.inputs_hash,
	effect = excluded.effect, output = excluded.output, summary = excluded.summary, error = excluded.error,
	error_code = excluded.error_code, error_trace = excluded.error_trace, skip_reason = excluded.skip_reason,
	interrupt = excluded.interrupt, resumes = excluded.resumes, attempt = excluded.attempt,
	attempt_id = excluded.attempt_id, replayed = excluded.replayed, started_at = excluded.started_at,
	updated_at = excluded.updated_at, next_attempt_at = excluded.next_attempt_at, token = excluded.token`

// saveCheckpointsQueries are the upserts of n checkpoints (n a power of
// two up to maxCheckpointRows), each row fenced as saveCheckpointQuery
// fences one (v.column1 is its run, v.column21 its token): a group
// commit's checkpoints in a few statements, not one each.
var saveCheckpointsQueries = func() map[int]string {
	row := `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	m := map[int]string{}
	for n := 1; n <= maxCheckpointRows; n *= 2 {
		m[n] = `INSERT INTO checkpoints (run_id, ` + cpCols + `)
SELECT * FROM (VALUES ` + row + strings.Repeat(", "+row, n-1) + `) AS v
WHERE EXISTS (SELECT 1 FROM runs WHERE id = v.column1 AND token <= v.column21)
` + checkpointUpsert
	}
	return m
}()

// maxCheckpointRows is the most checkpoints one upsert carries.
const maxCheckpointRows = 32

// insertChunkQuery inserts a compacted segment (chunk.go).
const insertChunkQuery = `INSERT INTO event_chunks (run_id, first_seq, last_seq, data) VALUES (?, ?, ?, ?)`

// insertRows is the row count of the next INSERT for left rows: the
// largest power of two not above left, capped at maxRows.
func insertRows(left, maxRows int) int {
	n := 1
	for n*2 <= left && n*2 <= maxRows {
		n *= 2
	}
	return n
}

// txQueries are the statements run inside write transactions through
// database/sql; Open prepares them (see stmts.in). Those a group commit
// runs for every run in it (the tail's pages, its segments' statements,
// a run's end, checkpoints, one-row reads) run on the writer's driver
// connection and are prepared there (rawexec.go).
var txQueries = []string{logStateQuery, saveCheckpointQuery, putEffectQuery, getEffectQuery, reserveRunQuery,
	createRunQuery, updateRunQuery, createClaimedQuery, claimQuery, leaseHolderQuery, renewQuery, releaseQuery,
	leaseQuery, claimExpiredQuery, deleteEffectsQuery, sweepQuery, finishedQuery,
	compactedQuery, oldestSegmentQuery, pinningQuery,
	truncateQuery, pagesFromQuery}

// wrap prefixes err with the operation unless it is one of the sentinels
// callers branch on, whose messages already say what happened.
func wrap(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, runtime.ErrRunNotFound) || errors.Is(err, runtime.ErrFenced) ||
		errors.Is(err, runtime.ErrSeqConflict) {
		return err
	}
	return fmt.Errorf("sqlite store: "+format+": %w", append(args, err)...)
}

// inTxOp runs fn in inTx. fn's error comes back as fn returned it; an
// error of the transaction around fn (waiting for the writer, beginning,
// committing) is prefixed like wrap with the operation.
func (s *Store) inTxOp(ctx context.Context, fn func(*sql.Tx) error, format string, args ...any) error {
	var fnErr error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		fnErr = fn(tx)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return fmt.Errorf("sqlite store: "+format+": %w", append(args, err)...)
	}
	return err
}

// SaveCheckpoint implements runtime.Store in one conditional statement.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error { return s.saveCheckpoint(ctx, tx, cp) })
	return wrap(err, "checkpoint %s/%s", cp.RunID, cp.NodeID)
}

// saveCheckpoints upserts cps in tx, in order, as saveCheckpoint would
// one by one, up to maxCheckpointRows in one statement (execRows): a
// statement that changed fewer rows than it carried met a fenced
// checkpoint (or a missing run), which saving its checkpoints one by one
// names.
func (s *Store) saveCheckpoints(ctx context.Context, tx *sql.Tx, cps []*runtime.Checkpoint) error {
	return execRows(ctx, s, cps, maxCheckpointRows, saveCheckpointsQueries, checkpointArgs,
		func(cp *runtime.Checkpoint) error {
			return wrap(s.saveCheckpoint(ctx, tx, cp), "checkpoint %s/%s", cp.RunID, cp.NodeID)
		}, "save checkpoints")
}

// checkpointArgs appends the values saveCheckpointsQueries insert for cp
// to args.
func checkpointArgs(args []any, cp *runtime.Checkpoint) ([]any, error) {
	output, err := jsonText(cp.Output)
	if err != nil {
		return nil, wrap(fmt.Errorf("output: %w", err), "checkpoint %s/%s", cp.RunID, cp.NodeID)
	}
	var interrupt any
	if cp.Interrupt != nil {
		if interrupt, err = jsonText(cp.Interrupt); err != nil {
			return nil, wrap(fmt.Errorf("interrupt: %w", err), "checkpoint %s/%s", cp.RunID, cp.NodeID)
		}
	}
	replayed := int64(0)
	if cp.Replayed {
		replayed = 1
	}
	return append(args, cp.RunID, cp.NodeID, string(cp.Status), cp.PlanVersion, cp.InputsHash, string(cp.Effect), output,
		cp.Summary, cp.Error, cp.ErrorCode, cp.ErrorTrace, cp.SkipReason, interrupt, int64(cp.Resumes), int64(cp.Attempt),
		cp.AttemptID, replayed, micros(cp.StartedAt), micros(cp.UpdatedAt), micros(cp.NextAttemptAt), cp.Token), nil
}

// execRows writes items in tx with the multi-row statements queries (of
// n rows, n a power of two up to maxRows), values appending an item's
// values to a statement's: a group commit's rows of one kind in a few
// statements, on the writer's driver connection, instead of one each.
// Each item's row is conditional (a fence, a conflict): when a statement
// changed fewer rows than it carried, one writes its items one by one,
// in order, and the first refused names itself (the transaction is then
// rolled back whole, so what the statement wrote does not stay).
func execRows[T any](ctx context.Context, s *Store, items []T, maxRows int, queries map[int]string,
	values func([]any, T) ([]any, error), one func(T) error, what string) error {
	args := s.rowArgs[:0]
	defer func() {
		clear(args) // keep no value alive
		s.rowArgs = args[:0]
	}()
	for len(items) > 0 {
		n := insertRows(len(items), maxRows)
		args = args[:0]
		for _, it := range items[:n] {
			var err error
			if args, err = values(args, it); err != nil {
				return err
			}
		}
		wrote, err := s.execHotRows(ctx, queries[n], args)
		if err != nil {
			return fmt.Errorf("sqlite store: %s: %w", what, err)
		}
		if wrote < int64(n) {
			for _, it := range items[:n] {
				if err := one(it); err != nil {
					return err
				}
			}
			return fmt.Errorf("sqlite store: %s: %d of %d rows changed, and none refused one by one", what, wrote, n)
		}
		items = items[n:]
	}
	return nil
}

func (s *Store) saveCheckpoint(ctx context.Context, tx *sql.Tx, cp *runtime.Checkpoint) error {
	output, err := jsonText(cp.Output)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	var interrupt any
	if cp.Interrupt != nil {
		if interrupt, err = jsonText(cp.Interrupt); err != nil {
			return fmt.Errorf("interrupt: %w", err)
		}
	}
	res, err := s.ws.execIn(ctx, tx, saveCheckpointQuery,
		cp.RunID, cp.NodeID, string(cp.Status), cp.PlanVersion, cp.InputsHash, string(cp.Effect), output, cp.Summary,
		cp.Error, cp.ErrorCode, cp.ErrorTrace, cp.SkipReason, interrupt, cp.Resumes, cp.Attempt, cp.AttemptID,
		cp.Replayed, micros(cp.StartedAt), micros(cp.UpdatedAt), micros(cp.NextAttemptAt), cp.Token,
		cp.RunID, cp.Token)
	if err != nil {
		return err
	}
	return s.applied(ctx, tx, res, cp.RunID, cp.Token)
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
		if cp.Output, err = rowjson.Any(output); err != nil {
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

// AppendEvents implements runtime.Store: the checks and the rows in one
// transaction (see tail.go for where the rows go).
func (s *Store) AppendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) error {
	var err error
	if len(evs) == 0 {
		_, err = s.fence(ctx, nil, runID, token) // nothing to write, but a fenced writer learns it
	} else {
		err = s.inLogTx(ctx, false, func(lt *logTx) error { return lt.append(runID, token, evs, false) })
	}
	return wrap(err, "append events to %s", runID)
}

// WriteBatches implements runtime.BatchWriter and runtime.BatchFinisher:
// every batch's creation, checkpoints, events, final record, lease
// release and joined writes (Write), in one transaction — one commit, one
// fsync. Any refused write (ErrFenced, ErrSeqConflict, ErrRunNotFound, a
// joined write's error) rolls the whole call back.
func (s *Store) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	err := s.inLogTx(ctx, true, func(lt *logTx) error {
		// The events of every batch are inserted together at the end,
		// after the joined writes (which must not read them: see Write).
		tx := lt.tx
		// The runs the batches create come first, together (their
		// checkpoints and segments read their records).
		creates := s.createBuf[:0]
		defer func() {
			clear(creates)
			s.createBuf = creates[:0]
		}()
		for i := range batches {
			if b := &batches[i]; b.Create != nil {
				if b.Lease == nil {
					return fmt.Errorf("sqlite store: create %s in a batch needs its lease", b.Create.ID)
				}
				creates = append(creates, b)
			}
		}
		if err := s.createClaimedAll(ctx, tx, creates); err != nil {
			return err
		}
		for _, b := range creates {
			lt.created(b.Create.ID, b.Lease.Token, b.Create.LastSeq)
		}
		cps := s.cpBuf[:0]
		defer func() {
			clear(cps)
			s.cpBuf = cps[:0]
		}()
		for _, b := range batches {
			// A run that ends or lets go of its lease moves its log's
			// segment into event_chunks.
			end := b.Finish != nil || b.Release != nil
			if end || b.Create != nil || len(b.Writes) > 0 {
				// Writes other than the log's own are not examined: any
				// may move the tail's epoch (a run's token, say).
				lt.moved = true
			}
			// The checkpoints of every batch are saved together, once
			// every batch's run is created (the upsert's fence reads it).
			cps = append(cps, b.Checkpoints...)
			if b.Finish != nil {
				// The end's compaction leaves the log's last seq to the
				// finish (finishRun).
				lt.finishing, lt.finishLast = b.RunID, 0
			}
			if len(b.Events) > 0 {
				if err := lt.append(b.RunID, b.Token, b.Events, end); err != nil {
					return wrap(err, "append events to %s", b.RunID)
				}
			} else if end {
				if err := lt.end(b.RunID, b.Token); err != nil {
					return wrap(err, "append events to %s", b.RunID)
				}
			}
			released := false
			if b.Finish != nil {
				var err error
				last := lt.finishLast
				lt.finishing, lt.finishLast = "", 0
				if released, err = s.finishRun(ctx, tx, b.Finish, last, b.Release); err != nil {
					return err
				}
			}
			if b.Release != nil && !released {
				// Nothing to release when the lease already passed on:
				// Finish was fenced above in that case.
				if _, err := s.ws.execIn(ctx, tx, releaseQuery, b.Release.RunID, b.Release.Token, b.Release.Owner); err != nil {
					return wrap(err, "release %s", b.Release.RunID)
				}
			}
			for _, w := range b.Writes {
				fn, ok := w.(Write)
				if !ok {
					return fmt.Errorf("run %s: a joined write of type %T (want sqlite.Write)", b.RunID, w)
				}
				if err := fn(ctx, tx); err != nil {
					return err
				}
			}
		}
		return s.saveCheckpoints(ctx, tx, cps)
	})
	return wrap(err, "write batches")
}

// FinishesBatches marks the store as a runtime.BatchFinisher: WriteBatches
// applies Finish and Release in the batch's transaction.
func (s *Store) FinishesBatches() {}

// KeepsEventJSON marks the store as a runtime.JSONEventStore: it writes
// the bytes of Event.DataJSON.
func (s *Store) KeepsEventJSON() {}

// inTx runs fn in an IMMEDIATE transaction on the writer and commits it
// when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.inTxGated(ctx, false, fn)
}

// inTxGated is inTx taking its turn at the writer through the gate;
// urgent transactions go before the others waiting. The transaction is
// durable when it returns: synced by SQLite at COMMIT, or by the store's
// walSync once the writer is free. A caller that asked for it
// (runtime.DeferSync) gets the wait for that sync instead.
func (s *Store) inTxGated(ctx context.Context, urgent bool, fn func(*sql.Tx) error) error {
	return s.inTxGatedThen(ctx, urgent, fn, nil)
}

// inTxGatedThen is inTxGated running committed, when not nil, once the
// transaction committed, before the writer goes to the next.
func (s *Store) inTxGatedThen(ctx context.Context, urgent bool, fn func(*sql.Tx) error, committed func()) error {
	n, err := s.commitGated(ctx, urgent, fn, committed)
	if err != nil || s.wal == nil {
		return err
	}
	wait := func() error { return s.wal.wait(n) }
	if runtime.DeferSync(ctx, wait) {
		return nil
	}
	return wait()
}

// commitGated runs fn in a transaction holding the writer and commits it,
// then runs committed (when not nil); with a walSync it returns the
// transaction's number there.
func (s *Store) commitGated(ctx context.Context, urgent bool, fn func(*sql.Tx) error, committed func()) (uint64, error) {
	if err := s.gate.enter(ctx, urgent); err != nil {
		return 0, err
	}
	defer s.gate.leave()
	// The transaction runs on a connection taken from the pool (its only
	// one), so that execHot can reach the driver's connection under it.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	defer s.releaseUnusable(conn) // after the transaction ends, before the release
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	s.wconn, s.wtx = conn, tx
	err = fn(tx)
	s.wconn, s.wtx = nil, nil
	if err != nil {
		return 0, err
	}
	var n uint64
	if s.wal != nil {
		s.wal.begin()
	}
	err = tx.Commit()
	if s.wal != nil {
		n = s.wal.wrote()
	}
	if err != nil {
		return 0, err
	}
	if committed != nil {
		committed()
	}
	s.ck.dirty.Store(true)
	return n, nil
}

// eventsQuery reads a run's events in the events table.
const eventsQuery = `SELECT seq, type, chat_id, node_id, attempt, at, data FROM events
WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`

// chunksQuery reads a run's compacted segments (chunk.go) that hold
// events after a seq.
const chunksQuery = `SELECT data FROM event_chunks WHERE run_id = ? AND last_seq > ? ORDER BY last_seq`

// readLogQueries are the statements Events runs in its read transaction.
var readLogQueries = []string{tailStateQuery, eventsQuery, chunksQuery, pagesFromQuery}

// beginRead starts a read transaction on a reader connection, first
// preparing qs, the statements it will run (preparing one needs a
// connection of its own).
func (s *Store) beginRead(ctx context.Context, qs []string) (*sql.Tx, error) {
	for _, q := range qs {
		if _, err := s.rs.get(ctx, q); err != nil {
			return nil, err
		}
	}
	return s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
}

// inReadTx runs fn in a read transaction (beginRead).
func (s *Store) inReadTx(ctx context.Context, qs []string, fn func(*sql.Tx) error) error {
	tx, err := s.beginRead(ctx, qs)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read only
	return fn(tx)
}

// Events implements runtime.Store. Data comes back as json.RawMessage.
// The compacted log (events and event_chunks) and the run's segment in
// the tail (tail.go) are read in one read transaction; the segment comes
// from the store's memory when the file has it as the store remembers it
// (the same first row, and the last seq the store last wrote to
// run_tails: another store on the file may have appended to it, and
// would have written that).
func (s *Store) Events(ctx context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	out, err := s.events(ctx, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: events of %s: %w", runID, err)
	}
	if s.wal != nil {
		// The read may have seen a transaction not yet synced: a client
		// gets only events that survive power loss.
		if err := s.wal.wait(s.wal.visible()); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) events(ctx context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	// Read what the store remembers first: a segment compacted after this
	// is in the compacted log the transaction reads.
	mem := s.tails.get(runID)
	tx, err := s.beginRead(ctx, readLogQueries)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // read only
	var from, last int64
	if err := s.rs.queryRowIn(ctx, tx, tailStateQuery, runID).Scan(&from, &last); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	sqlLimit := limit
	if limit <= 0 {
		sqlLimit = -1 // SQLite: no limit
	}
	rows, err := s.rs.queryIn(ctx, tx, eventsQuery, runID, after, sqlLimit)
	if err != nil {
		return nil, err
	}
	var out []runtime.Event
	for rows.Next() {
		e, err := scanEvent(rows, runID)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	if out, err = s.readChunks(ctx, tx, runID, after, limit, out); err != nil {
		return nil, err
	}
	if from == 0 || (limit > 0 && len(out) >= limit) {
		return out, nil
	}
	seg := mem.rows
	if mem.from != from || mem.fileLast != last {
		if seg, err = readSegment(ctx, s.rs, tx, runID, from); err != nil {
			return nil, err
		}
	}
	// The segment continues the compacted log.
	next := after + 1
	if len(out) > 0 {
		next = out[len(out)-1].Seq + 1
	}
	for _, r := range seg {
		if r.ev.Seq < next {
			continue
		}
		if r.ev.Seq != next || (limit > 0 && len(out) >= limit) {
			break
		}
		out = append(out, *r.ev)
		next++
	}
	return out, nil
}
