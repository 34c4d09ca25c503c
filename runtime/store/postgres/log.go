package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"chatgraph/runtime"
	"chatgraph/runtime/store/internal/rowjson"
)

// checkpointArgs returns the saveCheckpoint statement's arguments.
func checkpointArgs(cp *runtime.Checkpoint) ([]any, error) {
	output, err := rowjson.Bytes(cp.Output)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	var interrupt []byte
	if cp.Interrupt != nil {
		if interrupt, err = json.Marshal(cp.Interrupt); err != nil {
			return nil, fmt.Errorf("interrupt: %w", err)
		}
	}
	return []any{cp.RunID, cp.NodeID, string(cp.Status), cp.PlanVersion, cp.InputsHash, string(cp.Effect), output,
		cp.Summary, cp.Error, cp.ErrorCode, cp.ErrorTrace, cp.SkipReason, interrupt, cp.Resumes, cp.Attempt,
		cp.AttemptID, cp.Replayed, cp.StartedAt, cp.UpdatedAt, cp.NextAttemptAt, cp.Token}, nil
}

// SaveCheckpoint implements runtime.Store in one conditional statement.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	args, err := checkpointArgs(cp)
	if err != nil {
		return fmt.Errorf("postgres store: checkpoint %s/%s: %w", cp.RunID, cp.NodeID, err)
	}
	tag, err := s.pool.Exec(ctx, s.q.saveCheckpoint, args...)
	if err == nil {
		err = s.applied(ctx, s.pool, tag, cp.RunID, cp.Token)
	}
	return wrap(err, "checkpoint %s/%s", cp.RunID, cp.NodeID)
}

// Checkpoints implements runtime.Store: the run's checkpoints in the order
// their nodes were first saved.
func (s *Store) Checkpoints(ctx context.Context, runID string) ([]*runtime.Checkpoint, error) {
	rows, err := s.pool.Query(ctx, s.q.checkpoints, runID)
	if err != nil {
		return nil, fmt.Errorf("postgres store: checkpoints of %s: %w", runID, err)
	}
	defer rows.Close()
	var out []*runtime.Checkpoint
	for rows.Next() {
		cp := &runtime.Checkpoint{RunID: runID}
		var (
			status, effect    string
			output, interrupt []byte
		)
		if err := rows.Scan(&cp.NodeID, &status, &cp.PlanVersion, &cp.InputsHash, &effect, &output, &cp.Summary,
			&cp.Error, &cp.ErrorCode, &cp.ErrorTrace, &cp.SkipReason, &interrupt, &cp.Resumes, &cp.Attempt,
			&cp.AttemptID, &cp.Replayed, &cp.StartedAt, &cp.UpdatedAt, &cp.NextAttemptAt, &cp.Token); err != nil {
			return nil, fmt.Errorf("postgres store: checkpoints of %s: %w", runID, err)
		}
		cp.Status, cp.Effect = runtime.NodeStatus(status), runtime.Effect(effect)
		cp.StartedAt, cp.UpdatedAt, cp.NextAttemptAt = utc(cp.StartedAt), utc(cp.UpdatedAt), utc(cp.NextAttemptAt)
		if cp.Output, err = rowjson.Any(output); err != nil {
			return nil, fmt.Errorf("postgres store: checkpoint %s/%s output: %w", runID, cp.NodeID, err)
		}
		if interrupt != nil {
			cp.Interrupt = new(runtime.InterruptInfo)
			if err := json.Unmarshal(interrupt, cp.Interrupt); err != nil {
				return nil, fmt.Errorf("postgres store: checkpoint %s/%s interrupt: %w", runID, cp.NodeID, err)
			}
		}
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres store: checkpoints of %s: %w", runID, err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eventArgs returns the appendEvents statement's arguments for evs (not
// empty, seqs consecutive).
func eventArgs(runID string, token int64, evs []runtime.Event) ([]any, error) {
	n := len(evs)
	var (
		seqs     = make([]int64, n)
		types    = make([]string, n)
		chats    = make([]string, n)
		nodes    = make([]string, n)
		attempts = make([]int32, n)
		times    = make([]time.Time, n)
		data     = make([][]byte, n)
	)
	for i := range evs {
		e := &evs[i]
		b, err := e.DataJSON()
		if err != nil {
			return nil, fmt.Errorf("event %d data: %w", e.Seq, err)
		}
		seqs[i], types[i], chats[i], nodes[i], attempts[i], times[i], data[i] =
			e.Seq, string(e.Type), e.ChatID, e.NodeID, int32(e.Attempt), e.Time, b
	}
	return []any{runID, token, evs[0].Seq - 1, evs[n-1].Seq, seqs, types, chats, nodes, attempts, times, data}, nil
}

func consecutive(evs []runtime.Event) bool {
	for i := range evs {
		if evs[i].Seq != evs[0].Seq+int64(i) {
			return false
		}
	}
	return true
}

// AppendEvents implements runtime.Store in one statement: LastSeq moves
// (only if the token is current and the log ends where evs starts) and
// the events are inserted together.
func (s *Store) AppendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) error {
	return wrap(s.appendEvents(ctx, runID, token, evs), "append events to %s", runID)
}

func (s *Store) appendEvents(ctx context.Context, runID string, token int64, evs []runtime.Event) error {
	if len(evs) == 0 || !consecutive(evs) {
		// Nothing to write; report fencing first, as for any write.
		if _, err := s.fence(ctx, s.pool, runID, token); err != nil || len(evs) == 0 {
			return err
		}
		return fmt.Errorf("%w: run %s: batch seqs are not consecutive", runtime.ErrSeqConflict, runID)
	}
	args, err := eventArgs(runID, token, evs)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.q.appendEvents, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == int64(len(evs)) {
		return nil
	}
	last, err := s.fence(ctx, s.pool, runID, token)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, runID, last+1, evs[0].Seq)
}

// WriteBatches implements runtime.BatchWriter and runtime.BatchFinisher in
// one transaction: it inserts the runs batches create (Create, with their
// first Lease), locks the runs involved (in id order, so concurrent calls
// cannot deadlock), checks every token and seq, then sends all writes —
// checkpoints, events, the final records (Finish) and lease releases
// (Release) — in one pipelined round trip, applies the joined writes
// (Write) and commits. Any refused write (ErrFenced, ErrSeqConflict,
// ErrRunNotFound, ErrRunExists, a joined write's error) rolls the whole
// call back.
func (s *Store) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	return wrap(s.writeBatches(ctx, batches), "write batches")
}

func (s *Store) writeBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	var ids []string
	for _, b := range batches {
		for _, cp := range b.Checkpoints {
			ids = append(ids, cp.RunID)
		}
		if len(b.Events) > 0 || b.Create != nil || b.Finish != nil || b.Release != nil || len(b.Writes) > 0 {
			ids = append(ids, b.RunID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op

	// Creations first: the lock below must see their rows.
	for _, b := range batches {
		if b.Create == nil {
			continue
		}
		if b.Lease == nil {
			return fmt.Errorf("create %s in a batch needs its lease", b.Create.ID)
		}
		if err := s.createClaimed(ctx, tx, b.Create, *b.Lease); err != nil {
			return err
		}
	}

	type state struct{ token, last int64 }
	runs := make(map[string]*state, len(ids))
	rows, err := tx.Query(ctx, s.q.lockRuns, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var st state
		if err := rows.Scan(&id, &st.token, &st.last); err != nil {
			rows.Close()
			return err
		}
		runs[id] = &st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	check := func(runID string, token int64) (*state, error) {
		st, ok := runs[runID]
		if !ok {
			return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
		}
		if token < st.token {
			return nil, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, runID, st.token, token)
		}
		return st, nil
	}

	var batch pgx.Batch
	var mayMiss []bool // per queued statement: matching no row is fine
	queue := func(miss bool, sql string, args ...any) {
		batch.Queue(sql, args...)
		mayMiss = append(mayMiss, miss)
	}
	for _, b := range batches {
		for _, cp := range b.Checkpoints {
			if _, err := check(cp.RunID, cp.Token); err != nil {
				return err
			}
			args, err := checkpointArgs(cp)
			if err != nil {
				return fmt.Errorf("checkpoint %s/%s: %w", cp.RunID, cp.NodeID, err)
			}
			queue(false, s.q.saveCheckpoint, args...)
		}
		if len(b.Events) > 0 {
			st, err := check(b.RunID, b.Token)
			if err != nil {
				return err
			}
			if !consecutive(b.Events) || b.Events[0].Seq != st.last+1 {
				return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, b.RunID, st.last+1, b.Events[0].Seq)
			}
			args, err := eventArgs(b.RunID, b.Token, b.Events)
			if err != nil {
				return err
			}
			queue(false, s.q.appendEvents, args...)
			st.last += int64(len(b.Events))
		}
		if f := b.Finish; f != nil {
			if _, err := check(f.ID, f.Token); err != nil {
				return err
			}
			args, err := runArgs(f)
			if err != nil {
				return fmt.Errorf("finish run %s: %w", f.ID, err)
			}
			queue(false, s.q.updateRun, append(args, f.Token, f.ID)...)
		}
		if l := b.Release; l != nil {
			// Nothing to release when the lease already passed on: Finish
			// was fenced above in that case.
			queue(true, s.q.release, l.RunID, l.Token, l.Owner)
		}
	}
	br := tx.SendBatch(ctx, &batch)
	for i := range batch.Len() {
		tag, err := br.Exec()
		if err == nil && tag.RowsAffected() == 0 && !mayMiss[i] {
			// The rows are locked and were checked: this cannot happen.
			err = fmt.Errorf("%w: a write matched no row", runtime.ErrFenced)
		}
		if err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	for _, b := range batches {
		for _, w := range b.Writes {
			fn, ok := w.(Write)
			if !ok {
				return fmt.Errorf("run %s: a joined write of type %T (want postgres.Write)", b.RunID, w)
			}
			if err := fn(ctx, tx); err != nil {
				return err
			}
		}
	}
	return tx.Commit(ctx)
}

// FinishesBatches marks the store as a runtime.BatchFinisher: WriteBatches
// applies Create, Finish and Release in the batch's transaction.
func (s *Store) FinishesBatches() {}

// KeepsEventJSON marks the store as a runtime.JSONEventStore: it writes
// the bytes of Event.DataJSON.
func (s *Store) KeepsEventJSON() {}

// Events implements runtime.Store. Data comes back as json.RawMessage,
// byte for byte as written.
func (s *Store) Events(ctx context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := s.pool.Query(ctx, s.q.events, runID, after, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres store: events of %s: %w", runID, err)
	}
	defer rows.Close()
	var out []runtime.Event
	for rows.Next() {
		e := runtime.Event{RunID: runID}
		var (
			typ  string
			data []byte
		)
		if err := rows.Scan(&e.Seq, &typ, &e.ChatID, &e.NodeID, &e.Attempt, &e.Time, &data); err != nil {
			return nil, fmt.Errorf("postgres store: events of %s: %w", runID, err)
		}
		e.Type, e.Time = runtime.EventType(typ), utc(e.Time)
		if data != nil {
			e.Data = json.RawMessage(data)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres store: events of %s: %w", runID, err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}
