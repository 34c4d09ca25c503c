package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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
ON CONFLICT (run_id, node_id) DO UPDATE SET
	status = excluded.status, plan_version = excluded.plan_version, inputs_hash = excluded.inputs_hash,
	effect = excluded.effect, output = excluded.output, summary = excluded.summary, error = excluded.error,
	error_code = excluded.error_code, error_trace = excluded.error_trace, skip_reason = excluded.skip_reason,
	interrupt = excluded.interrupt, resumes = excluded.resumes, attempt = excluded.attempt,
	attempt_id = excluded.attempt_id, replayed = excluded.replayed, started_at = excluded.started_at,
	updated_at = excluded.updated_at, next_attempt_at = excluded.next_attempt_at, token = excluded.token`

// advanceQuery moves LastSeq only if the token is current and the log
// ends where the batch starts.
const advanceQuery = `UPDATE runs SET last_seq = ? WHERE id = ? AND token <= ? AND last_seq = ?`

// eventCols is the number of columns insertEvents writes per row.
const eventCols = 8

// maxInsertRows is the most rows one event INSERT carries. A group commit
// inserts its events with one statement per power of two in their count
// (21 events: 16 + 4 + 1), each prepared once: a statement's overhead
// (binding, stepping, resetting) is paid per statement, not per row.
const maxInsertRows = 64

// insertEventsQueries[n] inserts n events (n a power of two up to
// maxInsertRows).
var insertEventsQueries = func() map[int]string {
	m := map[int]string{}
	for n := 1; n <= maxInsertRows; n *= 2 {
		q := `INSERT INTO events (run_id, seq, type, chat_id, node_id, attempt, at, data) VALUES `
		for i := range n {
			if i > 0 {
				q += ", "
			}
			q += "(?, ?, ?, ?, ?, ?, ?, ?)"
		}
		m[n] = q
	}
	return m
}()

// insertRows is the row count of the next INSERT for left rows: the
// largest power of two not above left, capped at maxInsertRows.
func insertRows(left int) int {
	n := 1
	for n*2 <= left && n*2 <= maxInsertRows {
		n *= 2
	}
	return n
}

// txQueries are the statements run inside write transactions; Open
// prepares them (see stmts.in).
var txQueries = func() []string {
	qs := []string{fenceQuery, saveCheckpointQuery, advanceQuery, putEffectQuery, getEffectQuery, reserveRunQuery,
		createRunQuery, updateRunQuery, createClaimedQuery, claimQuery, leaseHolderQuery, renewQuery, releaseQuery,
		leaseQuery, claimExpiredQuery, deleteEffectsQuery, sweepQuery, finishedQuery}
	for n := 1; n <= maxInsertRows; n *= 2 {
		qs = append(qs, insertEventsQueries[n])
	}
	return qs
}()

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

// AppendEvents implements runtime.Store. Moving LastSeq (conditional on
// the token and on the current LastSeq) and inserting the events are one
// transaction.
func (s *Store) AppendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) error {
	var err error
	if len(evs) == 0 {
		_, err = s.fence(ctx, nil, runID, token) // nothing to write, but a fenced writer learns it
	} else {
		err = s.inTx(ctx, func(tx *sql.Tx) error { return s.appendEvents(ctx, tx, runID, token, evs) })
	}
	return wrap(err, "append events to %s", runID)
}

// appendEvents appends evs (not empty) in tx.
func (s *Store) appendEvents(ctx context.Context, tx *sql.Tx, runID string, token int64, evs []runtime.Event) error {
	rows, err := s.advance(ctx, tx, runID, token, evs, nil)
	if err != nil {
		return err
	}
	return s.insertEvents(ctx, tx, rows)
}

// eventRow is one events row to insert.
type eventRow struct {
	runID string
	ev    *runtime.Event
	data  any // the data column
}

// advance moves runID's LastSeq past evs (not empty) in tx, checking the
// token and that evs continue the log, and appends their rows to rows for
// insertEvents.
func (s *Store) advance(ctx context.Context, tx *sql.Tx, runID string, token int64, evs []runtime.Event, rows []eventRow) ([]eventRow, error) {
	for i := range evs {
		if evs[i].Seq != evs[0].Seq+int64(i) {
			// Report fencing first, as for any write.
			if _, err := s.fence(ctx, tx, runID, token); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: run %s: batch seqs are not consecutive", runtime.ErrSeqConflict, runID)
		}
	}
	for i := range evs {
		data, err := evs[i].DataJSON()
		if err != nil {
			return nil, fmt.Errorf("event %d data: %w", evs[i].Seq, err)
		}
		rows = append(rows, eventRow{runID: runID, ev: &evs[i], data: text(data)})
	}
	res, err := s.ws.execIn(ctx, tx, advanceQuery, evs[len(evs)-1].Seq, runID, token, evs[0].Seq-1)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n == 0 {
		last, err := s.fence(ctx, tx, runID, token)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, runID, last+1, evs[0].Seq)
	}
	return rows, nil
}

// insertEvents inserts rows in tx, up to maxInsertRows in one statement.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, rows []eventRow) error {
	args := make([]any, 0, eventCols*min(len(rows), maxInsertRows))
	for len(rows) > 0 {
		n := insertRows(len(rows))
		args = args[:0]
		for _, r := range rows[:n] {
			e := r.ev
			args = append(args, r.runID, e.Seq, string(e.Type), e.ChatID, e.NodeID, e.Attempt, micros(e.Time), r.data)
		}
		if _, err := s.ws.execIn(ctx, tx, insertEventsQueries[n], args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// WriteBatches implements runtime.BatchWriter and runtime.BatchFinisher:
// every batch's creation, checkpoints, events, final record, lease
// release and joined writes (Write), in one transaction — one commit, one
// fsync. Any refused write (ErrFenced, ErrSeqConflict, ErrRunNotFound, a
// joined write's error) rolls the whole call back.
func (s *Store) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	err := s.inTxGated(ctx, true, func(tx *sql.Tx) error {
		// The events of every batch are inserted together at the end,
		// after the joined writes (which must not read them: see Write).
		var rows []eventRow
		for _, b := range batches {
			if b.Create != nil {
				if b.Lease == nil {
					return fmt.Errorf("sqlite store: create %s in a batch needs its lease", b.Create.ID)
				}
				if err := s.createClaimed(ctx, tx, b.Create, *b.Lease); err != nil {
					return err
				}
			}
			for _, cp := range b.Checkpoints {
				if err := s.saveCheckpoint(ctx, tx, cp); err != nil {
					return wrap(err, "checkpoint %s/%s", cp.RunID, cp.NodeID)
				}
			}
			if len(b.Events) > 0 {
				var err error
				if rows, err = s.advance(ctx, tx, b.RunID, b.Token, b.Events, rows); err != nil {
					return wrap(err, "append events to %s", b.RunID)
				}
			}
			if b.Finish != nil {
				if err := s.finishRun(ctx, tx, b.Finish); err != nil {
					return err
				}
			}
			if b.Release != nil {
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
		return wrap(s.insertEvents(ctx, tx, rows), "insert events")
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
	n, err := s.commitGated(ctx, urgent, fn)
	if err != nil || s.wal == nil {
		return err
	}
	wait := func() error { return s.wal.wait(n) }
	if runtime.DeferSync(ctx, wait) {
		return nil
	}
	return wait()
}

// commitGated runs fn in a transaction holding the writer and commits it;
// with a walSync it returns the transaction's number there.
func (s *Store) commitGated(ctx context.Context, urgent bool, fn func(*sql.Tx) error) (uint64, error) {
	if err := s.gate.enter(ctx, urgent); err != nil {
		return 0, err
	}
	defer s.gate.leave()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx); err != nil {
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
	s.ck.dirty.Store(true)
	return n, nil
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
