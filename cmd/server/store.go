package main

import (
	"context"
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
