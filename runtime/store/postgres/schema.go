package postgres

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
)

// migration is one step of the schema. Steps are applied in version order,
// each in the transaction that records it in schema_migrations.
type migration struct {
	version int
	name    string
	sql     string // unqualified names: it runs with search_path set to the schema
}

// migrations is the schema history. Append only: never edit a step that
// has shipped.
//
// Outputs, inputs and event payloads are json (kept verbatim: an event
// reads back byte for byte as it was written); attrs, entry node ids and
// options are jsonb. Checkpoints keep their first-save order in ord (an
// identity an upsert does not touch). Checkpoints and events cascade with
// their run.
var migrations = []migration{{
	version: 1,
	name:    "runs, checkpoints, events",
	sql: `
CREATE TABLE runs (
	id               text PRIMARY KEY,
	parent_id        text NOT NULL DEFAULT '',
	root_id          text NOT NULL DEFAULT '',
	chat_id          text NOT NULL DEFAULT '',
	graph_id         text NOT NULL DEFAULT '',
	plan_version     bigint NOT NULL DEFAULT 0,
	kind             text NOT NULL DEFAULT '',
	attrs            jsonb,
	entry_node_ids   jsonb,
	input            json,
	options          jsonb,
	status           text NOT NULL,
	error            text NOT NULL DEFAULT '',
	interrupts       json,
	answers          json,
	last_seq         bigint NOT NULL DEFAULT 0,
	token            bigint NOT NULL DEFAULT 0,
	lease_owner      text NOT NULL DEFAULT '',
	lease_expires_at timestamptz,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL
);
CREATE INDEX runs_created ON runs (created_at);
CREATE INDEX runs_status_created ON runs (status, created_at);
CREATE INDEX runs_status_updated ON runs (status, updated_at);
CREATE INDEX runs_chat_created ON runs (chat_id, created_at);

CREATE TABLE checkpoints (
	run_id          text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	node_id         text NOT NULL,
	ord             bigint GENERATED ALWAYS AS IDENTITY,
	status          text NOT NULL,
	plan_version    bigint NOT NULL DEFAULT 0,
	inputs_hash     text NOT NULL DEFAULT '',
	effect          text NOT NULL DEFAULT '',
	output          json,
	summary         text NOT NULL DEFAULT '',
	error           text NOT NULL DEFAULT '',
	error_code      text NOT NULL DEFAULT '',
	error_trace     text NOT NULL DEFAULT '',
	skip_reason     text NOT NULL DEFAULT '',
	interrupt       json,
	resumes         integer NOT NULL DEFAULT 0,
	attempt         integer NOT NULL DEFAULT 0,
	attempt_id      text NOT NULL DEFAULT '',
	replayed        boolean NOT NULL DEFAULT false,
	started_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	next_attempt_at timestamptz NOT NULL,
	token           bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, node_id)
);

CREATE TABLE events (
	run_id  text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	seq     bigint NOT NULL,
	type    text NOT NULL,
	chat_id text NOT NULL DEFAULT '',
	node_id text NOT NULL DEFAULT '',
	attempt integer NOT NULL DEFAULT 0,
	at      timestamptz NOT NULL,
	data    json,
	PRIMARY KEY (run_id, seq)
);
`,
}, {
	// Completed side effects by idempotency key (runtime.EffectLedger),
	// values verbatim. Not tied to a run: a lineage's effects outlive the
	// runs that recorded them (retention removes them with the lineage's
	// last run). runs_root serves retention's question "does this lineage
	// still have a run?".
	version: 2,
	name:    "effects",
	sql: `
CREATE TABLE effects (
	key         text PRIMARY KEY,
	root_run_id text NOT NULL,
	node_id     text NOT NULL DEFAULT '',
	kind        text NOT NULL DEFAULT '',
	value       json NOT NULL,
	created_at  timestamptz NOT NULL
);
CREATE INDEX effects_root ON effects (root_run_id);
CREATE INDEX runs_root ON runs (root_id);
`,
}}

// SchemaVersion is the schema version this package writes.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// lockKey is the advisory lock that serialises migrations of one schema
// across processes.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("chatgraph/runtime/store/postgres migrate " + schema))
	return int64(h.Sum64())
}

// migrate creates the schema if needed and applies the missing migrations
// in one transaction that holds an advisory lock: processes starting at
// once take turns, and the later ones find the work done.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(s.schema)); err != nil {
		return err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+s.ident); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+s.ident); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return err
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return err
	}
	if current > SchemaVersion() {
		return fmt.Errorf("schema %s is at version %d, newer than this build knows (%d)", s.schema, current, SchemaVersion())
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return err
		}
		s.log.Info("postgres store: schema migrated", "schema", s.schema, "version", m.version, "name", m.name)
	}
	return tx.Commit(ctx)
}
