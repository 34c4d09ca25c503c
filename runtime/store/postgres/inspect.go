package postgres

import (
	"context"
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
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if len(f.Status) > 0 {
		statuses := make([]string, len(f.Status))
		for i, st := range f.Status {
			statuses[i] = string(st)
		}
		arg("status = ANY($%d)", statuses)
	}
	if f.ChatID != "" {
		arg("chat_id = $%d", f.ChatID)
	}
	if f.GraphID != "" {
		arg("graph_id = $%d", f.GraphID)
	}
	if !f.After.IsZero() {
		arg("created_at > $%d", f.After)
	}
	if !f.Before.IsZero() {
		arg("created_at < $%d", f.Before)
	}
	q := s.q.listRuns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres store: list runs: %w", err)
	}
	defer rows.Close()
	var out []*runtime.RunRecord
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres store: list runs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres store: list runs: %w", err)
	}
	return out, nil
}

// DeleteRun implements runtime.Inspector; the run's checkpoints and
// events go with it (ON DELETE CASCADE).
func (s *Store) DeleteRun(ctx context.Context, runID string) error {
	tag, err := s.pool.Exec(ctx, s.q.deleteRun, runID)
	if err != nil {
		return fmt.Errorf("postgres store: delete run %s: %w", runID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	return nil
}

// deleteBatch bounds how many runs one retention statement removes.
const deleteBatch = 500

// DeleteFinishedBefore implements runtime.Inspector. It deletes in
// statements of at most 500 runs, skipping rows another transaction has
// locked (they are taken by the next pass), then removes the effects of
// every run lineage that has no run left (see runtime.EffectLedger), 500
// lineages a statement.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time) (int, error) {
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, s.q.deleteFinished, t, deleteBatch)
		if err != nil {
			return total, fmt.Errorf("postgres store: retention: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < deleteBatch {
			break
		}
	}
	if err := s.sweepEffects(ctx); err != nil {
		return total, fmt.Errorf("postgres store: retention of effects: %w", err)
	}
	return total, nil
}
