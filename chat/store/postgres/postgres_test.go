package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/chat/store/postgres"
	"chatgraph/chat/store/storetest"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
)

// testURL is the database the tests use; CHATGRAPH_TEST_POSTGRES_URL
// overrides the local default.
func testURL() string {
	if u := os.Getenv("CHATGRAPH_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func exec(tb testing.TB, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("postgres at %s is unreachable: %v", testURL(), err)
		}
		tb.Skipf("postgres at %s is unreachable: %v", testURL(), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(tb, err)
}

// open returns a chat store and its run store on a fresh schema, dropped
// when the test ends.
func open(t *testing.T) (chat.Store, runtime.Store) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "chatstoretest_" + hex.EncodeToString(b)
	exec(t, "SELECT 1")
	t.Cleanup(func() { exec(t, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	runs, err := rpostgres.Open(t.Context(), rpostgres.Config{URL: testURL(), Schema: schema, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	chats, err := postgres.Open(t.Context(), runs)
	require.NoError(t, err)
	return chats, runs
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

// A schema whose chat tables predate versioned migrations (the tables of
// versions 1 and 2, no chat_schema_migrations) is adopted: its chats are
// kept and gain an owner; opening again changes nothing; a schema newer
// than the build is refused.
func TestMigrationsAdoptUnversionedTables(t *testing.T) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "chatstoretest_" + hex.EncodeToString(b)
	ident := pgx.Identifier{schema}.Sanitize()
	exec(t, "SELECT 1")
	t.Cleanup(func() { exec(t, `DROP SCHEMA IF EXISTS `+ident+` CASCADE`) })
	ctx := t.Context()
	runs, err := rpostgres.Open(ctx, rpostgres.Config{URL: testURL(), Schema: schema, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	exec(t, `SET search_path TO `+ident+`;
CREATE TABLE chats (id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
	active_leaf_id TEXT NOT NULL DEFAULT '', created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL);
INSERT INTO chats (id, graph_id, created_at, updated_at) VALUES ('old', 'g1', now(), now());`)

	for i := range 2 {
		chats, err := postgres.Open(ctx, runs)
		require.NoError(t, err)
		c, err := chats.GetChat(ctx, "old")
		require.NoError(t, err)
		require.Empty(t, c.Owner)
		require.NoError(t, chats.CreateChat(ctx, &chat.Chat{ID: fmt.Sprintf("new%d", i), GraphID: "g1", Owner: fmt.Sprintf("client%d", i)}, 1),
			"the chat of no owner is not counted")
	}
	var n, version int
	require.NoError(t, runs.Pool().QueryRow(ctx, `SELECT count(*), max(version) FROM chat_schema_migrations`).Scan(&n, &version))
	require.Equal(t, postgres.SchemaVersion(), n, "one row per migration")
	require.Equal(t, postgres.SchemaVersion(), version)

	_, err = runs.Pool().Exec(ctx, `INSERT INTO chat_schema_migrations (version, name) VALUES ($1, 'future')`, postgres.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, runs)
	require.ErrorContains(t, err, "newer than this build knows")
}
