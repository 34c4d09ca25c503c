package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// openRunStore opens the SQLite run store under the state dir.
func openRunStore(ctx context.Context, c *config, log *slog.Logger) (runtime.Store, func(), error) {
	st, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(c.stateDir, "runs.db"), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close() }, nil
}

func openPostgres(context.Context, *config, *slog.Logger) (*stores, error) {
	return nil, errors.New("--database-url: the Postgres store is not available in this build yet")
}
