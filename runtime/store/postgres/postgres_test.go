package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/internal/pgtest"
	"chatgraph/runtime"
	"chatgraph/runtime/store/postgres"
	"chatgraph/runtime/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openSchema opens a store on schema, closed when the test ends (before
// the schema is dropped).
func openSchema(tb testing.TB, schema string) *postgres.Store {
	tb.Helper()
	st, err := postgres.Open(tb.Context(), postgres.Config{URL: pgtest.URL(), Schema: schema, MaxConns: 4})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, st.Close()) })
	return st
}

func open(tb testing.TB) runtime.Store { return openSchema(tb, pgtest.Schema(tb, "storetest")) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) runtime.Store { return open(t) },
		storetest.Durable(func(t *testing.T, s runtime.Store) runtime.Store {
			return openSchema(t, s.(*postgres.Store).Schema())
		}), storetest.ReplacesNUL())
}

func TestOpenConfig(t *testing.T) {
	t.Parallel()
	_, err := postgres.Open(t.Context(), postgres.Config{})
	require.ErrorContains(t, err, "URL is required")
	_, err = postgres.Open(t.Context(), postgres.Config{URL: "postgres://%zz"})
	require.Error(t, err)

	// A schema name that needs quoting works.
	schema := pgtest.Schema(t, "storetest") + ` "odd" Name`
	t.Cleanup(func() { pgtest.Exec(t, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	st := openSchema(t, schema)
	require.Equal(t, schema, st.Schema())
	require.NoError(t, st.CreateRun(t.Context(), &runtime.RunRecord{ID: "r", Status: runtime.RunPending}))
	_, err = st.GetRun(t.Context(), "r")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "Close twice")
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, "storetest")

	// Several processes (here: stores) starting on a new schema at once.
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() {
			stores[i], errs[i] = postgres.Open(t.Context(), postgres.Config{URL: pgtest.URL(), Schema: schema, MaxConns: 2})
		})
	}
	wg.Wait()
	for i, st := range stores {
		require.NoError(t, errs[i])
		require.NoError(t, st.Close())
	}
	st := openSchema(t, schema) // and again, later

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ident := pgx.Identifier{schema}.Sanitize()
	var n, version int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), max(version) FROM `+ident+`.schema_migrations`).Scan(&n, &version))
	require.Equal(t, postgres.SchemaVersion(), n, "one row per migration")
	require.Equal(t, postgres.SchemaVersion(), version)
	require.NoError(t, st.Close())

	// A schema from a newer build is refused, not damaged.
	_, err = conn.Exec(ctx, `INSERT INTO `+ident+`.schema_migrations (version, name) VALUES ($1, 'future')`, postgres.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, postgres.Config{URL: pgtest.URL(), Schema: schema})
	require.ErrorContains(t, err, "newer than this build")
}

// TestFencedWriteWaitsForClaim pins the reason SaveCheckpoint share-locks
// the run row. A new holder has claimed the run and written checkpoint x,
// uncommitted; the old holder's write of x starts meanwhile. Under READ
// COMMITTED a write that only read the token from its snapshot would wait
// for x's row, then overwrite the new holder's x once it commits. With the
// lock it waits for the run row instead, sees the new token, and is fenced.
func TestFencedWriteWaitsForClaim(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, "storetest")
	st := openSchema(t, schema)
	ctx := t.Context()
	require.NoError(t, st.CreateRun(ctx, &runtime.RunRecord{ID: "r", Status: runtime.RunRunning}))
	require.NoError(t, st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: "r", NodeID: "x", Status: runtime.NodeRunning}))

	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ident := pgx.Identifier{schema}.Sanitize()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	_, err = tx.Exec(ctx, `UPDATE `+ident+`.runs SET token = token + 1 WHERE id = 'r'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE `+ident+`.checkpoints SET summary = 'new holder', token = 1 WHERE run_id = 'r' AND node_id = 'x'`)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		done <- st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: "r", NodeID: "x", Status: runtime.NodeSucceeded, Summary: "old holder"})
	}()
	// Wait (bounded) until the old holder's statement waits for a lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, ident+".checkpoints").Scan(&waiting))
		if waiting > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the old holder's write did not wait for the claim: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the old holder's write never waited")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-done, runtime.ErrFenced)
	cps, err := st.Checkpoints(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, "new holder", cps[0].Summary)
}

func BenchmarkAppendEvent(b *testing.B) { storetest.BenchAppendEvent(b, open) }

func BenchmarkSaveCheckpoint(b *testing.B) { storetest.BenchSaveCheckpoint(b, open) }

func BenchmarkWriteBatch(b *testing.B) { storetest.BenchWriteBatch(b, open) }

func BenchmarkGroupCommit(b *testing.B) { storetest.BenchGroupCommit(b, open) }

func BenchmarkRenewLeases(b *testing.B) { storetest.BenchRenewLeases(b, open) }

// TestReserveRun: another store's transaction writes its own rows and a
// run's reservation together; ReserveRun refuses an id that exists
// (pending or not) and a record that is not pending, and the refusal
// rolls the transaction back; the creation of the run then replaces the
// reservation.
func TestReserveRun(t *testing.T) {
	t.Parallel()
	st := openSchema(t, pgtest.Schema(t, "storetest"))
	ctx := t.Context()
	notes := st.Table("notes")
	_, err := st.Pool().Exec(ctx, `CREATE TABLE `+notes+` (id text PRIMARY KEY, run_id text NOT NULL)`)
	require.NoError(t, err)
	reserve := func(noteID string, rec *runtime.RunRecord) error {
		return pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+notes+` (id, run_id) VALUES ($1, $2)`, noteID, rec.ID); err != nil {
				return err
			}
			return st.ReserveRun(ctx, tx, rec)
		})
	}
	count := func() (n int) {
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+notes).Scan(&n))
		return n
	}
	pending := func(id string) *runtime.RunRecord {
		return &runtime.RunRecord{ID: id, RootID: id, GraphID: "g", Status: runtime.RunPending}
	}

	require.NoError(t, reserve("n1", pending("r1")))
	got, err := st.GetRun(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunPending, got.Status)
	require.Equal(t, 1, count())

	require.ErrorIs(t, reserve("n2", pending("r1")), runtime.ErrRunExists, "a reservation is taken too")
	require.Equal(t, 1, count(), "the refused transaction wrote nothing")
	require.ErrorContains(t, reserve("n3", &runtime.RunRecord{ID: "r3", Status: runtime.RunRunning}), "a reservation is")
	_, err = st.GetRun(ctx, "r3")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	require.NoError(t, st.CreateRun(ctx, &runtime.RunRecord{ID: "r1", RootID: "r1", GraphID: "g", Status: runtime.RunRunning}),
		"creating the run replaces its reservation")
	require.ErrorIs(t, reserve("n4", pending("r1")), runtime.ErrRunExists)
	require.Equal(t, `"`+st.Schema()+`".runs`, st.Table("runs"))
}
