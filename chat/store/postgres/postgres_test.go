package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
