package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Migration is one step of a schema kept in the store's file. Steps are
// applied in version order, each in the transaction that records it in
// the schema's table of migrations (see Migrate), so a step is applied
// completely or not at all, and exactly once.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrations is the schema history. Append only: never edit a step that
// has shipped.
//
// Times are INTEGER microseconds since the Unix epoch, UTC (the zero
// time.Time is stored as its own value, so ordering matches Go's). JSON
// values are TEXT, so sqlite3's json functions work on them. Checkpoints
// keep their first-save order in ord (the rowid: an upsert updates the row
// in place and keeps it). Events are a WITHOUT ROWID table clustered on
// (run_id, seq): reading a log after a seq is one range scan.
var migrations = []Migration{{
	Version: 1,
	Name:    "runs, checkpoints, events",
	SQL: `
CREATE TABLE runs (
	id               TEXT PRIMARY KEY,
	parent_id        TEXT NOT NULL DEFAULT '',
	root_id          TEXT NOT NULL DEFAULT '',
	chat_id          TEXT NOT NULL DEFAULT '',
	graph_id         TEXT NOT NULL DEFAULT '',
	plan_version     INTEGER NOT NULL DEFAULT 0,
	kind             TEXT NOT NULL DEFAULT '',
	attrs            TEXT,
	entry_node_ids   TEXT,
	input            TEXT,
	options          TEXT,
	status           TEXT NOT NULL,
	error            TEXT NOT NULL DEFAULT '',
	interrupts       TEXT,
	last_seq         INTEGER NOT NULL DEFAULT 0,
	token            INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT NOT NULL DEFAULT '',
	lease_expires_at INTEGER,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
);
CREATE INDEX runs_created ON runs (created_at);
CREATE INDEX runs_status_created ON runs (status, created_at);
CREATE INDEX runs_status_updated ON runs (status, updated_at);
CREATE INDEX runs_chat_created ON runs (chat_id, created_at);

CREATE TABLE checkpoints (
	ord             INTEGER PRIMARY KEY,
	run_id          TEXT NOT NULL,
	node_id         TEXT NOT NULL,
	status          TEXT NOT NULL,
	plan_version    INTEGER NOT NULL DEFAULT 0,
	inputs_hash     TEXT NOT NULL DEFAULT '',
	effect          TEXT NOT NULL DEFAULT '',
	output          TEXT,
	summary         TEXT NOT NULL DEFAULT '',
	error           TEXT NOT NULL DEFAULT '',
	error_code      TEXT NOT NULL DEFAULT '',
	error_trace     TEXT NOT NULL DEFAULT '',
	skip_reason     TEXT NOT NULL DEFAULT '',
	interrupt       TEXT,
	resumes         INTEGER NOT NULL DEFAULT 0,
	attempt         INTEGER NOT NULL DEFAULT 0,
	attempt_id      TEXT NOT NULL DEFAULT '',
	replayed        INTEGER NOT NULL DEFAULT 0,
	started_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	next_attempt_at INTEGER NOT NULL,
	token           INTEGER NOT NULL DEFAULT 0,
	UNIQUE (run_id, node_id)
);

CREATE TABLE events (
	run_id  TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	type    TEXT NOT NULL,
	chat_id TEXT NOT NULL DEFAULT '',
	node_id TEXT NOT NULL DEFAULT '',
	attempt INTEGER NOT NULL DEFAULT 0,
	at      INTEGER NOT NULL,
	data    TEXT,
	PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
`,
}, {
	Version: 2,
	Name:    "runs.answers",
	SQL:     `ALTER TABLE runs ADD COLUMN answers TEXT;`,
}, {
	// Completed side effects by idempotency key (runtime.EffectLedger).
	// runs_root serves retention's question "does this lineage still
	// have a run?".
	Version: 3,
	Name:    "effects",
	SQL: `
CREATE TABLE effects (
	key         TEXT PRIMARY KEY,
	root_run_id TEXT NOT NULL,
	node_id     TEXT NOT NULL DEFAULT '',
	kind        TEXT NOT NULL DEFAULT '',
	value       TEXT NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX effects_root ON effects (root_run_id);
CREATE INDEX runs_root ON runs (root_id);
`,
}, {
	// The tail of the event log (tail.go): a streaming run's events are
	// appended to event_tail, in commit order, and moved into events a
	// segment at a time. run_tails holds, for each run with a segment in
	// event_tail, its first row and the log's last seq.
	Version: 4,
	Name:    "event_tail, run_tails",
	SQL: `
CREATE TABLE event_tail (
	id      INTEGER PRIMARY KEY,
	run_id  TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	type    TEXT NOT NULL,
	chat_id TEXT NOT NULL DEFAULT '',
	node_id TEXT NOT NULL DEFAULT '',
	attempt INTEGER NOT NULL DEFAULT 0,
	at      INTEGER NOT NULL,
	data    TEXT
);
CREATE TABLE run_tails (
	run_id    TEXT PRIMARY KEY,
	tail_from INTEGER NOT NULL,
	last_seq  INTEGER NOT NULL
) WITHOUT ROWID;
`,
}, {
	// The run's token beside its segment, kept equal to runs.token by a
	// trigger, so that the write that grows a segment checks its token
	// in the run_tails row it updates, not with a second lookup in runs
	// (tail.go: growKnownQuery).
	Version: 5,
	Name:    "run_tails.token",
	SQL: `
ALTER TABLE run_tails ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
UPDATE run_tails SET token = coalesce((SELECT token FROM runs WHERE id = run_tails.run_id), 0);
CREATE TRIGGER run_tails_token AFTER UPDATE OF token ON runs WHEN NEW.token != OLD.token
BEGIN
	UPDATE run_tails SET token = NEW.token WHERE run_id = NEW.id;
END;
`,
}, {
	// The tail's epoch: a counter that every change to an open segment
	// (its run_tails row updated or deleted) and every claim (a run's
	// token moved) advances, whoever makes it. A store that finds it
	// where its last write transaction left it knows that nobody else
	// touched the segments it remembers, and grows them without
	// statements of their own (tail.go: the fast grow).
	Version: 6,
	Name:    "tail_epoch",
	SQL: `
CREATE TABLE tail_epoch (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	n  INTEGER NOT NULL
);
INSERT INTO tail_epoch (id, n) VALUES (1, 0);
CREATE TRIGGER tail_epoch_claim AFTER UPDATE OF token ON runs WHEN NEW.token != OLD.token
BEGIN
	UPDATE tail_epoch SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER tail_epoch_grow AFTER UPDATE ON run_tails
BEGIN
	UPDATE tail_epoch SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER tail_epoch_end AFTER DELETE ON run_tails
BEGIN
	UPDATE tail_epoch SET n = n + 1 WHERE id = 1;
END;
`,
}, {
	// Compacted segments as chunks (chunk.go): a row per segment, its
	// events encoded together, instead of a row per event in events.
	// Reading a log after a seq is one range scan of the key.
	Version: 7,
	Name:    "event_chunks",
	SQL: `
CREATE TABLE event_chunks (
	run_id    TEXT NOT NULL,
	first_seq INTEGER NOT NULL,
	last_seq  INTEGER NOT NULL,
	data      BLOB NOT NULL,
	PRIMARY KEY (run_id, last_seq)
);
`,
}, {
	// The tail as pages (page.go): a row per write transaction, its
	// events of every run encoded together, instead of a row per event.
	// A file left with segments open in the row tail (a server killed
	// while its runs streamed) has them moved into events first, as Open
	// moved them from that tail.
	Version: 8,
	Name:    "event_tail pages",
	SQL: `
INSERT INTO events (run_id, seq, type, chat_id, node_id, attempt, at, data)
SELECT e.run_id, e.seq, e.type, e.chat_id, e.node_id, e.attempt, e.at, e.data
FROM event_tail e JOIN run_tails t ON t.run_id = e.run_id AND e.id >= t.tail_from ORDER BY e.run_id, e.seq;
UPDATE runs SET last_seq = max((SELECT t.last_seq FROM run_tails t WHERE t.run_id = runs.id),
	coalesce((SELECT max(e.seq) FROM events e WHERE e.run_id = runs.id), 0))
WHERE id IN (SELECT run_id FROM run_tails);
DELETE FROM run_tails;
DROP TABLE event_tail;
CREATE TABLE event_tail (
	id   INTEGER PRIMARY KEY,
	n    INTEGER NOT NULL,
	data BLOB NOT NULL
);
`,
}}

// SchemaVersion is the schema version this package writes.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// migrate applies the missing migrations in one IMMEDIATE transaction
// (inTx): two processes opening one file at once serialise on SQLite's
// write lock, and the second finds the work done.
func (s *Store) migrate(ctx context.Context) error {
	var applied []Migration
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		applied, err = Migrate(ctx, tx, "schema_migrations", migrations)
		return err
	})
	if err != nil {
		return err
	}
	for _, m := range applied {
		s.log.Info("sqlite store: schema migrated", "path", s.path, "version", m.Version, "name", m.Name)
	}
	return nil
}

// Migrate applies in tx the steps (in ascending versions) newer than the
// last version recorded in table, created when missing, recording each,
// and returns those it applied. A recorded version newer than the last
// step is an error: a newer build wrote the file. The chat store keeps
// its schema this way too, in a table of its own.
func Migrate(ctx context.Context, tx *sql.Tx, table string, steps []Migration) ([]Migration, error) {
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at INTEGER NOT NULL
)`); err != nil {
		return nil, err
	}
	var current sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM `+table).Scan(&current); err != nil {
		return nil, err
	}
	if latest := steps[len(steps)-1].Version; int(current.Int64) > latest {
		return nil, fmt.Errorf("%s: the schema is at version %d, newer than this build knows (%d)", table, current.Int64, latest)
	}
	var applied []Migration
	for _, m := range steps {
		if m.Version <= int(current.Int64) {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return applied, fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UnixMicro()); err != nil {
			return applied, err
		}
		applied = append(applied, m)
	}
	return applied, nil
}
