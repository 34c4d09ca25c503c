package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	rpostgres "chatgraph/runtime/store/postgres"
)

// migrations is the chat schema's history in the run store's schema,
// applied in version order, each step in the transaction that records it
// in chat_schema_migrations (see rpostgres.Migrate), kept apart from the
// run store's (schema_migrations). Append only: never edit a step that
// has shipped. Versions 1 and 2 are what the store created before it kept
// versions (IF NOT EXISTS adopts those tables); the versions follow the
// SQLite store's.
var migrations = []rpostgres.Migration{{
	Version: 1,
	Name:    "graphs, graph versions, chats, messages",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_graphs (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL DEFAULT '',
	plan_version BIGINT NOT NULL,
	body JSONB,
	deleted BOOLEAN NOT NULL DEFAULT false,
	created_at TIMESTAMPTZ NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS chat_graph_versions (
	id TEXT NOT NULL,
	plan_version BIGINT NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	body JSONB NOT NULL,
	created_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (id, plan_version)
);
CREATE TABLE IF NOT EXISTS chats (
	id TEXT PRIMARY KEY,
	graph_id TEXT NOT NULL,
	title TEXT NOT NULL DEFAULT '',
	active_leaf_id TEXT NOT NULL DEFAULT '',
	created_at TIMESTAMPTZ NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS chats_graph ON chats (graph_id, created_at);
CREATE TABLE IF NOT EXISTS chat_messages (
	seq BIGSERIAL PRIMARY KEY,
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	parent_id TEXT NOT NULL DEFAULT '',
	role TEXT NOT NULL,
	content TEXT NOT NULL DEFAULT '',
	run_id TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL DEFAULT '',
	turn_run_id TEXT NOT NULL DEFAULT '',
	agent_node_id TEXT NOT NULL DEFAULT '',
	user_tools JSONB,
	error TEXT NOT NULL DEFAULT '',
	created_at TIMESTAMPTZ NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL,
	UNIQUE (chat_id, id)
);
`,
}, {
	Version: 2,
	Name:    "index of unsettled assistant messages",
	SQL: `
CREATE INDEX IF NOT EXISTS chat_messages_unsettled ON chat_messages (updated_at)
	WHERE role = 'assistant' AND status IN ('pending', 'running');
`,
}, {
	Version: 3,
	Name:    "chat owners; messages of a chat in order",
	SQL: `
ALTER TABLE chats ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS chats_owner ON chats (owner) WHERE owner <> '';
CREATE INDEX IF NOT EXISTS chat_messages_chat ON chat_messages (chat_id, seq);
`,
}, {
	Version: 4,
	Name:    "data migrations applied (chat_data_migrations)",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_data_migrations (
	name TEXT PRIMARY KEY,
	applied_at TIMESTAMPTZ NOT NULL
);
`,
}, {
	Version: 5,
	Name:    "live graphs by name",
	SQL: `
CREATE INDEX IF NOT EXISTS chat_graphs_name ON chat_graphs (name) WHERE NOT deleted;
`,
}, {
	Version: 6,
	Name:    "chat calls by idempotent client request id",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_requests (
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	fingerprint TEXT NOT NULL,
	run_id TEXT NOT NULL,
	message_id TEXT NOT NULL,
	user_message_id TEXT NOT NULL DEFAULT '',
	created_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (chat_id, id)
);
`,
}, {
	Version: 7,
	Name:    "where deleted messages lead (chat_message_tombstones)",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_message_tombstones (
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	leads_to TEXT NOT NULL,
	deleted_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (chat_id, id)
);
CREATE INDEX IF NOT EXISTS chat_message_tombstones_deleted ON chat_message_tombstones (deleted_at);
`,
}}

// SchemaVersion is the chat schema version this package writes.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// migrate applies the missing steps in one transaction that holds the
// schema's advisory migration lock: processes opening one schema at once
// take turns, and the later ones find the work done (processes opening
// other schemas do not wait).
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(s.schema, "migrate")); err != nil {
			return err
		}
		_, err := rpostgres.Migrate(ctx, tx, "chat_schema_migrations", migrations)
		return err
	})
}
