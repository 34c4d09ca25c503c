package sqlite_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/runtime"
	"chatgraph/runtime/store/sqlite"
	"chatgraph/runtime/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openAt(tb testing.TB, path string, sync sqlite.Synchronous) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(tb.Context(), sqlite.Config{Path: path, Synchronous: sync})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, st.Close()) })
	return st
}

func open(tb testing.TB) runtime.Store {
	return openAt(tb, filepath.Join(tb.TempDir(), "store.db"), "")
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) runtime.Store { return open(t) },
		storetest.Durable(func(t *testing.T, s runtime.Store) runtime.Store {
			return openAt(t, s.(*sqlite.Store).Path(), "")
		}))
}

func TestOpenConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  sqlite.Config
		err  string
	}{
		{"no path", sqlite.Config{}, "Path is required"},
		{"query in path", sqlite.Config{Path: filepath.Join(dir, "a?mode=ro")}, "must not contain"},
		{"bad synchronous", sqlite.Config{Path: filepath.Join(dir, "b.db"), Synchronous: "OFF"}, "unknown Synchronous"},
		{"normal", sqlite.Config{Path: filepath.Join(dir, "c.db"), Synchronous: sqlite.SyncNormal}, ""},
		{"creates directories", sqlite.Config{Path: filepath.Join(dir, "state", "deep", "d.db"), BusyTimeout: time.Second, ReadConns: 1}, ""},
	} {
		st, err := sqlite.Open(t.Context(), tc.cfg)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.NoError(t, st.Close(), tc.name)
		require.NoError(t, st.Close(), "%s: Close twice", tc.name)
		require.FileExists(t, tc.cfg.Path, tc.name)
	}
}

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")

	// Several processes (here: stores) opening a new file at once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	stores := make([]*sqlite.Store, 4)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = sqlite.Open(t.Context(), sqlite.Config{Path: path}) })
	}
	wg.Wait()
	for i, st := range stores {
		require.NoError(t, errs[i])
		require.NoError(t, st.Close())
	}
	// And again, later.
	st := openAt(t, path, "")
	require.NoError(t, st.Close())

	db := rawDB(t, path)
	var n, version int
	require.NoError(t, db.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &version))
	require.Equal(t, sqlite.SchemaVersion(), n, "one row per migration")
	require.Equal(t, sqlite.SchemaVersion(), version)
	var mode string
	require.NoError(t, db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)

	// A file from a newer build is refused, not damaged.
	_, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, sqlite.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = sqlite.Open(t.Context(), sqlite.Config{Path: path})
	require.ErrorContains(t, err, "newer than this build")
}

// TestStoredBytes measures how the file grows with events and checkpoints
// (docs/stores.md quotes it): linearly, and not at all when a node's
// checkpoint is overwritten — there is no whole-state snapshot per step.
func TestStoredBytes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "size.db")
	const n = 400
	ctx := t.Context()

	size := func() int64 {
		t.Helper()
		fi, err := os.Stat(path)
		require.NoError(t, err)
		_, err = os.Stat(path + "-wal")
		require.True(t, os.IsNotExist(err), "closing the store checkpoints and removes the WAL")
		return fi.Size()
	}
	// phase opens the store, runs fn, closes it (folding the WAL into the
	// file) and returns the file's growth.
	phase := func(fn func(st *sqlite.Store)) int64 {
		before := int64(0)
		if _, err := os.Stat(path); err == nil {
			before = size()
		}
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path, Synchronous: sqlite.SyncNormal})
		require.NoError(t, err)
		fn(st)
		require.NoError(t, st.Close())
		return size() - before
	}
	run := &runtime.RunRecord{ID: "01JDQ5Z8X4K9M2N7P3R6S8T0VW", RootID: "01JDQ5Z8X4K9M2N7P3R6S8T0VW", GraphID: "support-bot",
		Status: runtime.RunRunning, EntryNodeIDs: []string{"start"}, CreatedAt: time.Now(), UpdatedAt: time.Now()}
	var seq int64
	appendEvents := func(st *sqlite.Store) {
		for range n / 25 {
			evs := make([]runtime.Event, 25)
			for i := range evs {
				seq++
				evs[i] = runtime.Event{Seq: seq, RunID: run.ID, Type: runtime.EventNodeCompleted, NodeID: fmt.Sprintf("node-%04d", seq),
					Attempt: 1, Time: time.Now(), Data: runtime.NodeCompletedData{
						Output: map[string]any{"text": "a short answer from the model", "tokens": 42}, DurationMs: 12.5}}
			}
			require.NoError(t, st.AppendEvents(ctx, run.ID, 0, evs))
		}
	}
	var node int
	saveCheckpoints := func(fresh bool) func(st *sqlite.Store) {
		return func(st *sqlite.Store) {
			for i := range n {
				id := i
				if fresh {
					node++
					id = node
				}
				require.NoError(t, st.SaveCheckpoint(ctx, &runtime.Checkpoint{
					RunID: run.ID, NodeID: fmt.Sprintf("node-%04d", id), Status: runtime.NodeSucceeded, PlanVersion: 1,
					InputsHash: "sha256:9f86d081884c7d659a2feaa0c55ad015", Effect: runtime.EffectPure,
					Output:  map[string]any{"text": "a short answer from the model", "tokens": 42},
					Attempt: 1, AttemptID: fmt.Sprintf("att-%04d-1", id), StartedAt: time.Now(), UpdatedAt: time.Now(), // never identical bytes
				}))
			}
		}
	}

	phase(func(st *sqlite.Store) { require.NoError(t, st.CreateRun(ctx, run)) })
	cp1 := phase(saveCheckpoints(true))
	cp2 := phase(saveCheckpoints(true))
	overwrite := phase(saveCheckpoints(false))
	// The first events allocate the pages of the event tail too, which
	// every later phase reuses (Open empties the tail): measure after it.
	phase(appendEvents)
	ev1 := phase(appendEvents)
	ev2 := phase(appendEvents)

	perEvent := float64(ev1+ev2) / (2 * n)
	perCheckpoint := float64(cp1+cp2) / (2 * n)
	t.Logf("sqlite stored bytes: %.0f B/event (first %d: %d B, next %d: %d B)", perEvent, n, ev1, n, ev2)
	t.Logf("sqlite stored bytes: %.0f B/checkpoint (first %d nodes: %d B, next %d: %d B); overwriting %d checkpoints: %d B",
		perCheckpoint, n, cp1, n, cp2, n, overwrite)

	// Linear: the second thousand costs what the first did (page rounding aside).
	require.InDelta(t, 1.0, float64(ev2)/float64(ev1), 0.25, "events: %d then %d bytes", ev1, ev2)
	require.InDelta(t, 1.0, float64(cp2)/float64(cp1), 0.25, "checkpoints: %d then %d bytes", cp1, cp2)
	// Upserts of existing nodes reuse their rows.
	require.Less(t, overwrite, cp1/10, "overwriting checkpoints grew the file by %d bytes", overwrite)
}

func BenchmarkAppendEvent(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchAppendEvent(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

func BenchmarkSaveCheckpoint(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchSaveCheckpoint(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

func BenchmarkWriteBatch(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchWriteBatch(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

func BenchmarkGroupCommit(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchGroupCommit(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

func BenchmarkStartsAndEnds(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchStartsAndEnds(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

func BenchmarkRenewLeases(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			storetest.BenchRenewLeases(b, func(tb testing.TB) runtime.Store {
				return openAt(tb, filepath.Join(tb.TempDir(), "bench.db"), sync)
			})
		})
	}
}

// ObserveSyncs sees each of the store's own WAL syncs (SyncFull), one
// observation per sync that Syncs counts, and none once removed.
func TestObserveSyncs(t *testing.T) {
	t.Parallel()
	st := openAt(t, filepath.Join(t.TempDir(), "store.db"), "")
	var (
		mu   sync.Mutex
		seen []time.Duration
		errs []error
	)
	st.ObserveSyncs(func(d time.Duration, err error) {
		mu.Lock()
		seen, errs = append(seen, d), append(errs, err)
		mu.Unlock()
	})
	before := st.Syncs()
	for i := range 3 {
		require.NoError(t, st.CreateRun(t.Context(), &runtime.RunRecord{ID: fmt.Sprintf("run-%d", i),
			GraphID: "g", Status: runtime.RunRunning}))
	}
	mu.Lock()
	n := len(seen)
	for i, d := range seen {
		require.Positive(t, d)
		require.NoError(t, errs[i])
	}
	mu.Unlock()
	require.Positive(t, n, "a write at SyncFull is synced by the store")
	require.Equal(t, st.Syncs()-before, uint64(n), "one observation per sync")

	st.ObserveSyncs(nil)
	require.NoError(t, st.CreateRun(t.Context(), &runtime.RunRecord{ID: "run-after", GraphID: "g", Status: runtime.RunRunning}))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, n, "not observed once removed")
}

// The store's own checkpointer copies the WAL into the database file soon
// after a transaction commits; the writer does not (its automatic
// checkpoint waits for 10,000 pages), so no commit carries that copy.
func TestWALCheckpointedOffTheWriter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ck.db")
	st := openAt(t, path, "")
	ctx := t.Context()
	size := func() int64 {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Size()
	}
	before := size()
	var batches []runtime.WriteBatch
	for i := range 50 {
		id := fmt.Sprintf("r%02d", i)
		require.NoError(t, st.CreateRun(ctx, &runtime.RunRecord{ID: id, Status: runtime.RunRunning, CreatedAt: time.Now(), UpdatedAt: time.Now()}))
		batches = append(batches, runtime.WriteBatch{RunID: id, Events: []runtime.Event{{Seq: 1, RunID: id, Type: "node_delta",
			Time: time.Now(), Data: map[string]string{"text": strings.Repeat("x", 4000)}}}})
	}
	require.NoError(t, st.WriteBatches(ctx, batches))
	require.Eventually(t, func() bool { return size() >= before+150_000 }, 10*time.Second, 20*time.Millisecond,
		"the database file stayed at %d bytes (was %d): the WAL was not checkpointed", size(), before)
}

// Under commits that come one after another, the WAL is still written
// from its start again, well before the writer's safety net (10,000
// pages) would copy it inside a commit: the checkpointer finishes its
// checkpoints holding the writer (the WAL peaked at 3,100–5,500 pages in
// five runs). Without that the WAL file grows to the safety net's size
// (10,061 pages).
func TestWALRestartsUnderSteadyCommits(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "steady.db")
	st := openAt(t, path, "")
	ctx := t.Context()
	require.NoError(t, st.CreateRun(ctx, &runtime.RunRecord{ID: "r", Status: runtime.RunRunning, CreatedAt: time.Now(), UpdatedAt: time.Now()}))
	// Each commit's event spills over a page of its own: 6,000 commits
	// write at least 18,000 pages to the WAL (its page, the tail's leaf
	// and the run's row), nearly two safety nets' worth.
	data := map[string]string{"text": strings.Repeat("x", 4096)}
	for seq := int64(1); seq <= 6000; seq++ {
		require.NoError(t, st.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "r", Events: []runtime.Event{{Seq: seq, RunID: "r",
			Type: "node_delta", Time: time.Now(), Data: data}}}}))
	}
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(9600*4096), "the WAL grew to %d pages", fi.Size()/4096)
}

// When one run's events in a group commit of many runs do not continue
// its log, the error names that run and the seq its log expects, wherever
// the run sits in the commit, and nothing of the call is kept.
func TestWriteBatchesNamesTheRefusedRun(t *testing.T) {
	t.Parallel()
	st := open(t).(*sqlite.Store)
	ctx := t.Context()
	const runs = 100
	ev := func(runID string, seq int64) []runtime.Event {
		return []runtime.Event{{RunID: runID, Seq: seq, Type: "progress", NodeID: "n", Attempt: 1, Time: time.Now()}}
	}
	calls := func(bad int, badSeq int64) []runtime.WriteBatch {
		var bs []runtime.WriteBatch
		for i := range runs {
			id := fmt.Sprintf("r%03d", i)
			seq := int64(2)
			if i == bad {
				seq = badSeq
			}
			bs = append(bs, runtime.WriteBatch{RunID: id, Events: ev(id, seq)})
		}
		return bs
	}
	for i := range runs {
		id := fmt.Sprintf("r%03d", i)
		require.NoError(t, st.CreateRun(ctx, &runtime.RunRecord{ID: id, Status: runtime.RunRunning, CreatedAt: time.Now(), UpdatedAt: time.Now()}))
		require.NoError(t, st.AppendEvents(ctx, id, 0, ev(id, 1)))
	}
	for _, tc := range []struct {
		name string
		bad  int
		seq  int64
		want string
	}{
		{"repeated seq, early in the commit", 3, 1, "run r003 expects seq 2, got 1"},
		{"repeated seq, late in the commit", 80, 1, "run r080 expects seq 2, got 1"},
		{"gap, at the end", 97, 3, "run r097 expects seq 2, got 3"},
	} {
		err := st.WriteBatches(ctx, calls(tc.bad, tc.seq))
		require.ErrorIs(t, err, runtime.ErrSeqConflict, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		for i := range runs {
			r, err := st.GetRun(ctx, fmt.Sprintf("r%03d", i))
			require.NoError(t, err)
			require.Equal(t, int64(1), r.LastSeq, tc.name)
		}
	}
	require.NoError(t, st.WriteBatches(ctx, calls(-1, 0)))
	evs, err := st.Events(ctx, "r099", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
}
