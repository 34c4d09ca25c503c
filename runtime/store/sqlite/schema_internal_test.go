package sqlite

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// TestUpgradeFromV1 opens a file left by a build that knew only the first
// migration: Open applies the rest and the old rows read back.
func TestUpgradeFromV1(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	require.NoError(t, err)
	_, err = db.Exec(migrations[0].SQL)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO schema_migrations VALUES (1, ?, 0)`, migrations[0].Name)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO runs (id, root_id, graph_id, status, entry_node_ids, options, created_at, updated_at)
VALUES ('old', 'old', 'g', 'completed', '["start"]', '{}', 0, 0)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	st, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	defer st.Close()
	r, err := st.GetRun(t.Context(), "old")
	require.NoError(t, err)
	require.Equal(t, []string{"start"}, r.EntryNodeIDs)
	require.Nil(t, r.Answers)

	// The effects table is there, and retention keeps the old run's.
	_, err = st.PutEffect(t.Context(), runtime.EffectRecord{Key: "k", RootRunID: "old", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	_, err = st.DeleteFinishedBefore(t.Context(), time.UnixMicro(-1))
	require.NoError(t, err)
	_, ok, err := st.GetEffect(t.Context(), "k")
	require.NoError(t, err)
	require.True(t, ok)

	var version int
	require.NoError(t, st.r.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version))
	require.Equal(t, SchemaVersion(), version)
}
