package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"chatgraph/internal/pgtest"
)

func redisURL() string {
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return "redis://" + a
	}
	return "redis://127.0.0.1:6379"
}

// newRedis is a client of the tests' Redis, closed when the test ends.
func newRedis(t *testing.T) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := goredis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// needShared skips without Postgres and Redis, except under CI=true: a
// fresh schema and key prefix, both dropped when the test ends.
func needShared(t *testing.T) (schema, prefix string) {
	t.Helper()
	schema = pgtest.Schema(t, "srvtest")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb := newRedis(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis at %s is unreachable: %v", redisURL(), err)
		}
		t.Skipf("redis at %s is unreachable: %v", redisURL(), err)
	}
	prefix = "chatgraph:" + schema
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, _ := rdb.Keys(ctx, "{"+prefix+"}*").Result()
		keys2, _ := rdb.Keys(ctx, prefix+"*").Result()
		if all := append(keys, keys2...); len(all) > 0 {
			rdb.Del(ctx, all...)
		}
	})
	return schema, prefix
}

// sharedEnv is the environment of a server process of one deployment on
// Postgres and Redis (a fresh schema and key prefix, see needShared)
// with the given lease TTL; sharedEnv(...)(id) adds the instance id.
func sharedEnv(t *testing.T, leaseTTL string) func(id string) []string {
	t.Helper()
	env, _ := sharedDeployment(t, leaseTTL)
	return env
}

// sharedDeployment is sharedEnv with the deployment's Redis key prefix.
func sharedDeployment(t *testing.T, leaseTTL string) (env func(id string) []string, prefix string) {
	t.Helper()
	schema, prefix := needShared(t)
	return func(id string) []string {
		return []string{"CHATGRAPH_DATABASE_URL=" + pgtest.URL(), "CHATGRAPH_DATABASE_SCHEMA=" + schema,
			"CHATGRAPH_REDIS_URL=" + redisURL(), "CHATGRAPH_REDIS_PREFIX=" + prefix,
			"CHATGRAPH_LEASE_TTL=" + leaseTTL, "CHATGRAPH_INSTANCE_ID=" + id}
	}, prefix
}

// Two server processes on one Postgres and one Redis: a run started on A
// streams from B and is cancelled on B.
func TestTwoServersSharePostgresAndRedis(t *testing.T) {
	schema, prefix := needShared(t)
	args := []string{"--database-url", pgtest.URL(), "--database-schema", schema, "--redis-url", redisURL(), "--redis-prefix", prefix}
	a := startServer(t, t.TempDir(), args...)
	b := startServer(t, t.TempDir(), args...)

	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":50}`)
	// B sees A's graph and chat.
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, nil))

	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("w ", 200)}, &tk))
	runID := tk["runId"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/api/v1/runs/"+runID+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var types []string
	var last int64
	cancelled := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Seq    int64
			Type   string
			NodeID string
		}
		require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev))
		require.Equal(t, last+1, ev.Seq, "gap-free across processes")
		last = ev.Seq
		types = append(types, ev.Type)
		if !cancelled && ev.Type == "node_started" && ev.NodeID == "a1" {
			var res map[string]any
			require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/runs/"+runID+"/cancel", nil, &res))
			require.Equal(t, "cancelled", res["status"])
			cancelled = true
		}
	}
	require.True(t, cancelled, "events: %v", types)
	require.Equal(t, "run_cancelled", types[len(types)-1])

	// The message on A's side ends cancelled; both see it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c map[string]any
		call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, &c)
		if m := c["messages"].([]any)[1].(map[string]any); m["status"] == "cancelled" {
			require.Equal(t, "user_cancel", m["error"])
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(20 * time.Millisecond)
	}

	// Live: B streams A's run as it happens (the relay), not in bursts
	// when A's log is written.
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("w ", 30)}, &tk))
	req, _ = http.NewRequestWithContext(ctx, "GET", b.url+"/api/v1/runs/"+tk["runId"].(string)+"/events", nil)
	resp2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	sc = bufio.NewScanner(resp2.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var firstDelta, agentDone time.Time
	last = 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Seq    int64
			Type   string
			NodeID string
		}
		require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev))
		require.Equal(t, last+1, ev.Seq)
		last = ev.Seq
		if ev.Type == "node_delta" && firstDelta.IsZero() {
			firstDelta = time.Now()
		}
		if ev.Type == "node_completed" && ev.NodeID == "a1" {
			agentDone = time.Now()
		}
	}
	require.False(t, firstDelta.IsZero())
	require.Greater(t, agentDone.Sub(firstDelta), 700*time.Millisecond, "deltas reach B while A streams them")

	// B joins a run A executes: it answers once the run has ended, with
	// the answer already final on B's side.
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("w ", 10)}, &tk))
	var joined map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/runs/"+tk["runId"].(string)+"/join", nil, &joined))
	require.Equal(t, "completed", joined["status"])
	var c map[string]any
	call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, &c)
	for _, m := range c["messages"].([]any) {
		if m := m.(map[string]any); m["id"] == tk["messageId"] {
			require.Equal(t, "completed", m["status"], "the answer is final when the join answers")
			require.Equal(t, strings.Fields("echo: "+strings.Repeat("w ", 10)), strings.Fields(m["content"].(string)))
		}
	}

	// A cancel with action rollback, sent to B, stops the run A executes
	// and undoes its turn: by B's answer the run and its messages are gone.
	call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, &c)
	kept := len(c["messages"].([]any))
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("w ", 200)}, &tk))
	waitRunning(t, b.url, tk["runId"].(string))
	var rolled map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/runs/"+tk["runId"].(string)+"/cancel",
		map[string]any{"action": "rollback"}, &rolled))
	require.Equal(t, "cancelled", rolled["status"])
	for _, srv := range []string{a.url, b.url} {
		require.Equal(t, http.StatusNotFound, call(t, "GET", srv+"/api/v1/runs/"+tk["runId"].(string), nil, nil))
		call(t, "GET", srv+"/api/v1/chats/"+chatID, nil, &c)
		require.Len(t, c["messages"].([]any), kept, "the rolled-back turn's messages are gone")
	}

	// A cancel before the run exists, sent to B, reaches the run A starts.
	var res map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/chats/"+chatID+"/cancel", map[string]any{"clientRequestId": "early"}, &res))
	require.Equal(t, "pending", res["status"])
	types, _ = sse(t, a.url+"/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "x", "clientRequestId": "early"})
	require.Equal(t, "run_cancelled", types[len(types)-1])
	require.NotContains(t, types, "node_started")

	// One idempotent call sent to both processes at once, five times
	// over: one turn, one ticket.
	for i := range 5 {
		body := map[string]any{"content": "once", "clientRequestId": fmt.Sprintf("both-%d", i)}
		var ta, tb map[string]any
		var wg sync.WaitGroup
		wg.Go(func() {
			require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages", body, &ta))
		})
		wg.Go(func() {
			require.Equal(t, http.StatusAccepted, call(t, "POST", b.url+"/api/v1/chats/"+chatID+"/messages", body, &tb))
		})
		wg.Wait()
		require.Equal(t, ta, tb, "call %d", i)
	}
	var runs []map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/runs?chatId="+chatID, nil, &runs))
	n := 0
	for _, r := range runs {
		if crid, _ := r["attrs"].(map[string]any)["clientRequestId"].(string); strings.HasPrefix(crid, "both-") {
			n++
		}
	}
	require.Equal(t, 5, n, "one run per call")
}

// waitRunning waits until the server at url shows run runID running.
func waitRunning(t *testing.T, url, runID string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var r map[string]any
		call(t, "GET", url+"/api/v1/runs/"+runID, nil, &r)
		if r["status"] == "running" {
			return
		}
		require.True(t, time.Now().Before(deadline), "run %s did not start: %v", runID, r)
		time.Sleep(20 * time.Millisecond)
	}
}
