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

	"chatgraph/transport/chatstore"
	"chatgraph/transport/chatstore/chatstoretest"
	"chatgraph/transport/chatstore/postgres"
)

func testURL() string {
	if u := os.Getenv("CHATGRAPH_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// newSchema returns a fresh schema, dropped when the test ends. Without
// Postgres the test is skipped, but fails under CI=true.
func newSchema(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("postgres at %s is unreachable: %v", testURL(), err)
		}
		t.Skipf("postgres at %s is unreachable: %v", testURL(), err)
	}
	_ = conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "chatstoretest_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testURL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})
	return schema
}

func TestConformance(t *testing.T) {
	t.Parallel()
	chatstoretest.Run(t, func(t *testing.T) chatstore.Store {
		st, err := postgres.Open(context.Background(), postgres.Config{URL: testURL(), Schema: newSchema(t)})
		require.NoError(t, err)
		return st
	})
}
