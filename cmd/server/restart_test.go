package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/ssetest"
)

// envChild makes the test binary run one server (Main) in its own
// process, configured by the CHATGRAPH_* environment, so a test can kill
// it with SIGKILL.
const envChild = "CHATGRAPH_TEST_SERVER_CHILD"

func childServer() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := Main(ctx, Env{Args: []string{"server", "--rate-limit", "-1"}, Getenv: os.Getenv, Stdout: io.Discard, Stderr: os.Stderr,
		Ready: func(u string) { fmt.Println("ready " + u) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return 1
	}
	return 0
}

// child is a server process started by a test.
type child struct {
	cmd *exec.Cmd
	url string
}

func startChild(t *testing.T, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{envChild + "=1", "CHATGRAPH_ADDR=127.0.0.1:0", "CHATGRAPH_LOG_LEVEL=warn"}, env...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd}
	t.Cleanup(func() { c.kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the server did not start")
	c.url = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	return c
}

// kill ends the process with SIGKILL (no shutdown of any kind).
func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// streamEvent is one event as a client reads it from SSE.
type streamEvent struct {
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	NodeID  string          `json:"nodeId"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
	at      time.Time
}

// follow streams GET /runs/{id}/events after seq `after` onto a channel,
// closed when the stream ends (terminal event, server gone).
func follow(ctx context.Context, base, runID string, after int64) (<-chan streamEvent, error) {
	s, err := ssetest.Open(ctx, base, runID, after)
	if err != nil {
		return nil, err
	}
	ch := make(chan streamEvent, 1024)
	go func() {
		defer close(ch)
		defer s.Close()
		for {
			var ev streamEvent
			if err := s.Next(&ev); err != nil {
				return
			}
			ev.at = time.Now()
			ch <- ev
		}
	}()
	return ch, nil
}

// After kill -9 and a restart on the same state dir — or, on Postgres and
// Redis, with the same instance id — the server takes its interrupted run
// back at once: the run's next event arrives within 1 s of /readyz
// answering 200, far inside the lease a stranger would wait out. The
// lease TTL (2 s) is shorter than the rest of the run, so a restarted run
// that lost its own lease, or that the server claimed a second time,
// would show as a second stale_running retry or a stream that stops.
func TestRestartTakesRunsBackAtOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		testRestart(t, "CHATGRAPH_STATE_DIR="+dir, "CHATGRAPH_LEASE_TTL=2s")
	})
	t.Run("postgres+redis", func(t *testing.T) {
		testRestart(t, sharedEnv(t, "2s")("web-1")...)
	})
}

func testRestart(t *testing.T, env ...string) {
	a := startChild(t, env...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":150}`)
	words := strings.Fields("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty")
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Join(words, " ")}, &tk))
	runID := tk["runId"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := follow(ctx, a.url, runID, 0)
	require.NoError(t, err)
	var seen []streamEvent
	deltas := 0
	for ev := range evs {
		seen = append(seen, ev)
		if ev.Type == "node_delta" {
			if deltas++; deltas == 4 {
				break
			}
		}
	}
	require.Equal(t, 4, deltas)
	a.kill()
	last := seen[len(seen)-1].Seq

	b := startChild(t, env...)
	var ready time.Time
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(b.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ready = time.Now()
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "ready")
		time.Sleep(5 * time.Millisecond)
	}
	rest, err := follow(ctx, b.url, runID, last)
	require.NoError(t, err)
	next, ok := <-rest
	require.True(t, ok, "the stream goes on")
	require.Equal(t, last+1, next.Seq)
	took := next.at.Sub(ready)
	t.Logf("next event %s (seq %d) %v after ready", next.Type, next.Seq, took)
	require.Less(t, took, time.Second, "the restarted server continues its run at once")
	seen = append(seen, next)
	for ev := range rest {
		seen = append(seen, ev)
	}
	require.Equal(t, "run_completed", seen[len(seen)-1].Type)
	stale := 0
	for i, ev := range seen {
		require.Equal(t, int64(i+1), ev.Seq, "one gap-free stream across the restart")
		if ev.Type == "node_retrying" {
			stale++
		}
	}
	require.Equal(t, 1, stale, "one recovery: the restarted server keeps the run it took back")
}

// The state dir is locked while a server runs on it; its instance id is
// kept across starts.
func TestStateDirInstance(t *testing.T) {
	dir := t.TempDir()
	c := &config{stateDir: dir}
	unlock, err := claimInstance(c)
	require.NoError(t, err)
	id := c.owner
	require.NotEmpty(t, id)
	_, err = claimInstance(&config{stateDir: dir})
	require.ErrorContains(t, err, "in use by another chatgraph process")
	unlock()
	c2 := &config{stateDir: dir}
	unlock, err = claimInstance(c2)
	require.NoError(t, err)
	defer unlock()
	require.Equal(t, id, c2.owner, "the same id after a restart")

	pg := &config{databaseURL: "postgres://x", addr: "0.0.0.0:8080"}
	_, err = claimInstance(pg)
	require.NoError(t, err)
	host, _ := os.Hostname()
	require.Equal(t, host+":8080", pg.owner)
	a, b := &config{databaseURL: "postgres://x", addr: "127.0.0.1:0"}, &config{databaseURL: "postgres://x", addr: "127.0.0.1:0"}
	_, _ = claimInstance(a)
	_, _ = claimInstance(b)
	require.NotEqual(t, a.owner, b.owner, "a port picked at start gives no stable id")
	pg = &config{databaseURL: "postgres://x", instanceID: "web-1"}
	_, err = claimInstance(pg)
	require.NoError(t, err)
	require.Equal(t, "web-1", pg.owner)
}

// A cancel sent while a run's process is down — through another process
// of the deployment — wins: the restarted process takes the run back,
// and it ends cancelled (not completed), its message keeping the text the
// client received before the crash.
func TestCancelWhileTheRunsServerIsDownWins(t *testing.T) {
	withID := sharedEnv(t, "3s")
	a := startChild(t, withID("web-a")...)
	b := startChild(t, withID("web-b")...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":150}`)
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "one two three four five six seven eight nine ten eleven twelve"}, &tk))
	runID, messageID := tk["runId"].(string), tk["messageId"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := follow(ctx, a.url, runID, 0)
	require.NoError(t, err)
	var text strings.Builder
	deltas := 0
	for ev := range evs {
		if ev.Type == "node_delta" {
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			text.WriteString(d.Text)
			if deltas++; deltas == 4 {
				break
			}
		}
	}
	require.Equal(t, 4, deltas)
	a.kill()

	var res map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/chats/"+chatID+"/cancel", map[string]any{}, &res))
	require.Equal(t, "cancelled", res["status"], "the run is bound (by the process that died)")
	a2 := startChild(t, withID("web-a")...)
	var run map[string]any
	require.Eventually(t, func() bool {
		call(t, "GET", a2.url+"/api/v1/runs/"+runID, nil, &run)
		return run["status"] != "running"
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "cancelled", run["status"], "the cancel wins")
	all, err := follow(ctx, a2.url, runID, 0)
	require.NoError(t, err)
	var logged strings.Builder
	for ev := range all {
		if ev.Type == "node_delta" {
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			logged.WriteString(d.Text)
		}
	}
	var c struct {
		Messages []struct {
			ID, Status, Content string
		}
	}
	require.Equal(t, http.StatusOK, call(t, "GET", a2.url+"/api/v1/chats/"+chatID, nil, &c))
	var found bool
	for _, m := range c.Messages {
		if m.ID == messageID {
			found = true
			require.Equal(t, "cancelled", m.Status)
			require.Equal(t, logged.String(), m.Content, "the message keeps the text of the log")
			require.True(t, strings.HasPrefix(m.Content, text.String()), "which holds what the client received")
		}
	}
	require.True(t, found)
}

// A rollback sent while a run's process is down — through another
// process of the deployment — wins too: the restarted process takes the
// run back, it ends cancelled, and its turn is undone (its messages and
// the run deleted) before the chat takes another turn.
func TestRollbackWhileTheRunsServerIsDownUndoesItsTurn(t *testing.T) {
	withID := sharedEnv(t, "3s")
	a := startChild(t, withID("undo-a")...)
	b := startChild(t, withID("undo-b")...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":150}`)
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "one two three four five six seven eight nine ten eleven twelve"}, &tk))
	runID := tk["runId"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := follow(ctx, a.url, runID, 0)
	require.NoError(t, err)
	for ev := range evs {
		if ev.Type == "node_delta" {
			break
		}
	}
	a.kill()

	var res map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/chats/"+chatID+"/cancel", map[string]any{"action": "rollback"}, &res))
	require.Equal(t, "cancelled", res["status"], "the run is bound (by the process that died)")
	a2 := startChild(t, withID("undo-a")...)
	require.Eventually(t, func() bool {
		return call(t, "GET", a2.url+"/api/v1/runs/"+runID, nil, nil) == http.StatusNotFound
	}, 30*time.Second, 50*time.Millisecond, "the recovered run is rolled back")
	var c map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", a2.url+"/api/v1/chats/"+chatID, nil, &c))
	require.Empty(t, c["messages"], "the turn's messages are gone")
	require.Nil(t, c["activeLeafId"])
}

// A message queued behind a streaming run (enqueue) when its server is
// killed -9 is answered by the restarted server — on the same state dir,
// or on Postgres and Redis with the same instance id — after the run
// ahead of it, which the server takes back, has ended; before, the
// queued message was failed lost.
func TestRestartAnswersAQueuedMessage(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testRestartQueued(t, "CHATGRAPH_STATE_DIR="+t.TempDir(), "CHATGRAPH_LEASE_TTL=2s")
	})
	t.Run("postgres+redis", func(t *testing.T) {
		testRestartQueued(t, sharedEnv(t, "2s")("web-q")...)
	})
}

func testRestartQueued(t *testing.T, env ...string) {
	a := startChild(t, env...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":60}`)
	first := streamingTurn(t, a.url, chatID, 20)
	var second map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "later", "multitaskStrategy": "enqueue"}, &second))
	a.kill()

	b := startChild(t, env...)
	var c struct {
		Messages []struct{ ID, Role, Status, Content, Error string }
	}
	settled := func() bool {
		require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, &c))
		for _, m := range c.Messages {
			if m.ID == second["messageId"].(string) {
				return m.Status != "pending" && m.Status != "running"
			}
		}
		return false
	}
	require.Eventually(t, settled, 40*time.Second, 50*time.Millisecond)
	var answers []string
	for _, m := range c.Messages {
		require.Equal(t, "completed", m.Status, "message %s (%s): %s", m.ID, m.Role, m.Error)
		if m.Role == "assistant" {
			answers = append(answers, strings.TrimSpace(m.Content))
		}
	}
	require.Equal(t, []string{"echo: " + strings.TrimSpace(strings.Repeat("word ", 20)), "echo: later"}, answers,
		"each message answered once, in order")
	var run1, run2 struct {
		Status               string
		CreatedAt, UpdatedAt time.Time
	}
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/runs/"+first["runId"].(string), nil, &run1))
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/runs/"+second["runId"].(string), nil, &run2))
	require.Equal(t, "completed", run1.Status)
	require.Equal(t, "completed", run2.Status, "the queued run, as reserved, answered")
	require.False(t, run2.CreatedAt.Before(run1.UpdatedAt), "the queued run started after the first ended")
}

// streamingTurn sends a message of words words to chat chatID through the
// server at base and returns its 202 answer once its run has streamed a
// delta.
func streamingTurn(t *testing.T, base, chatID string, words int) map[string]any {
	t.Helper()
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", base+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("word ", words)}, &tk))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := follow(ctx, base, tk["runId"].(string), 0)
	require.NoError(t, err)
	for ev := range evs {
		if ev.Type == "node_delta" {
			return tk
		}
	}
	t.Fatalf("run %s streamed no delta", tk["runId"])
	return nil
}
