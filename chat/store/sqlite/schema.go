package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migration is one step of the chat schema, applied in version order in
// the transaction that records it in chat_schema_migrations.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations is the chat schema's history, kept apart from the run
// store's (schema_migrations) in the same file. Append only: never edit a
// step that has shipped.
//
// Times are INTEGER nanoseconds since the Unix epoch, UTC (at microsecond
// precision), as the chat store kept them in a file of its own, so rows
// of such a file copy over unchanged; IF NOT EXISTS lets version 1 adopt
// those tables when the run store opens that file. A message's seq keeps
// creation order.
var migrations = []migration{{
	version: 1,
	name:    "graphs, graph versions, chats, messages",
	sql: `
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
	version: 2,
	name:    "index of unsettled assistant messages",
	sql: `
CREATE INDEX IF NOT EXISTS messages_unsettled ON messages(updated_at)
	WHERE role = 'assistant' AND status IN ('pending', 'running');
`,
}, {
	version: 3,
	name:    "chat owners; messages of a chat in order",
	sql: `
ALTER TABLE chats ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS chats_owner ON chats(owner) WHERE owner != '';
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, seq);
`,
}, {
	version: 4,
	name:    "data migrations applied (chat_data_migrations)",
	sql: `
CREATE TABLE IF NOT EXISTS chat_data_migrations (
	name       TEXT PRIMARY KEY,
	applied_at INTEGER NOT NULL
);
`,
}}

// SchemaVersion is the chat schema version this package writes.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrate applies the missing steps in one transaction on the run store's
// writer: processes opening one file at once take turns on SQLite's write
// lock, and the later ones find the work done.
func (s *Store) migrate(ctx context.Context) error {
	return s.runs.Update(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS chat_schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at INTEGER NOT NULL
)`); err != nil {
			return err
		}
		var current sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM chat_schema_migrations`).Scan(&current); err != nil {
			return err
		}
		if int(current.Int64) > SchemaVersion() {
			return fmt.Errorf("chat schema is at version %d, newer than this build knows (%d)", current.Int64, SchemaVersion())
		}
		for _, m := range migrations {
			if m.version <= int(current.Int64) {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO chat_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, time.Now().UnixMicro()); err != nil {
				return err
			}
		}
		return nil
	})
}
