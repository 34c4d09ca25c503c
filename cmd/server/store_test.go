package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// A state dir of the two-file layout (runs.db, chats.db) opens as one
// chatgraph.db with every run, graph, chat and message, once.
func TestOpenStoresAdoptsRunsAndChatsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Now().UTC()

	runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(dir, oldRunsFile)})
	require.NoError(t, err)
	require.NoError(t, runs.CreateRun(ctx, &runtime.RunRecord{ID: "r1", RootID: "r1", ChatID: "c1", GraphID: "g1", PlanVersion: 1,
		Status: runtime.RunCompleted, CreatedAt: now, UpdatedAt: now}))
	require.NoError(t, runs.Close())
	// chats.db held the same chat tables the chat store creates.
	host, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(dir, oldChatsFile)})
	require.NoError(t, err)
	old, err := chatsqlite.Open(ctx, host)
	require.NoError(t, err)
	require.NoError(t, old.CreateGraph(ctx, &chat.Graph{ID: "g1", Name: "hello", Body: []byte(`{"nodes":[],"edges":[]}`)}))
	require.NoError(t, old.CreateChat(ctx, &chat.Chat{ID: "c1", GraphID: "g1", Title: "first"}, 0))
	u := &chat.Message{ID: "m1", Role: chat.RoleUser, Content: "hi", RunID: "r1", TurnRunID: "r1", Status: chat.StatusCompleted}
	a := &chat.Message{ID: "m2", ParentID: "m1", Role: chat.RoleAssistant, Content: "echo: hi", RunID: "r1", TurnRunID: "r1",
		Status: chat.StatusPending}
	require.NoError(t, old.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: "m2", Messages: []*chat.Message{u, a},
		Run: &runtime.RunRecord{ID: "r_elsewhere", RootID: "r_elsewhere", Status: runtime.RunPending, CreatedAt: now, UpdatedAt: now}}))
	a.Status = chat.StatusCompleted
	require.NoError(t, old.FinishMessage(ctx, a))
	require.NoError(t, old.Close())
	require.NoError(t, host.Close())

	c := &config{stateDir: dir}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 { // the second open finds one file and changes nothing
		st, err := openStores(ctx, c, log)
		require.NoError(t, err)
		rec, err := st.runs.GetRun(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, rec.Status)
		g, err := st.chats.GetGraph(ctx, "g1")
		require.NoError(t, err)
		require.Equal(t, "hello", g.Name)
		ch, err := st.chats.GetChat(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, "m2", ch.ActiveLeafID)
		msgs, err := st.chats.Messages(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, msgs, 2)
		require.Equal(t, "echo: hi", msgs[1].Content)
		require.Equal(t, chat.StatusCompleted, msgs[1].Status)
		st.close()
	}
	require.NoFileExists(t, filepath.Join(dir, oldRunsFile))
	require.NoFileExists(t, filepath.Join(dir, oldChatsFile))
	require.FileExists(t, filepath.Join(dir, oldChatsFile+".adopted"))

	// The adopted tables take new rows after the old ones.
	st, err := openStores(ctx, c, log)
	require.NoError(t, err)
	defer st.close()
	require.NoError(t, st.chats.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: "m4", Messages: []*chat.Message{
		{ID: "m3", ParentID: "m2", Role: chat.RoleUser, Content: "more", RunID: "r2", TurnRunID: "r2", Status: chat.StatusCompleted},
		{ID: "m4", ParentID: "m3", Role: chat.RoleAssistant, RunID: "r2", TurnRunID: "r2", Status: chat.StatusPending}},
		Run: &runtime.RunRecord{ID: "r2", RootID: "r2", ChatID: "c1", GraphID: "g1", PlanVersion: 1, Status: runtime.RunPending,
			CreatedAt: now, UpdatedAt: now}}))
	msgs, err := st.chats.Messages(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, []string{"m1", "m2", "m3", "m4"}, []string{msgs[0].ID, msgs[1].ID, msgs[2].ID, msgs[3].ID})
	_, err = os.Stat(filepath.Join(dir, dbFile))
	require.NoError(t, err)
	// The chat tables keep their indexes (the migrations that made them
	// are recorded as applied, so they are copied, not made again).
	var indexes []string
	rows, err := st.runs.(*rsqlite.Store).ReadDB().QueryContext(ctx,
		`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('chats', 'messages') AND sql IS NOT NULL ORDER BY name`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		indexes = append(indexes, name)
	}
	require.NoError(t, rows.Close())
	require.Equal(t, []string{"chats_graph", "chats_owner", "messages_chat", "messages_unsettled"}, indexes)
}

// A bad --durability is refused before the state dir is created or any
// store is opened.
func TestBadDurabilityRefusedBeforeStoresOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	err := serve(context.Background(), Env{Getenv: func(k string) string {
		return map[string]string{"CHATGRAPH_STATE_DIR": dir}[k]
	}, Stderr: io.Discard}, []string{"--durability", "fsync-sometimes"})
	require.ErrorContains(t, err, `--durability "fsync-sometimes": want sync, batched or exit`)
	_, statErr := os.Stat(dir)
	require.True(t, os.IsNotExist(statErr), "the state dir was not created")
}

func TestBadGCPercentRefused(t *testing.T) {
	_, _, err := parseConfig("server", Env{Getenv: func(string) string { return "" }}, []string{"--gc-percent", "0"})
	require.ErrorContains(t, err, "--gc-percent 0: want at least 1")
	c, _, err := parseConfig("server", Env{Getenv: func(string) string { return "" }}, nil)
	require.NoError(t, err)
	require.Equal(t, 400, c.gcPercent)
	require.Equal(t, int64(256), c.gcHeapFloorMiB)
	require.Equal(t, 4, c.busyStartingTurns)
	require.Equal(t, 2*time.Millisecond, c.busyCommitLag)
	for _, bad := range []string{"-1", "1048577"} {
		_, _, err := parseConfig("server", Env{Getenv: func(string) string { return "" }}, []string{"--gc-heap-floor-mib", bad})
		require.ErrorContains(t, err, "--gc-heap-floor-mib "+bad+": want 0 to 1048576")
	}
}

// The server sets the garbage collector to --gc-percent, raised while the
// heap is under --gc-heap-floor-mib, unless a GOGC environment variable
// (which the Go runtime reads itself) is set.
func TestGCPercentApplied(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	t.Setenv("GOGC", "")
	startServer(t, t.TempDir(), "--gc-percent", "250", "--gc-heap-floor-mib", "0")
	require.Equal(t, 250, debug.SetGCPercent(150))

	t.Setenv("GOGC", "150")
	startServer(t, t.TempDir(), "--gc-percent", "250")
	require.Equal(t, 150, debug.SetGCPercent(150), "GOGC wins")

	// With a heap floor (the default's 256 MiB), a heap as small as a
	// test's raises the percent.
	t.Setenv("GOGC", "")
	startServer(t, t.TempDir(), "--gc-percent", "250")
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	require.Greater(t, s[0].Value.Uint64(), uint64(250))
}
