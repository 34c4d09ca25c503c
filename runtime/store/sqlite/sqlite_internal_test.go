package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The writer runs with its larger page cache and its statement journals
// in memory (writerCacheKiB); the readers keep SQLite's defaults.
func TestWriterConnectionSettings(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "w.db")})
	require.NoError(t, err)
	defer s.Close()
	pragma := func(db *sql.DB, name string) int {
		var v int
		require.NoError(t, db.QueryRow("PRAGMA "+name).Scan(&v), name)
		return v
	}
	require.Equal(t, -writerCacheKiB, pragma(s.w, "cache_size"), "the writer's cache, in KiB (negative)")
	require.Equal(t, 2, pragma(s.w, "temp_store"), "the writer's temporary files: 2 is MEMORY")
	require.Equal(t, -2000, pragma(s.r, "cache_size"), "a reader's cache: SQLite's default")
}
