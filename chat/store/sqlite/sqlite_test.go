package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/chat"
	"chatgraph/chat/store/sqlite"
	"chatgraph/chat/store/storetest"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openAt opens a run store on path and a chat store in it, closed (chat
// store first) when the test ends.
func openAt(tb testing.TB, path string) (*sqlite.Store, *rsqlite.Store) {
	tb.Helper()
	runs, err := rsqlite.Open(tb.Context(), rsqlite.Config{Path: path})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, runs.Close()) })
	cs, err := sqlite.Open(tb.Context(), runs)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, cs.Close()) })
	return cs, runs
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (chat.Store, runtime.Store) {
		return openAt(t, filepath.Join(t.TempDir(), "chatgraph.db"))
	}, storetest.Durable(func(t *testing.T, _ chat.Store, runs runtime.Store) (chat.Store, runtime.Store) {
		return openAt(t, runs.(*rsqlite.Store).Path())
	}), storetest.Expiry(sqlite.SetNow, sqlite.Tombstones))
}

func TestOpenNeedsRunStore(t *testing.T) {
	t.Parallel()
	_, err := sqlite.Open(t.Context(), nil)
	require.ErrorContains(t, err, "run store is required")
}

// TestOneFile: the chat tables live in the run store's file, written at
// its durability (SyncFull: SQLite commits at NORMAL and the store fsyncs
// the WAL before the write returns), with their own migration record.
func TestOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "chatgraph.db")
	_, runs := openAt(t, path)
	var level int
	synced := runs.Syncs()
	require.NoError(t, runs.Update(t.Context(), func(tx *sql.Tx) error {
		return tx.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&level)
	}))
	require.Equal(t, 1, level, "NORMAL: the store syncs")
	require.Greater(t, runs.Syncs(), synced, "the write was synced before Update returned")
	tables := map[string]bool{}
	rows, err := runs.ReadDB().QueryContext(t.Context(), `SELECT name FROM sqlite_schema WHERE type = 'table'`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables[name] = true
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	for _, name := range []string{"runs", "checkpoints", "events", "effects", "schema_migrations",
		"graphs", "graph_versions", "chats", "messages", "chat_schema_migrations", "chat_data_migrations"} {
		require.True(t, tables[name], "table %s in %v", name, tables)
	}
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	// Several processes (here: pairs of stores) opening a new file at once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			runs, err := rsqlite.Open(t.Context(), rsqlite.Config{Path: path})
			if err != nil {
				errs[i] = err
				return
			}
			defer runs.Close()
			_, errs[i] = sqlite.Open(t.Context(), runs)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	_, runs := openAt(t, path) // and again, later
	ctx := t.Context()
	var versions []int
	rows, err := runs.ReadDB().QueryContext(ctx, `SELECT version FROM chat_schema_migrations ORDER BY version`)
	require.NoError(t, err)
	for rows.Next() {
		var v int
		require.NoError(t, rows.Scan(&v))
		versions = append(versions, v)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, versions, "one row per migration")
	require.Equal(t, sqlite.SchemaVersion(), versions[len(versions)-1])

	// A file from a newer build is refused, not damaged.
	require.NoError(t, runs.Update(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO chat_schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`,
			sqlite.SchemaVersion()+1)
		return err
	}))
	_, err = sqlite.Open(ctx, runs)
	require.ErrorContains(t, err, "newer than this build")
}

// TestGraphsNamedUsesIndex: looking a graph up by name (GraphsNamed's
// query) searches the partial index graphs_name instead of scanning every
// graph.
func TestGraphsNamedUsesIndex(t *testing.T) {
	t.Parallel()
	_, runs := openAt(t, filepath.Join(t.TempDir(), "chatgraph.db"))
	rows, err := runs.ReadDB().QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+sqlite.GraphsNamedQuery, "x", 2)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Contains(t, plan, "SEARCH graphs USING INDEX graphs_name (name=?)")
}

// BenchmarkGetChat reads one chat by id with a request's context (one
// that can be cancelled), as every turn does.
func BenchmarkGetChat(b *testing.B) {
	cs, _ := openAt(b, filepath.Join(b.TempDir(), "chatgraph.db"))
	require.NoError(b, cs.CreateGraph(b.Context(), &chat.Graph{ID: "g1", Name: "g", Body: json.RawMessage(`{}`)}))
	require.NoError(b, cs.CreateChat(b.Context(), &chat.Chat{ID: "c1", GraphID: "g1"}, 0))
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cs.GetChat(ctx, "c1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTurnWrites applies the joined writes of 16 chat turns in one
// transaction of the run store's writer, as a group commit carries them:
// each turn's TurnWrite (the chat's update, the user's message and the
// assistant's pending one), then in a second transaction each answer's
// FinishWrite. It reports µs/turn: what a turn's chat writes cost the
// writer, the two transactions' own cost shared.
func BenchmarkTurnWrites(b *testing.B) {
	const perCommit = 16
	// Without the WAL's sync, which the run store's group commits wait
	// for off the writer: the writes' own cost.
	runs, err := rsqlite.Open(b.Context(), rsqlite.Config{Path: filepath.Join(b.TempDir(), "chatgraph.db"), Synchronous: rsqlite.SyncNormal})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, runs.Close()) })
	cs, err := sqlite.Open(b.Context(), runs)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, cs.Close()) })
	ctx := b.Context()
	require.NoError(b, cs.CreateGraph(ctx, &chat.Graph{ID: "g1", Name: "g", Body: json.RawMessage(`{}`)}))
	chats := make([]string, perCommit)
	for i := range chats {
		chats[i] = fmt.Sprintf("c%d", i)
		require.NoError(b, cs.CreateChat(ctx, &chat.Chat{ID: chats[i], GraphID: "g1"}, 0))
	}
	apply := func(writes []any) {
		require.NoError(b, runs.Update(ctx, func(tx *sql.Tx) error {
			for _, w := range writes {
				if err := w.(rsqlite.Write)(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	n := 0
	for b.Loop() {
		var begins, finishes []any
		for _, chatID := range chats {
			n++
			user := &chat.Message{ID: fmt.Sprintf("u%d", n), Role: chat.RoleUser, Content: "hello", Status: chat.StatusCompleted}
			answer := &chat.Message{ID: fmt.Sprintf("a%d", n), ParentID: user.ID, Role: chat.RoleAssistant, Status: chat.StatusPending,
				RunID: fmt.Sprintf("r%d", n)}
			begins = append(begins, cs.TurnWrite(chat.Turn{ChatID: chatID, ActiveLeafID: answer.ID, Messages: []*chat.Message{user, answer}}))
			done := *answer
			done.ChatID, done.Content, done.Status = chatID, "hello there", chat.StatusCompleted
			finishes = append(finishes, cs.FinishWrite(&done))
		}
		apply(begins)
		apply(finishes)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "µs/turn")
}
