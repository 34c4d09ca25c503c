package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"chatgraph/runtime"
)

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
	q := `SELECT ` + runCols + ` FROM ` + runsFrom
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	var out []*runtime.RunRecord
	// The records and the tail's rows of segments the store does not
	// remember (Store.GetRun), in one read transaction.
	err := s.inReadTx(ctx, []string{pagesFromQuery}, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var froms []int64
		for rows.Next() {
			r, from, err := scanRun(rows)
			if err != nil {
				return err
			}
			out, froms = append(out, r), append(froms, from)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for i, r := range out {
			if err := s.completeLastSeq(ctx, tx, r, froms[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list runs: %w", err)
	}
	return out, nil
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

// finishedQuery picks up to a limit of the runs that ended (one of three
// statuses) before a time.
const finishedQuery = `SELECT id FROM runs WHERE status IN (?, ?, ?) AND updated_at < ? LIMIT ?`

// deleteBatch bounds how many runs one retention transaction removes, so
// the write lock is never held for long.
const deleteBatch = 500

// DeleteFinishedBefore implements runtime.Inspector. It deletes in
// transactions of at most 500 runs, then removes the effects of every run
// lineage that has no run left (see runtime.EffectLedger), 500 lineages a
// transaction.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time) (int, error) {
	total := 0
	for {
		n, err := s.deleteRuns(ctx, func(tx *sql.Tx) ([]string, error) {
			rows, err := s.ws.queryIn(ctx, tx, finishedQuery,
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
			break
		}
	}
	if err := s.sweepEffects(ctx); err != nil {
		return total, fmt.Errorf("sqlite store: retention of effects: %w", err)
	}
	return total, nil
}

// deleteRuns removes the runs pick chooses, with their checkpoints and
// events, in one transaction (pick reads in it too), and returns how many
// runs it removed.
func (s *Store) deleteRuns(ctx context.Context, pick func(*sql.Tx) ([]string, error)) (int, error) {
	var n int64
	var deleted []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ids, err := pick(tx)
		if err != nil || len(ids) == 0 {
			return err
		}
		// The number of ids varies: these statements are prepared per
		// use, as before.
		in := `(?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		deleted = ids
		for _, table := range []string{"events", "event_chunks", "checkpoints", "run_tails"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE run_id IN `+in, args...); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE id IN `+in, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	// Rows of their segments stay in event_tail until it is truncated.
	s.tails.forget(deleted)
	return int(n), nil
}
