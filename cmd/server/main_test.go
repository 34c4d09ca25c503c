package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(childServer())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// server is one Main process of the test.
type server struct {
	url  string
	stop context.CancelFunc
	done chan error
	out  *bytes.Buffer
}

func startServer(t *testing.T, stateDir string, extra ...string) *server {
	t.Helper()
	return startServerEnv(t, stateDir, nil, extra...)
}

// startServerEnv starts a server whose environment also has vars.
func startServerEnv(t *testing.T, stateDir string, vars map[string]string, extra ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	s := &server{stop: cancel, done: make(chan error, 1), out: &bytes.Buffer{}}
	env := map[string]string{"CHATGRAPH_ADDR": "127.0.0.1:0", "CHATGRAPH_STATE_DIR": stateDir, "CHATGRAPH_LOG_LEVEL": "warn"}
	for k, v := range vars {
		env[k] = v
	}
	go func() {
		s.done <- Main(ctx, Env{Args: append([]string{"server", "--rate-limit", "-1"}, extra...),
			Getenv: func(k string) string { return env[k] }, Stdout: s.out, Stderr: io.Discard,
			Ready: func(u string) { ready <- u }})
	}()
	select {
	case s.url = <-ready:
	case err := <-s.done:
		t.Fatalf("server did not start: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("server did not start")
	}
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

func (s *server) shutdown(t *testing.T) {
	s.stop()
	select {
	case err, ok := <-s.done:
		if ok {
			require.NoError(t, err)
			close(s.done)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
}

func call(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

func graph(agentData string) map[string]any {
	return map[string]any{
		"name": "e2e",
		"nodes": []any{
			map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
			map[string]any{"id": "a1", "type": "agent", "position": map[string]any{"x": 200, "y": 0}, "data": json.RawMessage(agentData)},
			map[string]any{"id": "out", "type": "chat_output", "position": map[string]any{"x": 400, "y": 0}, "data": map[string]any{}},
		},
		"edges": []any{
			map[string]any{"id": "e1", "source": "start", "sourceHandle": "message", "target": "a1", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
			map[string]any{"id": "e2", "source": "a1", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
		},
	}
}

func newChat(t *testing.T, base, agentData string) string {
	var g, c map[string]any
	require.Equal(t, http.StatusCreated, call(t, "POST", base+"/api/v1/graphs", graph(agentData), &g))
	require.Equal(t, http.StatusCreated, call(t, "POST", base+"/api/v1/chats", map[string]any{"graphId": g["id"]}, &c))
	return c["id"].(string)
}

// sse posts a chat call with Accept: text/event-stream and returns the
// event types with their seqs.
func sse(t *testing.T, url string, body any) (types []string, seqs []int64) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			var ev struct {
				Seq  int64
				Type string
			}
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev))
			types, seqs = append(types, ev.Type), append(seqs, ev.Seq)
		}
	}
	return types, seqs
}

func TestMainServesAndStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	require.Contains(t, s.out.String(), "chatgraph listening on "+s.url)
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/healthz", nil, nil))
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/readyz", nil, nil))
	chatID := newChat(t, s.url, `{"name":"Helper"}`)

	types, seqs := sse(t, s.url+"/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "over sse"})
	require.Equal(t, "run_started", types[0])
	require.Equal(t, "run_completed", types[len(types)-1])
	for i, seq := range seqs {
		require.EqualValues(t, i+1, seq)
	}

	// The same over a real WebSocket client.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/api/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{"chatgraph.v1"}})
	require.NoError(t, err)
	defer conn.CloseNow()
	frame, _ := json.Marshal(map[string]any{"id": "w1", "type": "stream_chat", "chatId": chatID, "content": "over ws"})
	require.NoError(t, conn.Write(ctx, websocket.MessageText, frame))
	var last int64
	for {
		_, b, err := conn.Read(ctx)
		require.NoError(t, err)
		var f struct {
			Type  string
			Event struct {
				Seq  int64
				Type string
			}
		}
		require.NoError(t, json.Unmarshal(b, &f))
		if f.Type != "event" {
			require.Equal(t, "ack", f.Type)
			continue
		}
		require.Equal(t, last+1, f.Event.Seq)
		last = f.Event.Seq
		if f.Event.Type == "run_completed" {
			break
		}
	}
	require.NoError(t, conn.Close(websocket.StatusNormalClosure, ""))

	var c map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/api/v1/chats/"+chatID, nil, &c))
	require.Len(t, c["messages"], 4)
	s.shutdown(t)

	// Everything is still there after a restart.
	s2 := startServer(t, dir)
	require.Equal(t, http.StatusOK, call(t, "GET", s2.url+"/api/v1/chats/"+chatID, nil, &c))
	require.Len(t, c["messages"], 4)
	msgs := c["messages"].([]any)
	runID := msgs[1].(map[string]any)["runId"].(string)
	var run map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", s2.url+"/api/v1/runs/"+runID, nil, &run))
	require.Equal(t, "completed", run["status"])
	types, _ = sseGet(t, s2.url+"/api/v1/runs/"+runID+"/events?after=2")
	require.Equal(t, "run_completed", types[len(types)-1])
}

func sseGet(t *testing.T, url string) (types []string, seqs []int64) {
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			var ev struct {
				Seq  int64
				Type string
			}
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev))
			types, seqs = append(types, ev.Type), append(seqs, ev.Seq)
		}
	}
	return types, seqs
}

// A run still going at shutdown is cancelled with cause shutdown and
// continued by the next start.
func TestMainContinuesRunsCancelledAtShutdown(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, "--drain-timeout", "50ms")
	chatID := newChat(t, s.url, `{"name":"Helper","tokenDelayMs":20}`)
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", s.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("w ", 60)}, &tk))
	mid := tk["messageId"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c map[string]any
		call(t, "GET", s.url+"/api/v1/chats/"+chatID, nil, &c)
		if c["messages"].([]any)[1].(map[string]any)["status"] == "running" {
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(10 * time.Millisecond)
	}
	s.shutdown(t)

	s2 := startServer(t, dir)
	deadline = time.Now().Add(15 * time.Second)
	for {
		var c map[string]any
		call(t, "GET", s2.url+"/api/v1/chats/"+chatID, nil, &c)
		m := c["messages"].([]any)[1].(map[string]any)
		require.Equal(t, mid, m["id"])
		if m["status"] == "completed" {
			require.Equal(t, "echo: "+strings.Repeat("w ", 60), m["content"])
			require.NotEqual(t, tk["runId"], m["runId"], "continued in a new run")
			var run map[string]any
			call(t, "GET", s2.url+"/api/v1/runs/"+m["runId"].(string), nil, &run)
			require.Equal(t, tk["runId"], run["parentRunId"])
			break
		}
		require.True(t, time.Now().Before(deadline), "message status %v", m["status"])
		time.Sleep(20 * time.Millisecond)
	}
}

// metricsText reads the server's /metrics (the Prometheus text format).
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return string(body)
}

// /metrics times the SQLite store's own WAL syncs beside its calls: a
// write (saving a graph) is synced, and the sync observed.
func TestMetricsTimeTheStoresSyncs(t *testing.T) {
	s := startServer(t, t.TempDir())
	newChat(t, s.url, `{"model":"echo"}`)
	var count float64
	for _, line := range strings.Split(metricsText(t, s.url), "\n") {
		if rest, ok := strings.CutPrefix(line, `chatgraph_store_operation_duration_seconds_count{op="wal_sync",store="runs"} `); ok {
			n, err := strconv.ParseFloat(rest, 64)
			require.NoError(t, err)
			count = n
		}
	}
	require.Positive(t, count, "/metrics counts no WAL sync")
}

// /metrics counts the engine's group commits by stage: a chat turn in
// the default sync mode is committed, synced and published in them.
func TestMetricsTimeTheGroupCommits(t *testing.T) {
	s := startServer(t, t.TempDir())
	chatID := newChat(t, s.url, `{"name":"Helper"}`)
	types, _ := sse(t, s.url+"/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hello"})
	require.Equal(t, "run_completed", types[len(types)-1])
	counts := map[string]float64{}
	for _, line := range strings.Split(metricsText(t, s.url), "\n") {
		for _, stage := range []string{"written", "durable", "published"} {
			if rest, ok := strings.CutPrefix(line, `chatgraph_group_commit_duration_seconds_count{stage="`+stage+`"} `); ok {
				n, err := strconv.ParseFloat(rest, 64)
				require.NoError(t, err)
				counts[stage] = n
			}
		}
		if rest, ok := strings.CutPrefix(line, "chatgraph_group_commit_runs_sum "); ok {
			n, err := strconv.ParseFloat(rest, 64)
			require.NoError(t, err)
			counts["runs"] = n
		}
	}
	require.Positive(t, counts["published"], "/metrics counts no group commit")
	require.Equal(t, counts["published"], counts["written"])
	require.Equal(t, counts["published"], counts["durable"])
	require.GreaterOrEqual(t, counts["runs"], counts["published"], "every commit carries a run's writes")
}

// /metrics carries the scheduler's metrics beside the Go collector's
// defaults: the goroutines the server started (what make bench-server
// divides by the turns) and scheduling latencies.
func TestMetricsExposeTheScheduler(t *testing.T) {
	s := startServer(t, t.TempDir())
	body := metricsText(t, s.url)
	for _, name := range []string{"\ngo_sched_goroutines_created_goroutines_total ", "\ngo_sched_latencies_seconds_count ",
		"\ngo_goroutines ", "\nchatgraph_runs_active "} {
		require.True(t, strings.Contains(body, name), "/metrics lacks %s", strings.TrimSpace(name))
	}
}
