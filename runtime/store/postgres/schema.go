package postgres

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
)

// Migration is one step of a schema kept in the store's Postgres schema.
// Steps are applied in version order, each in the transaction that
// records it in the schema's table of migrations (see Migrate).
type Migration struct {
	Version int
	Name    string
	SQL     string // unqualified names: it runs with search_path set to the schema
}

// migrations is the schema history. Append only: never edit a step that
// has shipped.
//
// Outputs, inputs and event payloads are json (kept verbatim: an event
// reads back byte for byte as it was written); attrs, entry node ids and
// options are jsonb. Checkpoints keep their first-save order in ord (an
// identity an upsert does not touch). Checkpoints and events cascade with
// their run.
var migrations = []Migration{{
	Version: 1,
	Name:    "runs, checkpoints, events",
	SQL: `
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
	Version: 2,
	Name:    "effects",
	SQL: `
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
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// AdvisoryKey is the key of the advisory lock named by name and parts:
// FNV-1a of name, then of each part after a zero byte (a separator no
// identifier holds). Advisory locks belong to the database, not to a
// schema: a lock that serialises work within one schema names the schema
// among its parts, so deployments in other schemas never wait on it.
func AdvisoryKey(name string, parts ...string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return int64(h.Sum64())
}

// lockKey is the advisory lock that serialises migrations of one schema
// across processes.
func lockKey(schema string) int64 {
	return AdvisoryKey("chatgraph/runtime/store/postgres migrate " + schema)
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
	applied, err := Migrate(ctx, tx, "schema_migrations", migrations)
	if err != nil {
		return fmt.Errorf("schema %s: %w", s.schema, err)
	}
	for _, m := range applied {
		s.log.Info("postgres store: schema migrated", "schema", s.schema, "version", m.Version, "name", m.Name)
	}
	return tx.Commit(ctx)
}

// Migrate applies in tx (its search_path set to the schema) the steps (in
// ascending versions) newer than the last version recorded in table,
// created when missing, recording each, and returns those it applied. A
// recorded version newer than the last step is an error: a newer build
// wrote the schema. The caller serialises migrators (an advisory lock).
// The chat store keeps its schema this way too, in a table of its own.
func Migrate(ctx context.Context, tx pgx.Tx, table string, steps []Migration) ([]Migration, error) {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return nil, err
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+table).Scan(&current); err != nil {
		return nil, err
	}
	if latest := steps[len(steps)-1].Version; current > latest {
		return nil, fmt.Errorf("%s: the schema is at version %d, newer than this build knows (%d)", table, current, latest)
	}
	var applied []Migration
	for _, m := range steps {
		if m.Version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return applied, fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return applied, err
		}
		applied = append(applied, m)
	}
	return applied, nil
}
