package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"chatgraph/runtime"
)

// runArgs returns the record's column values in runCols order, without
// id, last_seq and token.
func runArgs(r *runtime.RunRecord) ([]any, error) {
	attrs, err := jsonBytes(r.Attrs)
	if err != nil {
		return nil, fmt.Errorf("attrs: %w", err)
	}
	entries, err := json.Marshal(r.EntryNodeIDs)
	if err != nil {
		return nil, err
	}
	input, err := jsonBytes(r.Input)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	opts, err := json.Marshal(r.Options)
	if err != nil {
		return nil, err
	}
	var interrupts, answers []byte
	if r.Interrupts != nil {
		if interrupts, err = json.Marshal(r.Interrupts); err != nil {
			return nil, fmt.Errorf("interrupts: %w", err)
		}
	}
	if r.Answers != nil {
		if answers, err = json.Marshal(r.Answers); err != nil {
			return nil, fmt.Errorf("answers: %w", err)
		}
	}
	return []any{r.ParentID, r.RootID, r.ChatID, r.GraphID, r.PlanVersion, r.Kind, attrs, entries,
		input, opts, string(r.Status), r.Error, interrupts, answers, r.CreatedAt, r.UpdatedAt}, nil
}

func scanRun(row pgx.Row) (*runtime.RunRecord, error) {
	var (
		r                                                runtime.RunRecord
		attrs, entries, input, opts, interrupts, answers []byte
		status                                           string
	)
	if err := row.Scan(&r.ID, &r.ParentID, &r.RootID, &r.ChatID, &r.GraphID, &r.PlanVersion, &r.Kind, &attrs, &entries,
		&input, &opts, &status, &r.Error, &interrupts, &answers, &r.LastSeq, &r.Token, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return nil, err
	}
	r.Status = runtime.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	var err error
	if r.Input, err = jsonAny(input); err != nil {
		return nil, fmt.Errorf("run %s input: %w", r.ID, err)
	}
	for _, f := range []struct {
		b   []byte
		dst any
	}{{attrs, &r.Attrs}, {entries, &r.EntryNodeIDs}, {opts, &r.Options}, {interrupts, &r.Interrupts}, {answers, &r.Answers}} {
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
		return fmt.Errorf("postgres store: create run %s: %w", r.ID, err)
	}
	args = append([]any{r.ID}, args...)
	args = append(args, r.LastSeq, r.Token)
	tag, err := s.pool.Exec(ctx, s.q.createRun, args...)
	if err != nil {
		return fmt.Errorf("postgres store: create run %s: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, r.ID)
	}
	return nil
}

// GetRun implements runtime.Store.
func (s *Store) GetRun(ctx context.Context, id string) (*runtime.RunRecord, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, s.q.getRun, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres store: get run %s: %w", id, err)
	}
	return r, nil
}

// UpdateRun implements runtime.Store. It replaces every field of the
// record but LastSeq (the event log owns it), in one statement conditional
// on the token; the lease is untouched.
func (s *Store) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("postgres store: update run %s: %w", r.ID, err)
	}
	args = append(args, r.Token, r.ID)
	tag, err := s.pool.Exec(ctx, s.q.updateRun, args...)
	if err != nil {
		return fmt.Errorf("postgres store: update run %s: %w", r.ID, err)
	}
	return wrap(s.applied(ctx, s.pool, tag, r.ID, r.Token), "update run %s", r.ID)
}

// applied turns the result of a statement conditional on the run's token
// into nil, ErrRunNotFound or ErrFenced.
func (s *Store) applied(ctx context.Context, q querier, tag pgconn.CommandTag, runID string, token int64) error {
	if tag.RowsAffected() > 0 {
		return nil
	}
	_, err := s.fence(ctx, q, runID, token)
	if err == nil {
		// The row matched when we looked again: only a concurrent change
		// can explain it, and tokens only grow.
		err = fmt.Errorf("%w: run %s changed under the write", runtime.ErrFenced, runID)
	}
	return err
}

// fence checks token against the run's and returns the run's last seq.
func (s *Store) fence(ctx context.Context, q querier, runID string, token int64) (lastSeq int64, err error) {
	var cur int64
	err = q.QueryRow(ctx, s.q.fence, runID).Scan(&cur, &lastSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	if err != nil {
		return 0, err
	}
	if token < cur {
		return 0, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, runID, cur, token)
	}
	return lastSeq, nil
}

func (s *Store) exists(ctx context.Context, runID string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, s.q.exists, runID).Scan(&ok); err != nil {
		return fmt.Errorf("postgres store: run %s: %w", runID, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	return nil
}

// utc returns t in UTC: pgx reads timestamptz in the local zone.
func utc(t time.Time) time.Time { return t.UTC() }
