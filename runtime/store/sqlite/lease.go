package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"chatgraph/runtime"
)

// claimQuery takes the run's lease when it is free, expired or already
// the owner's, and bumps its token.
const claimQuery = `UPDATE runs SET token = token + 1, lease_owner = ?, lease_expires_at = ?
WHERE id = ? AND (lease_owner = '' OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)
RETURNING token`

// leaseHolderQuery says who holds a lease claimQuery did not take.
const leaseHolderQuery = `SELECT lease_owner, coalesce(lease_expires_at, 0) FROM runs WHERE id = ?`

// ClaimRun implements runtime.Leaser in one conditional UPDATE.
func (s *Store) ClaimRun(ctx context.Context, runID, owner string, ttl time.Duration) (runtime.Lease, error) {
	now := s.now()
	expires := micros(now.Add(ttl))
	var token int64
	err := s.inTxOp(ctx, func(tx *sql.Tx) error {
		err := s.ws.queryRowIn(ctx, tx, claimQuery, owner, expires, runID, owner, micros(now)).Scan(&token)
		if errors.Is(err, sql.ErrNoRows) {
			var holder string
			var until int64
			err := s.ws.queryRowIn(ctx, tx, leaseHolderQuery, runID).Scan(&holder, &until)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
			}
			if err != nil {
				return fmt.Errorf("sqlite store: claim %s: %w", runID, err)
			}
			return fmt.Errorf("%w: run %s is held by %s until %s", runtime.ErrLeaseHeld, runID, holder,
				fromMicros(until).Format(time.RFC3339Nano))
		}
		if err != nil {
			return fmt.Errorf("sqlite store: claim %s: %w", runID, err)
		}
		return nil
	}, "claim %s", runID)
	if err != nil {
		return runtime.Lease{}, err
	}
	return runtime.Lease{RunID: runID, Owner: owner, Token: token, ExpiresAt: fromMicros(expires)}, nil
}

// renewQuery moves the lease's expiry if the lease is still the run's.
const renewQuery = `UPDATE runs SET lease_expires_at = ?
WHERE id = ? AND token = ? AND lease_owner = ? AND lease_owner != ''`

// RenewLease implements runtime.Leaser.
func (s *Store) RenewLease(ctx context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	expires := micros(s.now().Add(ttl))
	err := s.inTxOp(ctx, func(tx *sql.Tx) error {
		return s.leaseWrite(ctx, tx, l, "renew", renewQuery, expires, l.RunID, l.Token, l.Owner)
	}, "renew %s", l.RunID)
	if err != nil {
		return runtime.Lease{}, err
	}
	l.ExpiresAt = fromMicros(expires)
	return l, nil
}

// RenewLeases implements runtime.LeaseRenewer: one transaction, one
// conditional UPDATE per lease.
func (s *Store) RenewLeases(ctx context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	renewed, errs := make([]runtime.Lease, len(leases)), make([]error, len(leases))
	expires := micros(s.now().Add(ttl))
	err := s.inTxOp(ctx, func(tx *sql.Tx) error {
		for i, l := range leases {
			err := s.leaseWrite(ctx, tx, l, "renew", renewQuery, expires, l.RunID, l.Token, l.Owner)
			if err != nil && !errors.Is(err, runtime.ErrFenced) && !errors.Is(err, runtime.ErrRunNotFound) {
				return err
			}
			errs[i] = err
		}
		return nil
	}, "renew %d leases", len(leases))
	if err != nil {
		return nil, nil, err
	}
	for i, l := range leases {
		if errs[i] == nil {
			l.ExpiresAt = fromMicros(expires)
			renewed[i] = l
		}
	}
	return renewed, errs, nil
}

const releaseQuery = `UPDATE runs SET lease_owner = '', lease_expires_at = NULL
WHERE id = ? AND token = ? AND lease_owner IN (?, '')`

// ReleaseLease implements runtime.Leaser. Releasing a lease already
// released is a no-op.
func (s *Store) ReleaseLease(ctx context.Context, l runtime.Lease) error {
	return s.inTxOp(ctx, func(tx *sql.Tx) error {
		return s.leaseWrite(ctx, tx, l, "release", releaseQuery, l.RunID, l.Token, l.Owner)
	}, "release %s", l.RunID)
}

// leaseQuery reads the lease a refused lease write (leaseWrite) met.
const leaseQuery = `SELECT token, lease_owner FROM runs WHERE id = ?`

// leaseWrite runs q, a write conditional on lease l, in tx: nil when it
// changed a row, else ErrRunNotFound or ErrFenced, read in tx. op names
// the write in the error of the statement itself.
func (s *Store) leaseWrite(ctx context.Context, tx *sql.Tx, l runtime.Lease, op, q string, args ...any) error {
	res, err := s.ws.execIn(ctx, tx, q, args...)
	if err != nil {
		return fmt.Errorf("sqlite store: %s %s: %w", op, l.RunID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	var token int64
	var owner string
	err = s.ws.queryRowIn(ctx, tx, leaseQuery, l.RunID).Scan(&token, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, l.RunID)
	}
	if err != nil {
		return fmt.Errorf("sqlite store: lease of %s: %w", l.RunID, err)
	}
	return fmt.Errorf("%w: run %s is at token %d (owner %q), lease has %d (owner %q)",
		runtime.ErrFenced, l.RunID, token, owner, l.Token, l.Owner)
}

// ExpiredRuns implements runtime.Leaser: running runs whose lease expired
// at now or that have none, oldest (CreatedAt) first. limit <= 0 means no
// limit.
func (s *Store) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rs.query(ctx, `SELECT id FROM runs
WHERE status = ? AND (lease_owner = '' OR lease_expires_at IS NULL OR lease_expires_at <= ?)
ORDER BY created_at, id LIMIT ?`, string(runtime.RunRunning), micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: expired runs: %w", err)
	}
	return collectIDs(rows)
}

// OwnedRuns implements runtime.OwnerLister.
func (s *Store) OwnedRuns(ctx context.Context, owner string, limit int) ([]string, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rs.query(ctx, `SELECT id FROM runs WHERE status = ? AND lease_owner = ? AND lease_owner != ''
ORDER BY created_at, id LIMIT ?`, string(runtime.RunRunning), owner, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: owned runs: %w", err)
	}
	return collectIDs(rows)
}

func collectIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// claimExpiredQuery claims the running runs whose lease expired (or that
// have none), oldest first, up to a limit.
const claimExpiredQuery = `UPDATE runs SET token = token + 1, lease_owner = ?, lease_expires_at = ?
WHERE id IN (SELECT id FROM runs
	WHERE status = ? AND (lease_owner = '' OR lease_expires_at IS NULL OR lease_expires_at <= ?)
	ORDER BY created_at, id LIMIT ?)
RETURNING id, token`

// ClaimExpired implements runtime.BulkClaimer: one UPDATE claims every
// running run whose lease expired at now (or that has none), oldest first,
// up to limit (<= 0: all).
func (s *Store) ClaimExpired(ctx context.Context, owner string, ttl time.Duration, now time.Time, limit int) ([]runtime.Lease, error) {
	if limit <= 0 {
		limit = -1
	}
	expires := micros(s.now().Add(ttl))
	var out []runtime.Lease
	err := s.inTxOp(ctx, func(tx *sql.Tx) error {
		rows, err := s.ws.queryIn(ctx, tx, claimExpiredQuery, owner, expires, string(runtime.RunRunning), micros(now), limit)
		if err != nil {
			return fmt.Errorf("sqlite store: claim expired runs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			l := runtime.Lease{Owner: owner, ExpiresAt: fromMicros(expires)}
			if err := rows.Scan(&l.RunID, &l.Token); err != nil {
				return err
			}
			out = append(out, l)
		}
		return rows.Err()
	}, "claim expired runs")
	if err != nil {
		return nil, err
	}
	return out, nil
}
