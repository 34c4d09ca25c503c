package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"chatgraph/chat"
	chatpostgres "chatgraph/chat/store/postgres"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// dbFile is the one SQLite file under the state dir: runs, checkpoints,
// event logs, graphs and chats.
const dbFile = "chatgraph.db"

// stores are the run store and the chat store of one database, and how
// to close them.
type stores struct {
	runs  runtime.Store
	chats chat.Store
	close func()
}

// openStores opens the run store and the chat store in one database: a
// SQLite file under the state dir, or Postgres with --database-url.
func openStores(ctx context.Context, c *config, log *slog.Logger) (*stores, error) {
	if c.databaseURL != "" {
		return openPostgres(ctx, c, log)
	}
	if err := os.MkdirAll(c.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := adoptSplitState(ctx, c.stateDir, log); err != nil {
		return nil, fmt.Errorf("state dir: adopting runs.db and chats.db: %w", err)
	}
	runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(c.stateDir, dbFile), Logger: log})
	if err != nil {
		return nil, err
	}
	chats, err := chatsqlite.Open(ctx, runs)
	if err != nil {
		_ = runs.Close()
		return nil, err
	}
	return &stores{runs: runs, chats: chats, close: func() {
		_ = chats.Close()
		_ = runs.Close()
	}}, nil
}

// openPostgres opens the shared stores: runs and chats in one Postgres
// database and schema, for several server processes.
func openPostgres(ctx context.Context, c *config, log *slog.Logger) (*stores, error) {
	runs, err := rpostgres.Open(ctx, rpostgres.Config{URL: c.databaseURL, Schema: c.databaseSchema, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("postgres run store: %w", err)
	}
	chats, err := chatpostgres.Open(ctx, runs)
	if err != nil {
		_ = runs.Close()
		return nil, fmt.Errorf("postgres chat store: %w", err)
	}
	return &stores{runs: runs, chats: chats, close: func() {
		_ = chats.Close()
		_ = runs.Close()
	}}, nil
}

// The two files a state dir had before runs and chats shared one.
const (
	oldRunsFile  = "runs.db"
	oldChatsFile = "chats.db"
)

// chatTables are the chat store's tables, as chats.db had them, with the
// record of its migrations (so steps the file had are not applied again,
// and those it lacked are). Every table a recorded step may have made is
// listed: a table the file lacks is skipped, one it has must come along
// with the record of the step that made it.
var chatTables = []string{"graphs", "graph_versions", "chats", "messages", "chat_message_tombstones", "chat_data_migrations", "chat_requests",
	"chat_schema_migrations"}

// adoptSplitState turns a state dir of two files (runs.db and chats.db)
// into one chatgraph.db, once: the run file becomes chatgraph.db (its
// journal with it) and the chat tables are copied into it with their
// definitions, in one transaction. The chat file is then renamed
// chats.db.adopted, kept for the user to delete. Nothing happens when
// chatgraph.db exists.
func adoptSplitState(ctx context.Context, dir string, log *slog.Logger) error {
	db, oldRuns, oldChats := filepath.Join(dir, dbFile), filepath.Join(dir, oldRunsFile), filepath.Join(dir, oldChatsFile)
	if exists(db) || !exists(oldRuns) && !exists(oldChats) {
		return nil
	}
	if exists(oldRuns) {
		for _, suffix := range []string{"-wal", "-shm", ""} { // the file last: it is what marks the move done
			if exists(oldRuns + suffix) {
				if err := os.Rename(oldRuns+suffix, db+suffix); err != nil {
					return err
				}
			}
		}
	}
	if exists(oldChats) {
		if err := copyChatTables(ctx, db, oldChats); err != nil {
			return err
		}
		if err := os.Rename(oldChats, oldChats+".adopted"); err != nil {
			return err
		}
	}
	log.Info("state dir: runs.db and chats.db are now one file", "file", db, "kept", oldChatsFile+".adopted")
	return nil
}

// copyChatTables creates the chat tables in db as from holds them and
// copies their rows, in one transaction.
func copyChatTables(ctx context.Context, db, from string) error {
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetMaxOpenConns(1) // ATTACH holds for the connection
	if _, err := conn.ExecContext(ctx, "ATTACH DATABASE ? AS old", from); err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, t := range chatTables {
		var def string
		err := tx.QueryRowContext(ctx, "SELECT sql FROM old.sqlite_master WHERE type = 'table' AND name = ?", t).Scan(&def)
		if errors.Is(err, sql.ErrNoRows) {
			continue // the chat store creates it
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, def); err != nil {
			return fmt.Errorf("creating %s: %w", t, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO main."+t+" SELECT * FROM old."+t); err != nil {
			return fmt.Errorf("copying %s: %w", t, err)
		}
		if err := copyIndexes(ctx, tx, t); err != nil {
			return fmt.Errorf("indexes of %s: %w", t, err)
		}
	}
	return tx.Commit()
}

// copyIndexes creates in main the indexes the attached file old has on
// table t (the migrations that made them are recorded as applied).
func copyIndexes(ctx context.Context, tx *sql.Tx, t string) error {
	rows, err := tx.QueryContext(ctx, "SELECT sql FROM old.sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", t)
	if err != nil {
		return err
	}
	var defs []string
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			rows.Close()
			return err
		}
		defs = append(defs, def)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, def := range defs {
		if _, err := tx.ExecContext(ctx, def); err != nil {
			return err
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
