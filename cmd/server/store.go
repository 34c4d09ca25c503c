package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
	rsqlite "chatgraph/runtime/store/sqlite"
	chatpostgres "chatgraph/transport/chatstore/postgres"
)

// openRunStore opens the SQLite run store under the state dir.
func openRunStore(ctx context.Context, c *config, log *slog.Logger) (runtime.Store, func(), error) {
	st, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(c.stateDir, "runs.db"), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close() }, nil
}

// openPostgres opens the shared stores: runs and chats in one Postgres
// database (and schema), for several server processes.
func openPostgres(ctx context.Context, c *config, log *slog.Logger) (*stores, error) {
	runs, err := rpostgres.Open(ctx, rpostgres.Config{URL: c.databaseURL, Schema: c.databaseSchema, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("postgres run store: %w", err)
	}
	chats, err := chatpostgres.Open(ctx, chatpostgres.Config{URL: c.databaseURL, Schema: c.databaseSchema})
	if err != nil {
		_ = runs.Close()
		return nil, fmt.Errorf("postgres chat store: %w", err)
	}
	return &stores{runs: runs, chats: chats, close: func() {
		_ = chats.Close()
		_ = runs.Close()
	}}, nil
}
