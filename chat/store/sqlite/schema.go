package sqlite

import (
	"context"
	"database/sql"

	rsqlite "chatgraph/runtime/store/sqlite"
)

// migrations is the chat schema's history, applied in version order, each
// step in the transaction that records it in chat_schema_migrations (see
// rsqlite.Migrate), kept apart from the run store's (schema_migrations)
// in the same file. Append only: never edit a step that has shipped.
//
// Times are INTEGER nanoseconds since the Unix epoch, UTC (at microsecond
// precision), as the chat store kept them in a file of its own, so rows
// of such a file copy over unchanged; IF NOT EXISTS lets version 1 adopt
// those tables when the run store opens that file. A message's seq keeps
// creation order.
var migrations = []rsqlite.Migration{{
	Version: 1,
	Name:    "graphs, graph versions, chats, messages",
	SQL: `
CREATE TABLE IF NOT EXISTS graphs (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL DEFAULT '',
	plan_version INTEGER NOT NULL,
	body BLOB NOT NULL,
	deleted INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_versions (
	id TEXT NOT NULL,
	plan_version INTEGER NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	body BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (id, plan_version)
);
CREATE TABLE IF NOT EXISTS chats (
	id TEXT PRIMARY KEY,
	graph_id TEXT NOT NULL,
	title TEXT NOT NULL DEFAULT '',
	active_leaf_id TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chats_graph ON chats(graph_id, created_at);
CREATE TABLE IF NOT EXISTS messages (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	parent_id TEXT NOT NULL DEFAULT '',
	role TEXT NOT NULL,
	content TEXT NOT NULL DEFAULT '',
	run_id TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL DEFAULT '',
	turn_run_id TEXT NOT NULL DEFAULT '',
	agent_node_id TEXT NOT NULL DEFAULT '',
	user_tools TEXT NOT NULL DEFAULT '',
	error TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	UNIQUE (chat_id, id)
);
`,
}, {
	Version: 2,
	Name:    "index of unsettled assistant messages",
	SQL: `
CREATE INDEX IF NOT EXISTS messages_unsettled ON messages(updated_at)
	WHERE role = 'assistant' AND status IN ('pending', 'running');
`,
}, {
	Version: 3,
	Name:    "chat owners; messages of a chat in order",
	SQL: `
ALTER TABLE chats ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS chats_owner ON chats(owner) WHERE owner != '';
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, seq);
`,
}, {
	Version: 4,
	Name:    "data migrations applied (chat_data_migrations)",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_data_migrations (
	name       TEXT PRIMARY KEY,
	applied_at INTEGER NOT NULL
);
`,
}, {
	Version: 5,
	Name:    "live graphs by name",
	SQL: `
CREATE INDEX IF NOT EXISTS graphs_name ON graphs(name) WHERE deleted = 0;
`,
}, {
	Version: 6,
	Name:    "chat calls by idempotent client request id",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_requests (
	chat_id         TEXT NOT NULL,
	id              TEXT NOT NULL,
	fingerprint     TEXT NOT NULL,
	run_id          TEXT NOT NULL,
	message_id      TEXT NOT NULL,
	user_message_id TEXT NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (chat_id, id)
);
`,
}, {
	Version: 7,
	Name:    "where deleted messages lead (chat_message_tombstones)",
	SQL: `
CREATE TABLE IF NOT EXISTS chat_message_tombstones (
	chat_id    TEXT NOT NULL,
	id         TEXT NOT NULL,
	leads_to   TEXT NOT NULL,
	deleted_at INTEGER NOT NULL,
	PRIMARY KEY (chat_id, id)
);
CREATE INDEX IF NOT EXISTS chat_message_tombstones_deleted ON chat_message_tombstones(deleted_at);
`,
}}

// SchemaVersion is the chat schema version this package writes.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// migrate applies the missing steps in one transaction on the run store's
// writer: processes opening one file at once take turns on SQLite's write
// lock, and the later ones find the work done.
func (s *Store) migrate(ctx context.Context) error {
	return s.runs.Update(ctx, func(tx *sql.Tx) error {
		_, err := rsqlite.Migrate(ctx, tx, "chat_schema_migrations", migrations)
		return err
	})
}
