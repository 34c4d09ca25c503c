package main

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rsqlite "chatgraph/runtime/store/sqlite"
)

// A server reachable from other machines needs a token, or an explicit
// --insecure-no-auth.
func TestNonLoopbackAddrNeedsToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080", "example.com:80"} {
		env := map[string]string{"CHATGRAPH_ADDR": addr, "CHATGRAPH_STATE_DIR": t.TempDir()}
		// A server that starts anyway stops at the deadline and returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := Main(ctx, Env{Args: []string{"server"}, Getenv: func(k string) string { return env[k] }})
		cancel()
		require.ErrorContains(t, err, "--insecure-no-auth", addr)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		require.True(t, loopbackAddr(addr), addr)
	}
	// With a token, or with the explicit flag, it starts.
	s := startServer(t, t.TempDir(), "--addr", "0.0.0.0:0", "--insecure-no-auth")
	require.NotEmpty(t, s.url)
}

// The listener accepts at most --max-connections at once; the next waits
// until one closes.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir(), "--max-connections", "2")
	addr := s.url[len("http://"):]
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	// Both slots are taken: a request gets no answer while they are held.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/healthz", nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err, "a third connection is not served while two are held")
	_ = held[0].Close()
	held = held[1:]
	resp, err := http.Get(s.url + "/healthz")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Chats and runs share one SQLite file and its one writer connection, so
// an acknowledged chat message is as durable as the run it starts: both
// commit with synchronous=FULL (2) by default.
func TestChatAndRunWritesAreBothSynchronousFull(t *testing.T) {
	t.Parallel()
	c, _, err := parseConfig("server", Env{Getenv: func(k string) string {
		return map[string]string{"CHATGRAPH_STATE_DIR": t.TempDir()}[k]
	}}, nil)
	require.NoError(t, err)
	st, err := openStores(t.Context(), c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer st.close()
	runs, ok := st.runs.(*rsqlite.Store)
	require.True(t, ok)
	// The chat store writes through runs.Update (chat/store/sqlite): the
	// durability of that connection's writes is every chat write's. At
	// SyncFull SQLite commits at NORMAL and the store fsyncs the WAL
	// before the write returns.
	var level int
	synced := runs.Syncs()
	require.NoError(t, runs.Update(t.Context(), func(tx *sql.Tx) error {
		return tx.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&level)
	}))
	require.Equal(t, 1, level, "NORMAL: the store syncs")
	require.Greater(t, runs.Syncs(), synced, "the write was synced before Update returned")
}
