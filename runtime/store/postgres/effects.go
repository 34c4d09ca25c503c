package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"chatgraph/runtime"
)

const effectCols = `key, root_run_id, node_id, kind, value, created_at`

// PutEffect implements runtime.EffectLedger in one round trip: a CTE
// inserts the record unless the key is taken and returns what it inserted,
// or else the row already there. When a concurrent insert of the key
// commits while the statement waits for it, the row is newer than the
// statement's snapshot and the CTE returns nothing; a second read (a new
// snapshot) then finds it. A zero CreatedAt is set to Config.Now; an empty
// Value is stored as JSON null.
func (s *Store) PutEffect(ctx context.Context, rec runtime.EffectRecord) (runtime.EffectRecord, error) {
	if err := checkEffect(&rec); err != nil {
		return runtime.EffectRecord{}, err
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	// A DeleteEffects between the insert that found the key taken and the
	// read can leave nothing to return: try again (bounded).
	for range 3 {
		kept, err := scanEffect(s.pool.QueryRow(ctx, s.q.putEffect,
			rec.Key, rec.RootRunID, rec.NodeID, rec.Kind, []byte(rec.Value), rec.CreatedAt))
		if errors.Is(err, pgx.ErrNoRows) {
			kept, err = scanEffect(s.pool.QueryRow(ctx, s.q.getEffect, rec.Key))
		}
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return runtime.EffectRecord{}, fmt.Errorf("postgres store: put effect %s: %w", rec.Key, err)
		}
		return kept, nil
	}
	return runtime.EffectRecord{}, fmt.Errorf("postgres store: put effect %s: the key was deleted while it was written, three times", rec.Key)
}

// GetEffect implements runtime.EffectLedger.
func (s *Store) GetEffect(ctx context.Context, key string) (runtime.EffectRecord, bool, error) {
	rec, err := scanEffect(s.pool.QueryRow(ctx, s.q.getEffect, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return runtime.EffectRecord{}, false, nil
	}
	if err != nil {
		return runtime.EffectRecord{}, false, fmt.Errorf("postgres store: get effect %s: %w", key, err)
	}
	return rec, true, nil
}

// DeleteEffects implements runtime.EffectLedger.
func (s *Store) DeleteEffects(ctx context.Context, rootRunID string) error {
	if _, err := s.pool.Exec(ctx, s.q.deleteEffects, rootRunID); err != nil {
		return fmt.Errorf("postgres store: delete effects of %s: %w", rootRunID, err)
	}
	return nil
}

func scanEffect(row pgx.Row) (runtime.EffectRecord, error) {
	var (
		rec   runtime.EffectRecord
		value []byte
	)
	if err := row.Scan(&rec.Key, &rec.RootRunID, &rec.NodeID, &rec.Kind, &value, &rec.CreatedAt); err != nil {
		return runtime.EffectRecord{}, err
	}
	rec.Value, rec.CreatedAt = json.RawMessage(value), rec.CreatedAt.UTC()
	return rec, nil
}

// checkEffect refuses a record without key or lineage or whose value is
// not JSON, and turns an empty value into null.
func checkEffect(rec *runtime.EffectRecord) error {
	if rec.Key == "" || rec.RootRunID == "" {
		return errors.New("postgres store: put effect: key and root run id are required")
	}
	if len(rec.Value) == 0 {
		rec.Value = json.RawMessage("null")
	}
	if !json.Valid(rec.Value) {
		return fmt.Errorf("postgres store: put effect %s: value is not valid JSON", rec.Key)
	}
	return nil
}

// sweepEffects deletes the effects of run lineages that have no run left
// (no run has the lineage's id as its id or root id), walking the
// lineages in chunks of deleteBatch, one statement each.
func (s *Store) sweepEffects(ctx context.Context) error {
	after := ""
	for {
		var (
			n    int
			last *string
		)
		if err := s.pool.QueryRow(ctx, s.q.sweepEffects, after, deleteBatch).Scan(&n, &last); err != nil {
			return err
		}
		if n < deleteBatch || last == nil {
			return nil
		}
		after = *last
	}
}
