package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"chatgraph/runtime"
)

const effectCols = `key, root_run_id, node_id, kind, value, created_at`

const putEffectQuery = `INSERT INTO effects (` + effectCols + `) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO NOTHING`

const getEffectQuery = `SELECT ` + effectCols + ` FROM effects WHERE key = ?`

// PutEffect implements runtime.EffectLedger: the insert (a no-op when the
// key is taken) and the read of the kept record are one IMMEDIATE
// transaction on the writer, so no other writer — in this process or
// another — comes between them. A zero CreatedAt is set to Config.Now;
// an empty Value is stored as JSON null.
func (s *Store) PutEffect(ctx context.Context, rec runtime.EffectRecord) (runtime.EffectRecord, error) {
	if err := checkEffect(&rec); err != nil {
		return runtime.EffectRecord{}, err
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	kept, err := s.putEffect(ctx, rec)
	if err != nil {
		return runtime.EffectRecord{}, fmt.Errorf("sqlite store: put effect %s: %w", rec.Key, err)
	}
	return kept, nil
}

func (s *Store) putEffect(ctx context.Context, rec runtime.EffectRecord) (kept runtime.EffectRecord, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.ws.execIn(ctx, tx, putEffectQuery, rec.Key, rec.RootRunID, rec.NodeID, rec.Kind, string(rec.Value), micros(rec.CreatedAt)); err != nil {
			return err
		}
		var err error
		kept, err = scanEffect(s.ws.queryRowIn(ctx, tx, getEffectQuery, rec.Key))
		return err
	})
	if err != nil {
		return runtime.EffectRecord{}, err
	}
	return kept, nil
}

// GetEffect implements runtime.EffectLedger.
func (s *Store) GetEffect(ctx context.Context, key string) (runtime.EffectRecord, bool, error) {
	rec, err := scanEffect(s.rs.queryRow(ctx, getEffectQuery, key))
	if errors.Is(err, sql.ErrNoRows) {
		return runtime.EffectRecord{}, false, nil
	}
	if err != nil {
		return runtime.EffectRecord{}, false, fmt.Errorf("sqlite store: get effect %s: %w", key, err)
	}
	return rec, true, nil
}

const deleteEffectsQuery = `DELETE FROM effects WHERE root_run_id = ?`

// DeleteEffects implements runtime.EffectLedger.
func (s *Store) DeleteEffects(ctx context.Context, rootRunID string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := s.ws.execIn(ctx, tx, deleteEffectsQuery, rootRunID)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite store: delete effects of %s: %w", rootRunID, err)
	}
	return nil
}

func scanEffect(row scanner) (runtime.EffectRecord, error) {
	var (
		rec     runtime.EffectRecord
		value   string
		created int64
	)
	if err := row.Scan(&rec.Key, &rec.RootRunID, &rec.NodeID, &rec.Kind, &value, &created); err != nil {
		return runtime.EffectRecord{}, err
	}
	rec.Value, rec.CreatedAt = json.RawMessage(value), fromMicros(created)
	return rec, nil
}

// checkEffect refuses a record without key or lineage or whose value is
// not JSON, and turns an empty value into null.
func checkEffect(rec *runtime.EffectRecord) error {
	if rec.Key == "" || rec.RootRunID == "" {
		return errors.New("sqlite store: put effect: key and root run id are required")
	}
	if len(rec.Value) == 0 {
		rec.Value = json.RawMessage("null")
	}
	if !json.Valid(rec.Value) {
		return fmt.Errorf("sqlite store: put effect %s: value is not valid JSON", rec.Key)
	}
	return nil
}

// sweepEffects deletes the effects of run lineages that have no run left
// (no run has the lineage's id as its id or root id), walking the
// lineages in chunks of deleteBatch, one transaction each.
func (s *Store) sweepEffects(ctx context.Context) error {
	after := ""
	for {
		n, last, err := s.sweepChunk(ctx, after)
		if err != nil || n < deleteBatch {
			return err
		}
		after = last
	}
}

// sweepQuery lists up to a limit of the effects' lineages after a root
// run id, in order, each with whether a run of it is left.
const sweepQuery = `SELECT l.root_run_id,
	EXISTS (SELECT 1 FROM runs WHERE root_id = l.root_run_id) OR EXISTS (SELECT 1 FROM runs WHERE id = l.root_run_id)
FROM (SELECT DISTINCT root_run_id FROM effects WHERE root_run_id > ? ORDER BY root_run_id LIMIT ?) AS l`

// sweepChunk deletes the effects of the orphaned lineages among the
// deleteBatch after after, in one transaction, and returns how many
// lineages it looked at and the last.
func (s *Store) sweepChunk(ctx context.Context, after string) (n int, last string, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := s.ws.queryIn(ctx, tx, sweepQuery, after, deleteBatch)
		if err != nil {
			return err
		}
		var orphans []any
		for rows.Next() {
			var live bool
			if err := rows.Scan(&last, &live); err != nil {
				rows.Close()
				return err
			}
			n++
			if !live {
				orphans = append(orphans, last)
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(orphans) == 0 {
			return nil
		}
		// The number of ids varies: prepared per use, as before.
		_, err = tx.ExecContext(ctx, `DELETE FROM effects WHERE root_run_id IN (?`+strings.Repeat(`, ?`, len(orphans)-1)+`)`, orphans...)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	return n, last, nil
}
