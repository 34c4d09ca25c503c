package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"chatgraph/runtime"
	"chatgraph/runtime/store/internal/rowjson"
)

// runArgs returns the record's column values in runCols order, without
// id, last_seq and token.
func runArgs(r *runtime.RunRecord) ([]any, error) {
	j, err := rowjson.EncodeRun(r)
	if err != nil {
		return nil, err
	}
	return []any{r.ParentID, r.RootID, r.ChatID, r.GraphID, r.PlanVersion, r.Kind, j.Attrs, j.EntryNodeIDs,
		j.Input, j.Options, string(r.Status), r.Error, j.Interrupts, j.Answers, r.CreatedAt, r.UpdatedAt}, nil
}

func scanRun(row pgx.Row) (*runtime.RunRecord, error) {
	var (
		r      runtime.RunRecord
		j      rowjson.Run
		status string
	)
	if err := row.Scan(&r.ID, &r.ParentID, &r.RootID, &r.ChatID, &r.GraphID, &r.PlanVersion, &r.Kind, &j.Attrs, &j.EntryNodeIDs,
		&j.Input, &j.Options, &status, &r.Error, &j.Interrupts, &j.Answers, &r.LastSeq, &r.Token, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return nil, err
	}
	r.Status = runtime.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	if err := j.DecodeInto(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CreateRun implements runtime.Store. It replaces a pending record with
// the id (a reservation, see ReserveRun); any other is ErrRunExists.
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

// CreateClaimed implements runtime.RunStarter: one INSERT creates the
// record holding its first lease (token r.Token+1), over a reservation
// like CreateRun.
func (s *Store) CreateClaimed(ctx context.Context, r *runtime.RunRecord, owner string, ttl time.Duration) (runtime.Lease, error) {
	l := runtime.Lease{RunID: r.ID, Owner: owner, Token: r.Token + 1, ExpiresAt: s.now().Add(ttl).Truncate(time.Microsecond).UTC()}
	if err := s.createClaimed(ctx, s.pool, r, l); err != nil {
		return runtime.Lease{}, err
	}
	return l, nil
}

// createClaimed inserts r holding lease l through q (the pool or a tx).
func (s *Store) createClaimed(ctx context.Context, q querier, r *runtime.RunRecord, l runtime.Lease) error {
	args, err := runArgs(r)
	if err != nil {
		return fmt.Errorf("postgres store: create run %s: %w", r.ID, err)
	}
	args = append([]any{r.ID}, args...)
	args = append(args, r.LastSeq, l.Token, l.Owner, l.ExpiresAt)
	tag, err := q.Exec(ctx, s.q.createClaimed, args...)
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
