package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"chatgraph/runtime"
)

// ClaimRun implements runtime.Leaser in one conditional UPDATE. Two
// processes claiming at once serialise on the run's row: the second sees
// the first's lease and gets ErrLeaseHeld.
func (s *Store) ClaimRun(ctx context.Context, runID, owner string, ttl time.Duration) (runtime.Lease, error) {
	now := s.now()
	expires := now.Add(ttl).Truncate(time.Microsecond) // what Postgres keeps
	var token int64
	err := s.pool.QueryRow(ctx, s.q.claim, runID, owner, expires, now).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		var (
			cur    int64
			holder string
			until  *time.Time
		)
		err := s.pool.QueryRow(ctx, s.q.leaseState, runID).Scan(&cur, &holder, &until)
		if errors.Is(err, pgx.ErrNoRows) {
			return runtime.Lease{}, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
		}
		if err != nil {
			return runtime.Lease{}, fmt.Errorf("postgres store: claim %s: %w", runID, err)
		}
		var when string
		if until != nil {
			when = until.UTC().Format(time.RFC3339Nano)
		}
		return runtime.Lease{}, fmt.Errorf("%w: run %s is held by %s until %s", runtime.ErrLeaseHeld, runID, holder, when)
	}
	if err != nil {
		return runtime.Lease{}, fmt.Errorf("postgres store: claim %s: %w", runID, err)
	}
	return runtime.Lease{RunID: runID, Owner: owner, Token: token, ExpiresAt: expires.UTC()}, nil
}

// RenewLease implements runtime.Leaser.
func (s *Store) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	expires := s.now().Add(ttl).Truncate(time.Microsecond)
	tag, err := s.pool.Exec(ctx, s.q.renew, l.RunID, l.Token, l.Owner, expires)
	if err != nil {
		return runtime.Lease{}, fmt.Errorf("postgres store: renew %s: %w", l.RunID, err)
	}
	if err := s.leaseApplied(ctx, tag, l); err != nil {
		return runtime.Lease{}, err
	}
	l.ExpiresAt = expires.UTC()
	return l, nil
}

// RenewLeases implements runtime.LeaseRenewer in one statement. A lease
// it did not renew is looked up for its error, as RenewLease's.
func (s *Store) RenewLeases(ctx context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	expires := s.now().Add(ttl).Truncate(time.Microsecond)
	ids, tokens, owners := make([]string, len(leases)), make([]int64, len(leases)), make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i], owners[i] = l.RunID, l.Token, l.Owner
	}
	rows, err := s.pool.Query(ctx, s.q.renewMany, ids, tokens, owners, expires)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres store: renew %d leases: %w", len(leases), err)
	}
	type held struct {
		id, owner string
		token     int64
	}
	done := map[held]bool{}
	for rows.Next() {
		var h held
		if err := rows.Scan(&h.id, &h.token, &h.owner); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("postgres store: renew %d leases: %w", len(leases), err)
		}
		done[h] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("postgres store: renew %d leases: %w", len(leases), err)
	}
	renewed, errs := make([]runtime.Lease, len(leases)), make([]error, len(leases))
	for i, l := range leases {
		if done[held{l.RunID, l.Owner, l.Token}] {
			l.ExpiresAt = expires.UTC()
			renewed[i] = l
			continue
		}
		// Not renewed: with no row changed, leaseApplied reads why.
		errs[i] = s.leaseApplied(ctx, pgconn.CommandTag{}, l)
		if !errors.Is(errs[i], runtime.ErrFenced) && !errors.Is(errs[i], runtime.ErrRunNotFound) {
			return nil, nil, errs[i]
		}
	}
	return renewed, errs, nil
}

// ReleaseLease implements runtime.Leaser. Releasing a lease already
// released is a no-op.
func (s *Store) ReleaseLease(ctx context.Context, l runtime.Lease) error {
	tag, err := s.pool.Exec(ctx, s.q.release, l.RunID, l.Token, l.Owner)
	if err != nil {
		return fmt.Errorf("postgres store: release %s: %w", l.RunID, err)
	}
	return s.leaseApplied(ctx, tag, l)
}

func (s *Store) leaseApplied(ctx context.Context, tag pgconn.CommandTag, l runtime.Lease) error {
	if tag.RowsAffected() > 0 {
		return nil
	}
	var (
		token int64
		owner string
		until *time.Time
	)
	err := s.pool.QueryRow(ctx, s.q.leaseState, l.RunID).Scan(&token, &owner, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, l.RunID)
	}
	if err != nil {
		return fmt.Errorf("postgres store: lease of %s: %w", l.RunID, err)
	}
	return fmt.Errorf("%w: run %s is at token %d (owner %q), lease has %d (owner %q)",
		runtime.ErrFenced, l.RunID, token, owner, l.Token, l.Owner)
}

// ExpiredRuns implements runtime.Leaser: running runs whose lease expired
// at now or that have none, oldest (CreatedAt) first. limit <= 0 means no
// limit.
func (s *Store) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return s.runIDs(ctx, "expired runs", s.q.expired, now, limit)
}

// OwnedRuns implements runtime.OwnerLister.
func (s *Store) OwnedRuns(ctx context.Context, owner string, limit int) ([]string, error) {
	return s.runIDs(ctx, "owned runs", s.q.owned, owner, limit)
}

// runIDs runs q, a query of run ids with arg as $1 and the limit as $2
// (limit <= 0: NULL, no limit).
func (s *Store) runIDs(ctx context.Context, what, q string, arg any, limit int) ([]string, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := s.pool.Query(ctx, q, arg, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %s: %w", what, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres store: %s: %w", what, err)
	}
	return ids, nil
}

// ClaimExpired implements runtime.BulkClaimer in one statement: every
// running run whose lease expired at now (or that has none), oldest first,
// up to limit (<= 0: all). Rows another process is claiming at the same
// moment are skipped (SKIP LOCKED), not waited for.
func (s *Store) ClaimExpired(ctx context.Context, owner string, ttl time.Duration, now time.Time, limit int) ([]runtime.Lease, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	expires := s.now().Add(ttl).Truncate(time.Microsecond)
	rows, err := s.pool.Query(ctx, s.q.claimExpired, owner, expires, now, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres store: claim expired runs: %w", err)
	}
	defer rows.Close()
	var out []runtime.Lease
	for rows.Next() {
		l := runtime.Lease{Owner: owner, ExpiresAt: expires.UTC()}
		if err := rows.Scan(&l.RunID, &l.Token); err != nil {
			return nil, fmt.Errorf("postgres store: claim expired runs: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres store: claim expired runs: %w", err)
	}
	return out, nil
}
