package transport_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// GET /runs/{id}/join answers once the run has ended, with the run as
// GET /runs/{id} shows it and its answer already final; a run that ended
// before the join is answered at once.
func TestJoinAnswersWhenTheRunEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":60}`))
	var ticket map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three four five"}, &ticket),
		http.StatusAccepted)
	runID, mid := ticket["runId"].(string), ticket["messageId"].(string)

	var run map[string]any
	began := time.Now()
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID+"/join", nil, &run), http.StatusOK)
	require.GreaterOrEqual(t, time.Since(began), 5*60*time.Millisecond, "joined before the agent's words were said")
	require.Equal(t, "completed", run["status"])
	require.Equal(t, runID, run["id"])
	require.Equal(t, mid, run["messageId"])
	require.NotEmpty(t, run["nodes"], "the run as GET /runs/{id} shows it")

	// Its answer was final when the join answered: the join's message
	// and the chat's are completed and hold every word streamed.
	m := run["message"].(map[string]any)
	require.Equal(t, mid, m["id"])
	require.Equal(t, "assistant", m["role"])
	require.Equal(t, "completed", m["status"])
	require.Equal(t, m["content"], message(e.chat(chatID), mid)["content"])
	s := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	evs := s.all(t)
	requireGapFree(t, evs, 0)
	var said strings.Builder
	for _, ev := range evs {
		if ev.Type == "node_delta" {
			said.WriteString(ev.Data["data"].(map[string]any)["text"].(string))
		}
	}
	require.Equal(t, said.String(), m["content"])
	require.EqualValues(t, len(evs), run["lastSeq"], "the run joined is the one whose log ended")

	// Joined again after its end: at once, the same run.
	var again map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID+"/join?timeout=1", nil, &again), http.StatusOK)
	require.Equal(t, run["lastSeq"], again["lastSeq"])
	require.Equal(t, "completed", again["status"])
}

// A join whose timeout passes first answers 202 with the run as it is
// then, running; a later join sees its end (here its cancel).
func TestJoinTimesOutWithTheRunningRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":3000}`))
	var ticket map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three"}, &ticket),
		http.StatusAccepted)
	runID := ticket["runId"].(string)

	var run map[string]any
	began := time.Now()
	resp := e.do("GET", "/api/v1/runs/"+runID+"/join?timeout=1", nil, &run)
	e.mustStatus(resp, http.StatusAccepted)
	require.GreaterOrEqual(t, time.Since(began), time.Second, "the join waited its timeout out")
	require.Equal(t, "0", resp.Header.Get("Retry-After"))
	require.Equal(t, "running", run["status"])
	require.Equal(t, runID, run["id"])
	require.NotContains(t, run, "message", "no answer while the run runs")

	done := e.joinAsync("/api/v1/runs/" + runID + "/join")
	waitFor(t, "the join to wait", func() bool { return e.metric(`chatgraph_active_streams{transport="join"}`) == 1 })
	e.mustStatus(e.do("POST", "/api/v1/runs/"+runID+"/cancel", nil, nil), http.StatusAccepted)
	select {
	case a := <-done:
		require.Equal(t, http.StatusOK, a.status, "%v", a.run)
		require.Equal(t, "cancelled", a.run["status"])
	case <-time.After(10 * time.Second):
		t.Fatal("the join did not answer after the run's cancel")
	}
	require.Zero(t, e.metric(`chatgraph_active_streams{transport="join"}`), "no join waits once answered")
}

// A run that pauses for a human has ended its part: the join answers
// with it interrupted and its pending interrupts, which a resume answers.
func TestJoinAnswersAnInterruptedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	var ticket map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"6*7"}`}, &ticket), http.StatusAccepted)
	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+ticket["runId"].(string)+"/join", nil, &run), http.StatusOK)
	require.Equal(t, "interrupted", run["status"])
	require.NotEmpty(t, run["interrupts"])
	require.Equal(t, "interrupted", run["message"].(map[string]any)["status"])
	require.Equal(t, "interrupted", message(e.chat(chatID), ticket["messageId"].(string))["status"])
}

// A timeout that is not whole seconds from 1 to 600 is 400, an unknown
// run 404 — both before any wait.
func TestJoinRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var ticket map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi"}, &ticket), http.StatusAccepted)
	runID := ticket["runId"].(string)
	for _, v := range []string{"0", "-1", "601", "1.5", "abc", "1s"} {
		var b errBody
		e.mustStatus(e.do("GET", "/api/v1/runs/"+runID+"/join?timeout="+v, nil, &b), http.StatusBadRequest)
		require.Equal(t, "invalid_json", b.Error.Code, v)
		require.Equal(t, "timeout must be whole seconds from 1 to 600", b.Error.Message, v)
	}
	var b errBody
	e.mustStatus(e.do("GET", "/api/v1/runs/r_nosuchrun/join", nil, &b), http.StatusNotFound)
	require.Equal(t, "not_found", b.Error.Code)
}

// A turn queued behind another of its chat is joined while it waits
// (its run pending) and answered once it has run and ended, after the
// turn before it.
func TestJoinWaitsThroughAQueuedTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":50}`))
	var first, second map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three four"}, &first),
		http.StatusAccepted)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "five six"}, &second),
		http.StatusAccepted)
	var queued map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+second["runId"].(string), nil, &queued), http.StatusOK)
	require.Equal(t, "pending", queued["status"], "the second turn waits for the first")

	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+second["runId"].(string)+"/join", nil, &run), http.StatusOK)
	require.Equal(t, "completed", run["status"])
	require.Equal(t, "echo: five six", run["message"].(map[string]any)["content"])
	require.Equal(t, "completed", message(e.chat(chatID), first["messageId"].(string))["status"], "the turn before it ended first")
}

// A join of a run another process executes (here a record no process of
// this test holds) does not hold the server's shutdown: it is answered
// 202 with the run as it is then.
func TestJoinEndsAtShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const runID = "r_elsewhere"
	now := time.Now()
	require.NoError(t, e.store.CreateRun(t.Context(), &runtime.RunRecord{ID: runID, RootID: runID, GraphID: "g",
		Status: runtime.RunRunning, CreatedAt: now, UpdatedAt: now}))
	done := e.joinAsync("/api/v1/runs/" + runID + "/join?timeout=20")
	select {
	case a := <-done:
		t.Fatalf("the join answered %d before the shutdown: %v", a.status, a.run)
	case <-time.After(300 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.srv.Shutdown(ctx))
	select {
	case a := <-done:
		require.Equal(t, http.StatusAccepted, a.status, "%v", a.run)
		require.Equal(t, "running", a.run["status"])
	case <-time.After(5 * time.Second):
		t.Fatal("the join held on after the server's shutdown")
	}
}

// A run a rollback supersedes is answered cancelled, or 404 once the
// rollback has deleted it — never left waiting.
func TestJoinOfARunARollbackSupersedes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":2000}`))
	var first map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three"}, &first),
		http.StatusAccepted)
	runID := first["runId"].(string)
	done := e.joinAsync("/api/v1/runs/" + runID + "/join?timeout=20")
	time.Sleep(100 * time.Millisecond) // the join waits by now
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "instead", "multitaskStrategy": "rollback"}, nil), http.StatusAccepted)
	select {
	case a := <-done:
		switch a.status {
		case http.StatusOK:
			require.Equal(t, "cancelled", a.run["status"])
		case http.StatusNotFound:
		default:
			t.Fatalf("the join answered %d: %v", a.status, a.run)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the join did not answer after the rollback")
	}
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", nil, nil), http.StatusAccepted) // the turn that rolled back
}
