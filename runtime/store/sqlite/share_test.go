package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// TestReserveRun: another store's transaction (Update) writes its own
// rows and a run's reservation together; ReserveRun refuses an id that
// exists (pending or not) and a record that is not pending; an error
// rolls the whole transaction back; the engine's creation of the run then
// replaces the reservation.
func TestReserveRun(t *testing.T) {
	t.Parallel()
	st := openAt(t, filepath.Join(t.TempDir(), "share.db"), "")
	ctx := t.Context()
	require.NoError(t, st.Update(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE notes (id TEXT PRIMARY KEY, run_id TEXT NOT NULL)`)
		return err
	}))
	reserve := func(noteID, runID string) error {
		return st.Update(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO notes (id, run_id) VALUES (?, ?)`, noteID, runID); err != nil {
				return err
			}
			return st.ReserveRun(ctx, tx, &runtime.RunRecord{ID: runID, RootID: runID, GraphID: "g", Status: runtime.RunPending})
		})
	}
	notes := func() (n int) {
		require.NoError(t, st.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n))
		return n
	}

	require.NoError(t, reserve("n1", "r1"))
	got, err := st.GetRun(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunPending, got.Status)
	require.Equal(t, 1, notes())

	require.ErrorIs(t, reserve("n2", "r1"), runtime.ErrRunExists, "a reservation is taken too")
	require.Equal(t, 1, notes(), "the refused transaction wrote nothing")

	err = st.Update(ctx, func(tx *sql.Tx) error {
		return st.ReserveRun(ctx, tx, &runtime.RunRecord{ID: "r2", Status: runtime.RunRunning})
	})
	require.ErrorContains(t, err, "a reservation is")
	_, err = st.GetRun(ctx, "r2")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	boom := errors.New("boom")
	require.ErrorIs(t, st.Update(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO notes (id, run_id) VALUES ('n3', 'r3')`); err != nil {
			return err
		}
		return boom
	}), boom)
	require.Equal(t, 1, notes(), "fn's error rolled its writes back")

	run := &runtime.RunRecord{ID: "r1", RootID: "r1", GraphID: "g", Status: runtime.RunRunning}
	require.NoError(t, st.CreateRun(ctx, run), "creating the run replaces its reservation")
	require.ErrorIs(t, reserve("n4", "r1"), runtime.ErrRunExists)

	// The read pool is read-only.
	_, err = st.ReadDB().ExecContext(ctx, `INSERT INTO notes (id, run_id) VALUES ('n5', 'r5')`)
	require.Error(t, err)
}
