package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"chatgraph/runtime"
)

// The group commit's inserts run on the writer's driver connection, and
// Close finalizes those statements first: a connection with statements
// left open would stay open after Close, and the WAL with it.
func TestCloseFinalizesTheWritersDriverStatements(t *testing.T) {
	s, path := streamedOn(t)
	requireLog(t, s, "r1", 12)
	require.NoError(t, s.Close())
	_, err := os.Stat(path + "-wal")
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

// A write transaction's one-row queries run on the driver connection and
// scan as database/sql would: no row is sql.ErrNoRows, a NULL does not
// scan into an integer, and an append to a run the file does not have is
// refused as before.
func TestRawQueryRowScansAsDatabaseSQL(t *testing.T) {
	t.Parallel()
	s := oneStore(t)
	ctx := t.Context()
	scan := func(q string, dest ...any) error {
		var err error
		_, err = s.commitGated(ctx, false, func(tx *sql.Tx) error {
			require.NotNil(t, s.wconn)
			return s.queryRowHot(ctx, q).Scan(dest...)
		}, nil)
		return err
	}
	var n int64
	var str string
	require.NoError(t, scan(`SELECT 7, 'seven'`, &n, &str))
	require.Equal(t, int64(7), n)
	require.Equal(t, "seven", str)
	require.ErrorIs(t, scan(`SELECT 1 WHERE 0`, &n), sql.ErrNoRows)
	require.ErrorContains(t, scan(`SELECT NULL`, &n), "cannot scan <nil> into *int64")
	require.ErrorContains(t, scan(`SELECT 1, 2`, &n), "2 columns")

	err := s.AppendEvents(ctx, "nobody", 0, deltas("nobody", 1, 2))
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
}

// The pool may discard the writer's connection between two group
// commits: a statement a cancelled context interrupted leaves it invalid
// (driver.Validator), and a driver.ErrBadConn closes it. Finalized on a
// closed connection, the statements the store prepared on it crashed the
// process, in the next group commit or in Close. Now they are finalized
// before the connection goes when the store sees it coming (interrupted:
// nothing is left open after Close), and only dropped when it is closed
// already (bad: SQLite keeps that connection's handle). Either way the
// store goes on writing on the pool's next connection and closes.
func TestWriterConnectionDiscardedByThePool(t *testing.T) {
	for _, how := range []string{"bad", "interrupted"} {
		t.Run(how, func(t *testing.T) {
			s, path := streamedOn(t)
			first := s.raw.conn
			switch how {
			case "bad":
				// Another user of the writer's connection fails it.
				conn, err := s.w.Conn(t.Context())
				require.NoError(t, err)
				require.ErrorIs(t, conn.Raw(func(any) error { return driver.ErrBadConn }), driver.ErrBadConn)
				require.Error(t, conn.Close(), "the connection is gone")
			case "interrupted":
				// A write transaction whose connection is left interrupted
				// (as a context's cancel can leave it after its last
				// statement): the pool closes it once it is released.
				var held *sql.Conn
				_, err := s.commitGated(t.Context(), false, func(tx *sql.Tx) error {
					held = s.wconn
					return nil
				}, func() {
					require.NoError(t, held.Raw(func(dc any) error {
						interrupt(dc)
						require.False(t, usable(dc))
						return nil
					}))
				})
				require.NoError(t, err)
				require.Empty(t, s.raw.m, "finalized before the release")
			}
			appendDeltas(t, s, "r1", 13, 24, 3)
			require.NotSame(t, first, s.raw.conn, "the pool's next connection")
			requireLog(t, s, "r1", 24)
			require.NoError(t, s.Close())
			if how == "interrupted" {
				_, err := os.Stat(path + "-wal")
				require.ErrorIs(t, err, os.ErrNotExist, "no connection was left open")
			}
		})
	}
}

// streamedOn opens a store on a new file and streams 12 events of run r1
// into it, so that the writer has its driver statements.
func streamedOn(t *testing.T) (s *Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "t.db")
	s, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	tailRun(t, s, "r1")
	appendDeltas(t, s, "r1", 1, 12, 3)
	require.NotEmpty(t, s.raw.m, "the inserts ran on the driver connection")
	return s, path
}

// interrupt interrupts the SQLite connection of dc, a driver connection
// of modernc.org/sqlite, as its context handling does when a context ends
// (sqlite3_interrupt): the connection reports itself invalid until its
// next statement starts.
func interrupt(dc any) {
	c := reflect.ValueOf(dc).Elem()
	tls := (*libc.TLS)(unsafe.Pointer(c.FieldByName("tls").Pointer()))
	sqlite3.Xsqlite3_interrupt(tls, uintptr(c.FieldByName("db").Uint()))
}
