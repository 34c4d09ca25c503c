package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Two server processes on one Postgres and one Redis, leases of 1 s: a
// client follows through B a run that A executes; A is killed (SIGKILL)
// mid-stream; B takes the run over once A's lease expires and finishes
// it. What the client received through B — relayed from A, then from B's
// own execution — is exactly the run's final log, and the chat's answer
// is the deltas of the agent's final attempt.
func TestFailoverKeepsTheStreamAPrefixOfTheLog(t *testing.T) {
	env := sharedEnv(t, "1s")
	a := startChild(t, env("proc-a")...)
	b := startChild(t, env("proc-b")...)

	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":60}`)
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma")
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Join(words, " ")}, &tk))
	runID := tk["runId"].(string)
	// A second client joins the run through B: its answer comes once B
	// has finished the run A could not.
	type joinAnswer struct {
		status int
		run    map[string]any
	}
	joined := make(chan joinAnswer, 1)
	go func() {
		var r map[string]any
		status := call(t, "GET", b.url+"/api/v1/runs/"+runID+"/join?timeout=60", nil, &r)
		joined <- joinAnswer{status, r}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := follow(ctx, b.url, runID, 0)
	require.NoError(t, err)
	var got []streamEvent
	deltas := 0
	killedAt := time.Time{}
	for ev := range evs {
		require.Equal(t, int64(len(got)+1), ev.Seq, "gap-free through B")
		got = append(got, ev)
		if ev.Type == "node_delta" {
			if deltas++; deltas == 5 {
				a.kill()
				killedAt = time.Now()
			}
		}
		if ev.Type == "run_completed" {
			break
		}
	}
	require.False(t, killedAt.IsZero())
	require.Equal(t, "run_completed", got[len(got)-1].Type, "B finished the run")
	for _, ev := range got {
		if ev.Type == "node_retrying" {
			t.Logf("B took the run over %v after A was killed", ev.at.Sub(killedAt))
			break
		}
	}
	// The final log, read from B's store view, is what the client got.
	log, err := follow(ctx, b.url, runID, 0)
	require.NoError(t, err)
	var final []streamEvent
	for ev := range log {
		final = append(final, ev)
	}
	require.Equal(t, len(final), len(got))
	var answer strings.Builder
	started, ended := map[string]int{}, map[string]int{}
	for i := range final {
		f, g := final[i], got[i]
		f.at, g.at = time.Time{}, time.Time{}
		require.True(t, reflect.DeepEqual(f, g), "seq %d: the client saw %+v, the log has %+v", i+1, g, f)
		switch f.Type {
		case "node_started":
			started[f.NodeID]++
		case "node_completed", "node_failed", "node_cancelled":
			ended[f.NodeID]++
		case "node_retrying":
			if f.NodeID == "a1" {
				answer.Reset()
			}
		case "node_delta":
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(f.Data, &d))
			answer.WriteString(d.Text)
		}
	}
	var retried bool
	for _, ev := range got {
		retried = retried || ev.Type == "node_retrying" && strings.Contains(string(ev.Data), "stale_running")
	}
	require.True(t, retried, "B re-ran the attempt A lost")

	for _, n := range []string{"start", "a1", "out"} {
		require.Equal(t, 1, started[n], n)
		require.Equal(t, 1, ended[n], n)
	}
	var c map[string]any
	require.Equal(t, http.StatusOK, call(t, "GET", b.url+"/api/v1/chats/"+chatID, nil, &c))
	m := c["messages"].([]any)[1].(map[string]any)
	require.Equal(t, "completed", m["status"])
	require.Equal(t, answer.String(), m["content"])

	select {
	case j := <-joined:
		require.Equal(t, http.StatusOK, j.status, "%v", j.run)
		require.Equal(t, "completed", j.run["status"])
		require.EqualValues(t, len(final), j.run["lastSeq"])
		require.Equal(t, answer.String(), j.run["message"].(map[string]any)["content"], "the join's answer is the final attempt's")
	case <-ctx.Done():
		t.Fatal("the join through B did not answer")
	}
}

// A message sent through B while A, running the chat's turn, is down
// waits for that turn: B recovers A's run after its lease, the run takes
// its chat's turn back, and the later message starts only once it ended —
// it does not overtake it when A's turn lease runs out.
func TestFailoverKeepsTheChatsOrder(t *testing.T) {
	env := sharedEnv(t, "1s")
	a := startChild(t, env("proc-a")...)
	b := startChild(t, env("proc-b")...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":60}`)
	first := streamingTurn(t, a.url, chatID, 40)
	a.kill()
	startsAfter(t, b.url, chatID, first)
}

// A message sent through B while A is down, and A had a message queued
// behind the chat's running turn, is answered after that queued message:
// B recovers A's run, starts A's queued turn again in its place in the
// chat's line, and the later message waits behind it. (Before, A answered
// the queued message before it had its place, and the queued place lived
// only BindingTTL: the later message took the turn first.)
func TestFailoverKeepsADeadProcesssQueuedTurnFirst(t *testing.T) {
	env := sharedEnv(t, "1s")
	a := startChild(t, env("proc-a")...)
	b := startChild(t, env("proc-b")...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":60}`)
	first := streamingTurn(t, a.url, chatID, 40)
	var second map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", a.url+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "queued", "multitaskStrategy": "enqueue"}, &second))
	a.kill()
	startsAfter(t, b.url, chatID, first, second)
}

// A process that died after its run ended and before it released its
// chat's turn leaves the turn held in Redis for a TurnTTL with nothing
// to take it back; the next message to that chat is answered without
// waiting that out: recovery frees a turn whose run has ended and is
// bound nowhere. The dead holder is written into Redis as that process
// would have left it, for two minutes. A live holder is never freed so:
// a message queued behind a turn that streams for several recovery
// passes (1 s each here) starts once that turn has ended.
func TestTurnOfARunThatEndedInADeadProcessIsFreed(t *testing.T) {
	env, prefix := sharedDeployment(t, "2s")
	a := startChild(t, env("proc-a")...)
	chatID := newChat(t, a.url, `{"name":"Helper","tokenDelayMs":60}`)
	first := streamingTurn(t, a.url, chatID, 60)
	startsAfter(t, a.url, chatID, first)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := newRedis(t)
	turn := "{" + prefix + "}:qh:" + chatID
	require.NoError(t, rdb.HSet(ctx, turn, "run", first["runId"], "token", first["runId"].(string)+"/dead").Err())
	require.NoError(t, rdb.PExpire(ctx, turn, 2*time.Minute).Err())

	startsAfter(t, a.url, chatID) // within its minute, not the two the dead turn had left
	// The later run releases the turn just after its end.
	require.Eventually(t, func() bool {
		_, err := rdb.HGet(ctx, turn, "run").Result()
		return errors.Is(err, goredis.Nil)
	}, 10*time.Second, 10*time.Millisecond, "the chat's turn is free")
}

// startsAfter sends a message to chat chatID through the server at base
// (enqueue) and checks that its run starts only once the runs of the
// turns before (their 202 answers) have completed, and then completes.
func startsAfter(t *testing.T, base, chatID string, before ...map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tk map[string]any
	require.Equal(t, http.StatusAccepted, call(t, "POST", base+"/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "later", "multitaskStrategy": "enqueue"}, &tk))
	later, err := follow(ctx, base, tk["runId"].(string), 0)
	require.NoError(t, err)
	ev, ok := <-later
	require.True(t, ok)
	require.Equal(t, "run_started", ev.Type)
	for _, b := range before {
		var run map[string]any
		require.Equal(t, http.StatusOK, call(t, "GET", base+"/api/v1/runs/"+b["runId"].(string), nil, &run))
		require.Equal(t, "completed", run["status"], "the later message started once run %s had ended", b["runId"])
	}
	for ev := range later {
		if ev.Type == "run_completed" {
			return
		}
	}
	t.Fatal("the later message never completed")
}
