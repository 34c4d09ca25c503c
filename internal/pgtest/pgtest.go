package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// URL is the database the tests use: CHATGRAPH_TEST_POSTGRES_URL, or the
// local default.
func URL() string {
	if u := os.Getenv("CHATGRAPH_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

var reachable = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
})

// Need skips tb when Postgres at URL is unreachable — except under
// CI=true, where a missing Postgres fails it.
func Need(tb testing.TB) {
	tb.Helper()
	if err := reachable(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("postgres at %s is unreachable: %v", URL(), err)
		}
		tb.Skipf("postgres at %s is unreachable: %v", URL(), err)
	}
}

// Schema names a schema no test used (prefix, "_" and random hex),
// dropped with what it holds (CASCADE) when tb ends; the stores create
// it. It calls Need first.
func Schema(tb testing.TB, prefix string) string {
	tb.Helper()
	Need(tb)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := prefix + "_" + hex.EncodeToString(b)
	tb.Cleanup(func() { Exec(tb, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	return schema
}

// Exec runs sql (with args) on a connection of its own to URL, failing
// tb on an error. It may run in a cleanup.
func Exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	require.NoError(tb, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(tb, err)
}
