package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The group commit's inserts run on the writer's driver connection, and
// Close finalizes those statements first: a connection with statements
// left open would stay open after Close, and the WAL with it.
func TestCloseFinalizesTheWritersDriverStatements(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	tailRun(t, s, "r1")
	appendDeltas(t, s, "r1", 1, 12, 3)
	require.NotEmpty(t, s.raw.m, "the inserts ran on the driver connection")
	requireLog(t, s, "r1", 12)
	require.NoError(t, s.Close())
	_, err = os.Stat(path + "-wal")
	require.ErrorIs(t, err, os.ErrNotExist, "the last connection to the file closed and removed the WAL")

	s, err = Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	defer s.Close()
	requireLog(t, s, "r1", 12)
}

// Statements belong to the driver connection they were prepared on: on
// another one, exec prepares them anew there and finalizes the old.
func TestRawStmtsFollowTheDriverConnection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ctx := t.Context()
	var r rawStmts
	insert := func(db *sql.DB, id string) any {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		var dc any
		require.NoError(t, conn.Raw(func(c any) error {
			dc = c
			return r.exec(ctx, c, `INSERT INTO run_tails (run_id, tail_from, last_seq) VALUES (?, ?, ?)`,
				[]any{id, int64(1), 2}) // an int, converted as database/sql would
		}))
		return dc
	}
	var dbs []*sql.DB
	for range 2 {
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		dbs = append(dbs, db)
	}
	first := insert(dbs[0], "a")
	require.Same(t, first, r.conn)
	second := insert(dbs[1], "b")
	require.NotSame(t, first, second)
	require.Same(t, second, r.conn, "prepared anew on the second connection")
	require.Len(t, r.m, 1)
	conn, err := dbs[1].Conn(ctx)
	require.NoError(t, err)
	require.NoError(t, conn.Raw(func(any) error { return r.close() }))
	require.NoError(t, conn.Close())
	for _, db := range dbs {
		require.NoError(t, db.Close())
	}
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var n, last int64
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT count(*), sum(last_seq) FROM run_tails`).Scan(&n, &last))
	require.Equal(t, int64(2), n)
	require.Equal(t, int64(4), last)
}
