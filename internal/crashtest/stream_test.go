package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/internal/ssetest"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/runtime/store/sqlite"
	"chatgraph/transport"
)

const (
	envStreamWorker = "CRASHTEST_STREAM_WORKER"
	envDurability   = "CRASHTEST_DURABILITY"
	// envKillAt arms a failpoint in the worker's store: "before:K" dies
	// just before the batch write that holds the K-th node_delta this
	// process commits (those deltas were emitted, not committed: inside a
	// group-commit interval), "after:K" just after it (committed, not yet
	// published).
	envKillAt = "CRASHTEST_KILL_AT"
)

// streamWorker is a chat server (SQLite, the chat service, the HTTP
// transport) in its own process, to be killed with SIGKILL. It prints
// "ready <url>" once it listens and has taken its runs back.
func streamWorker() int {
	ctx := context.Background()
	dir := os.Getenv(envDir)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "chatgraph.db")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	chats, err := chatsqlite.Open(ctx, st)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chats:", err)
		return 2
	}
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		return 2
	}
	killer := &deltaKiller{Store: st}
	if p := strings.SplitN(os.Getenv(envKillAt), ":", 2); len(p) == 2 {
		killer.phase = p[0]
		killer.at, _ = strconv.ParseInt(p[1], 10, 64)
	}
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: killer, Durability: runtime.Durability(os.Getenv(envDurability)),
		Owner: "stream-worker", LeaseTTL: 5 * time.Second, BatchInterval: 10 * time.Millisecond})
	if err != nil {
		return 2
	}
	svc, err := chat.New(chat.Config{Engine: eng, Store: chats, Control: runcontrol.NewMemory(runcontrol.MemoryConfig{})})
	if err != nil {
		return 2
	}
	srv, err := transport.New(transport.Config{Chat: svc, RateLimit: -1})
	if err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 2
	}
	go func() { _ = http.Serve(ln, srv.Handler()) }()
	srv.Start(ctx)
	killer.armed.Store(true)
	fmt.Println("ready http://" + ln.Addr().String())
	select {}
}

// deltaKiller dies around the batch write that holds the at-th node_delta
// committed after it was armed (once the worker is ready: a kill while
// the worker takes its runs back would leave the test no worker to talk
// to).
type deltaKiller struct {
	*sqlite.Store
	phase string
	at    int64
	armed atomic.Bool
	seen  atomic.Int64
}

func (s *deltaKiller) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	var n int64
	for _, b := range bs {
		for _, ev := range b.Events {
			if ev.Type == "node_delta" {
				n++
			}
		}
	}
	hit := s.phase != "" && n > 0 && s.armed.Load() && s.seen.Add(n) >= s.at
	if hit && s.phase == "before" {
		die()
	}
	err := s.Store.WriteBatches(ctx, bs)
	if hit && s.phase == "after" && err == nil {
		die()
	}
	return err
}

// streamProc is one worker process.
type streamProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the process has exited
	err  error
}

func startStreamWorker(t *testing.T, dir, mode, killAt string) *streamProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envStreamWorker+"=1", envDir+"="+dir, envDurability+"="+mode, envKillAt+"="+killAt)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &streamProc{cmd: cmd, done: make(chan struct{})}
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	if err != nil {
		p.kill() // its output is complete once it has exited
		t.Fatalf("worker did not start: %v\n%s", err, stderr.String())
	}
	p.url = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	return p
}

func (p *streamProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// killed reports whether the process died of SIGKILL (waiting for it).
func (p *streamProc) killed() bool {
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return false
	}
	var ee *exec.ExitError
	return errors.As(p.err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
}

// wireEvent is an event as a subscriber reads it.
type wireEvent struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	NodeID  string `json:"nodeId"`
	Attempt int    `json:"attempt"`
	Data    any    `json:"data"`
}

// subscribe reads GET /runs/{id}/events after seq `after`, calling each
// for every event until it returns false, the stream ends, or the run's
// terminal event. It reports whether the terminal event was read.
func subscribe(ctx context.Context, base, runID string, after int64, each func(wireEvent) bool) (bool, error) {
	s, err := ssetest.Open(ctx, base, runID, after)
	if err != nil {
		return false, err
	}
	defer s.Close()
	for {
		var ev wireEvent
		if err := s.Next(&ev); errors.Is(err, io.EOF) {
			return false, nil // the server went away
		} else if err != nil {
			return false, err
		}
		if !each(ev) {
			return false, nil
		}
		if runtime.EventType(ev.Type).Terminal() {
			return true, nil
		}
	}
}

func apiCall(t *testing.T, method, url string, body, out any) int {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, url, bytes.NewReader(raw))
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

// echoGraph: chat_start -> agent (echo model, tokens 15 ms apart) -> chat_output.
func echoGraph() map[string]any {
	pos := map[string]any{"x": 0, "y": 0}
	flow := map[string]any{"channel": "flow"}
	return map[string]any{"name": "crash-streams",
		"nodes": []any{
			map[string]any{"id": "start", "type": "chat_start", "position": pos, "data": map[string]any{}},
			map[string]any{"id": "agent", "type": "agent", "position": pos, "data": map[string]any{"name": "Echo", "model": "echo", "tokenDelayMs": 15}},
			map[string]any{"id": "out", "type": "chat_output", "position": pos, "data": map[string]any{}},
		},
		"edges": []any{
			map[string]any{"id": "e1", "source": "start", "sourceHandle": "message", "target": "agent", "targetHandle": "input", "data": flow},
			map[string]any{"id": "e2", "source": "agent", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": flow},
		}}
}

// TestCrashStreams kills a chat server with SIGKILL while a subscriber
// follows a run that streams tokens: at random points of the stream seen
// from outside, and just before or just after the store commit that holds
// a chosen delta (inside a group-commit interval in batched mode). After
// each crash the server restarts on the same state dir and the subscriber
// resumes from the last seq it received. For every run, what the
// subscriber received is exactly the final log (nothing it saw was
// renumbered or retracted), each node has one started and one terminal
// event, and the answer in the chat is the deltas of the agent's final
// attempt.
func TestCrashStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a server 50 times")
	}
	for _, mode := range []string{"sync", "batched"} {
		t.Run(mode, func(t *testing.T) { crashStreams(t, mode, 25) })
	}
}

func crashStreams(t *testing.T, mode string, wantCrashes int) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	crashes, kinds, recovered := 0, map[string]int{}, 0
	var external int // kill after this many deltas reach the subscriber (0: none)
	var kind string  // how the current worker will die
	start := func() *streamProc {
		external, kind = 0, ""
		if crashes >= wantCrashes || rng.IntN(3) == 0 {
			return startStreamWorker(t, dir, mode, "") // lets a run finish
		}
		// From the second delta: the commit after the turn's first may
		// hold the first delta and be written before the turn's first
		// commit is synced and the POST answered, so a failpoint there
		// kills the server before it acknowledged the turn (a client
		// that was never told of the run has nothing to resume).
		k := 2 + rng.IntN(14)
		switch rng.IntN(3) {
		case 0:
			external, kind = k, "killed mid-stream"
			return startStreamWorker(t, dir, mode, "")
		case 1:
			kind = "before a delta's commit"
			return startStreamWorker(t, dir, mode, "before:"+strconv.Itoa(k))
		default:
			kind = "after a delta's commit"
			return startStreamWorker(t, dir, mode, "after:"+strconv.Itoa(k))
		}
	}
	w := start()
	var g map[string]any
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", w.url+"/api/v1/graphs", echoGraph(), &g))

	for runs := 0; crashes < wantCrashes || runs == 0; runs++ {
		var c map[string]any // a chat per run: its history stays short
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", w.url+"/api/v1/chats", map[string]any{"graphId": g["id"]}, &c))
		chatID := c["id"].(string)
		words := make([]string, 20)
		for i := range words {
			words[i] = fmt.Sprintf("w%d.%d", runs, i)
		}
		var tk map[string]any
		require.Equal(t, http.StatusAccepted, apiCall(t, "POST", w.url+"/api/v1/chats/"+chatID+"/messages",
			map[string]any{"content": strings.Join(words, " ")}, &tk), "%v", tk)
		runID := tk["runId"].(string)

		// The subscriber: connected before any crash, resuming from the
		// last seq it received after each one.
		var got []wireEvent
		var bad []string
		for {
			deltas := 0
			ended, err := subscribe(ctx, w.url, runID, int64(len(got)), func(ev wireEvent) bool {
				if ev.Seq != int64(len(got))+1 {
					bad = append(bad, fmt.Sprintf("seq %d after %d", ev.Seq, len(got)))
				}
				got = append(got, ev)
				if ev.Type == "node_delta" {
					deltas++
					if external > 0 && deltas == external {
						w.kill()
					}
				}
				return true
			})
			require.Empty(t, bad, "the stream is gap-free across crashes")
			if ended {
				break
			}
			// A kill cuts the stream, or the request before its answer
			// (EOF, connection reset or refused).
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "connection") {
				require.NoError(t, err)
			}
			require.True(t, w.killed(), "the stream ended without a terminal event, and the server did not crash")
			crashes++
			kinds[kind]++
			w = start()
		}
		checkStream(t, ctx, w.url, chatID, runID, got)
		if kind == "" && crashes < wantCrashes {
			w.kill() // idle: not counted; the next worker is armed again
			w = start()
		}
		for _, ev := range got {
			if ev.Type == "node_retrying" {
				recovered++ // an attempt lost mid-stream ran again
				break
			}
		}
	}
	t.Logf("%s: %d crashes %v; %d runs recovered mid-stream", mode, crashes, kinds, recovered)
	require.Positive(t, recovered)
}

// checkStream compares what the subscriber received with the run's final
// log and the chat's answer.
func checkStream(t *testing.T, ctx context.Context, base, chatID, runID string, got []wireEvent) {
	t.Helper()
	var log []wireEvent
	ended, err := subscribe(ctx, base, runID, 0, func(ev wireEvent) bool { log = append(log, ev); return true })
	require.NoError(t, err)
	require.True(t, ended)
	require.Equal(t, len(log), len(got), "%s: the subscriber has the whole log", runID)
	for i := range log {
		require.True(t, reflect.DeepEqual(log[i], got[i]), "%s seq %d: the subscriber saw %+v, the log has %+v", runID, i+1, got[i], log[i])
	}
	require.Equal(t, "run_completed", log[len(log)-1].Type)
	started, ended2 := map[string]int{}, map[string]int{}
	var answer strings.Builder
	for _, ev := range got {
		switch ev.Type {
		case "node_started":
			started[ev.NodeID]++
		case "node_completed", "node_failed", "node_cancelled", "node_interrupted":
			require.Equal(t, 1, started[ev.NodeID], "%s: %s ended before it started", runID, ev.NodeID)
			ended2[ev.NodeID]++
		case "node_retrying":
			if ev.NodeID == "agent" {
				answer.Reset() // the deltas of the final attempt follow
			}
		case "node_delta":
			if ev.NodeID == "agent" {
				answer.WriteString(ev.Data.(map[string]any)["text"].(string))
			}
		}
	}
	for _, n := range []string{"start", "agent", "out"} {
		require.Equal(t, 1, started[n], "%s: %s has one node_started", runID, n)
		require.Equal(t, 1, ended2[n], "%s: %s has one terminal event", runID, n)
	}
	var c map[string]any
	require.Equal(t, http.StatusOK, apiCall(t, "GET", base+"/api/v1/chats/"+chatID, nil, &c))
	var content any
	for _, m := range c["messages"].([]any) {
		if m := m.(map[string]any); m["runId"] == runID && m["role"] == "assistant" {
			require.Equal(t, "completed", m["status"])
			content = m["content"]
		}
	}
	require.Equal(t, answer.String(), content, "%s: the answer is the final attempt's deltas", runID)
}
