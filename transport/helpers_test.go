package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
	"chatgraph/transport"
)

// env is one test server and a client for it.
type env struct {
	t     testing.TB
	srv   *transport.Server
	http  *httptest.Server
	url   string
	token string
	store runtime.Store
	chats chat.Store
}

// transportConfig is what a test may change: the transport's config and
// the engine's and chat service's knobs.
type transportConfig struct {
	transport.Config
	Engine            runtime.Config
	Nodes             nodes.Deps
	MaxRuns           int
	MaxRunsPerClient  int
	MaxChatsPerClient int
	MaxStartingTurns  int
	BusyStartingTurns int
	BusyCommitLag     time.Duration
	Retention         time.Duration
	RetentionInterval time.Duration
	DrainTimeout      time.Duration
	// Models resolves agents' models (default: echo only).
	Models *llm.Models
	// WrapChats, when set, wraps the chat store the service uses.
	WrapChats func(*chatsqlite.Store) chat.Store
	// WrapControl, when set, wraps the run controller the service uses.
	WrapControl func(runcontrol.Controller) runcontrol.Controller
}

type option func(*transportConfig)

func newEnv(t *testing.T, opts ...option) *env { return newEnvTB(t, opts...) }

func newEnvTB(t testing.TB, opts ...option) *env {
	t.Helper()
	cfg := transportConfig{Config: transport.Config{RateLimit: -1, Heartbeat: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond},
		DrainTimeout: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	deps := cfg.Nodes
	if cfg.Models != nil {
		deps.Models = cfg.Models
	}
	if deps.Tools == nil {
		deps.Tools = tools.NewRegistry()
		require.NoError(t, tools.RegisterBuiltins(deps.Tools, tools.Config{}))
	}
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, deps))
	st, err := rsqlite.Open(context.Background(), rsqlite.Config{Path: filepath.Join(t.TempDir(), "chatgraph.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	sqliteChats, err := chatsqlite.Open(context.Background(), st)
	require.NoError(t, err)
	var chats chat.Store = sqliteChats
	if cfg.WrapChats != nil {
		chats = cfg.WrapChats(sqliteChats)
	}
	var ctl runcontrol.Controller = runcontrol.NewMemory(runcontrol.MemoryConfig{})
	if cfg.WrapControl != nil {
		ctl = cfg.WrapControl(ctl)
	}
	ecfg := cfg.Engine
	ecfg.Registry, ecfg.Store = reg, st
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	observe := transport.StoreObserver(cfg.Metrics)
	if extra := cfg.Engine.StoreObserver; extra != nil {
		ecfg.StoreObserver = func(op string, d time.Duration, err error) { observe(op, d, err); extra(op, d, err) }
	} else {
		ecfg.StoreObserver = observe
	}
	observeCommit := transport.CommitObserver(cfg.Metrics)
	if extra := cfg.Engine.CommitObserver; extra != nil {
		ecfg.CommitObserver = func(gc runtime.GroupCommit) { observeCommit(gc); extra(gc) }
	} else {
		ecfg.CommitObserver = observeCommit
	}
	eng, err := runtime.NewEngine(ecfg)
	require.NoError(t, err)
	svc, err := chat.New(chat.Config{Engine: eng, Store: chats, Control: ctl, MaxRuns: cfg.MaxRuns, Retention: cfg.Retention,
		MaxRunsPerClient: cfg.MaxRunsPerClient, MaxChatsPerClient: cfg.MaxChatsPerClient, MaxStartingTurns: cfg.MaxStartingTurns, BusyStartingTurns: cfg.BusyStartingTurns, BusyCommitLag: cfg.BusyCommitLag, Tools: deps.Tools, RetentionInterval: cfg.RetentionInterval, DrainTimeout: cfg.DrainTimeout})
	require.NoError(t, err)
	cfg.Chat = svc
	srv, err := transport.New(cfg.Config)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	e := &env{t: t, srv: srv, http: hs, url: hs.URL, token: cfg.Token, store: st, chats: chats}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		hs.Close()
		_ = chats.Close()
	})
	return e
}

// do sends a JSON request (with the headers given) and decodes a JSON
// answer into out (if not nil).
func (e *env) do(method, path string, body any, out any, header ...map[string]string) *http.Response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for _, h := range header {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	if out != nil {
		require.NoError(e.t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp
}

func (e *env) mustStatus(resp *http.Response, want int) {
	e.t.Helper()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, want, b)
	}
}

// basicGraph is chat_start -> agent -> chat_output.
func basicGraph(agentData string) map[string]any {
	if agentData == "" {
		agentData = `{"name":"Helper"}`
	}
	return map[string]any{
		"name": "basic",
		"nodes": []any{
			map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
			map[string]any{"id": "a1", "type": "agent", "position": map[string]any{"x": 200, "y": 0}, "data": json.RawMessage(agentData)},
			map[string]any{"id": "out", "type": "chat_output", "position": map[string]any{"x": 400, "y": 0}, "data": map[string]any{}},
		},
		"edges": []any{
			edge("e1", "start", "message", "a1", "input", "flow"),
			edge("e2", "a1", "output", "out", "input", "flow"),
		},
	}
}

func edge(id, src, sh, dst, th, channel string) map[string]any {
	e := map[string]any{"id": id, "source": src, "sourceHandle": sh, "target": dst, "targetHandle": th, "data": map[string]any{}}
	if channel != "" {
		e["data"] = map[string]any{"channel": channel}
	}
	return e
}

// newChat saves g and creates a chat with it.
func (e *env) newChat(g map[string]any) (graphID, chatID string) {
	e.t.Helper()
	var gr map[string]any
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, &gr), http.StatusCreated)
	var ch map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": gr["id"]}, &ch), http.StatusCreated)
	return gr["id"].(string), ch["id"].(string)
}

// sseEvent is one parsed SSE frame.
type sseEvent struct {
	ID    int64
	Type  string
	Data  map[string]any
	Raw   string
	Heart bool
}

// sseStream reads SSE frames from a response body.
type sseStream struct {
	resp *http.Response
	rd   *bufio.Reader
}

// openSSE sends a request that answers with SSE.
func (e *env) openSSE(ctx context.Context, method, path string, body any, header map[string]string) *sseStream {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	require.NoError(e.t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.t.Fatalf("SSE %s: status %d: %s", path, resp.StatusCode, b)
	}
	require.Equal(e.t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(e.t, "no", resp.Header.Get("X-Accel-Buffering"))
	e.t.Cleanup(func() { resp.Body.Close() })
	return &sseStream{resp: resp, rd: bufio.NewReader(resp.Body)}
}

// next returns the next event frame (comments are skipped, or returned
// with Heart set when heartbeats is true); io.EOF at the end.
func (s *sseStream) next(heartbeats bool) (*sseEvent, error) {
	ev := &sseEvent{}
	has := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if has {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			if heartbeats && strings.Contains(line, "ping") {
				return &sseEvent{Heart: true}, nil
			}
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseInt(line[4:], 10, 64)
			if err != nil {
				return nil, err
			}
			ev.ID, has = n, true
		case strings.HasPrefix(line, "event: "):
			ev.Type, has = line[7:], true
		case strings.HasPrefix(line, "data: "):
			ev.Raw = line[6:]
			if err := json.Unmarshal([]byte(ev.Raw), &ev.Data); err != nil {
				return nil, fmt.Errorf("bad data %q: %w", ev.Raw, err)
			}
			has = true
		}
	}
}

// all reads every event to the end of the stream.
func (s *sseStream) all(t *testing.T) []*sseEvent {
	t.Helper()
	var out []*sseEvent
	for {
		ev, err := s.next(false)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, ev)
	}
}

func types(evs []*sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// requireGapFree checks seq starts after `after`, has no gap and matches the SSE id.
func requireGapFree(t *testing.T, evs []*sseEvent, after int64) {
	t.Helper()
	for i, ev := range evs {
		require.EqualValues(t, after+int64(i)+1, ev.ID, "event %d (%s)", i, ev.Type)
		require.EqualValues(t, ev.ID, ev.Data["seq"])
		require.Equal(t, ev.Type, ev.Data["type"])
	}
}

// metric reads one sample of the server's /metrics: the value of the
// series (a name with its labels, as the text format writes it), 0 when
// the server has none yet.
func (e *env) metric(series string) float64 {
	e.t.Helper()
	return e.metrics()[series]
}

// metrics reads every sample of the server's /metrics, by series.
func (e *env) metrics() map[string]float64 {
	e.t.Helper()
	resp := e.do("GET", "/metrics", nil, nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(e.t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		// The value follows the last space (a label's value may hold one).
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			n, err := strconv.ParseFloat(line[i+1:], 64)
			require.NoError(e.t, err, line)
			out[line[:i]] = n
		}
	}
	return out
}

// waitFor polls cond until it holds or the bound passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, 10*time.Second, cond)
}

// waitForWithin is waitFor with a bound of its own.
func waitForWithin(t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// chat returns GET /chats/{id}.
func (e *env) chat(id string) map[string]any {
	var c map[string]any
	e.mustStatus(e.do("GET", "/api/v1/chats/"+id, nil, &c), http.StatusOK)
	return c
}

func messages(c map[string]any) []map[string]any {
	var out []map[string]any
	for _, m := range c["messages"].([]any) {
		out = append(out, m.(map[string]any))
	}
	return out
}

func message(c map[string]any, id string) map[string]any {
	for _, m := range messages(c) {
		if m["id"] == id {
			return m
		}
	}
	return nil
}

// waitMessage waits until message id of the chat leaves pending/running.
func (e *env) waitMessage(chatID, id string) map[string]any {
	e.t.Helper()
	var m map[string]any
	waitFor(e.t, "message "+id+" to finish", func() bool {
		m = message(e.chat(chatID), id)
		return m != nil && m["status"] != "pending" && m["status"] != "running"
	})
	return m
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitRunDone waits until the server no longer holds the run.
func (e *env) waitRunDone(runID string) {
	e.t.Helper()
	waitFor(e.t, "run "+runID+" to be released", func() bool {
		var r map[string]any
		e.do("GET", "/api/v1/runs/"+runID, nil, &r)
		return r["live"] != true
	})
}

// runStatus is run id's status as GET /runs/{id} shows it (nil when it
// has none: a run that is gone).
func (e *env) runStatus(id string) any {
	var r map[string]any
	e.do("GET", "/api/v1/runs/"+id, nil, &r)
	return r["status"]
}

// waitRunStatus waits until run id has status.
func (e *env) waitRunStatus(id, status string) {
	e.t.Helper()
	waitFor(e.t, "run "+id+" to be "+status, func() bool { return e.runStatus(id) == status })
}

// joined is the answer to a GET /runs/{id}/join.
type joined struct {
	status int
	run    map[string]any
}

// joinAsync sends GET path (a join) on a goroutine of its own; its
// answer comes on the channel.
func (e *env) joinAsync(path string) <-chan joined {
	done := make(chan joined, 1)
	go func() {
		var r map[string]any
		resp := e.do("GET", path, nil, &r)
		done <- joined{resp.StatusCode, r}
	}()
	return done
}

// until reads s up to and including its first event of type typ.
func (s *sseStream) until(t *testing.T, typ string) *sseEvent {
	t.Helper()
	for {
		ev, err := s.next(false)
		require.NoError(t, err, "before %s", typ)
		if ev.Type == typ {
			return ev
		}
	}
}
