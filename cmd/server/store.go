package main

import (
	"context"
	"errors"
	"log/slog"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// openRunStore opens the run store under the state dir.
//
// TODO(durability): switch to runtime/store/sqlite once it lands; until
// then runs live in memory and do not survive a restart.
func openRunStore(_ context.Context, _ *config, log *slog.Logger) (runtime.Store, func(), error) {
	log.Warn("run store: in memory (runs do not survive a restart)")
	return memory.New(), func() {}, nil
}

func openPostgres(context.Context, *config, *slog.Logger) (*stores, error) {
	return nil, errors.New("--database-url: the Postgres store is not available in this build yet")
}
