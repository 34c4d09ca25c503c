package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A chat call that prefers to wait (Prefer: wait=N, RFC 7240) is
// answered once its run has ended, as a join of the run is: 200 with the
// run and its answer, the run's ids in the headers, and the wait applied.
func TestChatCallPreferringToWaitAnswersWithTheAnswer(t *testing.T) {
	t.Parallel()
	// A request timeout shorter than the run: the call that waits is not
	// cut by it.
	e := newEnv(t, func(c *transportConfig) { c.RequestTimeout = 300 * time.Millisecond })
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":100}`))
	var run map[string]any
	began := time.Now()
	resp := e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three four five"}, &run,
		map[string]string{"Prefer": "return=minimal, wait=30"})
	e.mustStatus(resp, http.StatusOK)
	require.Greater(t, time.Since(began), 300*time.Millisecond, "the run outlasted the request timeout")
	require.Equal(t, "wait=30", resp.Header.Get("Preference-Applied"))
	require.Equal(t, "completed", run["status"])
	require.Equal(t, resp.Header.Get("X-Run-Id"), run["id"])
	require.Equal(t, resp.Header.Get("X-Message-Id"), run["messageId"])
	m := run["message"].(map[string]any)
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "echo: one two three four five", m["content"])
	require.Equal(t, m["content"], message(e.chat(chatID), run["messageId"].(string))["content"])

	// The other calls take it too: a retry waits for its new answer.
	var retried map[string]any
	resp = e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+run["messageId"].(string)+"/retry", map[string]any{}, &retried,
		map[string]string{"Prefer": "wait=30"})
	e.mustStatus(resp, http.StatusOK)
	require.Equal(t, "completed", retried["status"])
	require.NotEqual(t, run["messageId"], retried["messageId"], "a retry answers in a new message")
	require.Equal(t, "echo: one two three four five", retried["message"].(map[string]any)["content"])
}

// A call whose run outlasts its wait is answered with its usual 202 and
// ticket once the wait has passed; a wait over 600 s is taken as 600; a
// preference the server cannot read is ignored (RFC 7240), so the call
// is answered at once, as without it.
func TestChatCallPreferringToWaitPastItsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":3000}`))
	var ticket map[string]any
	began := time.Now()
	resp := e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "one two three"}, &ticket,
		map[string]string{"Prefer": "wait=1"})
	e.mustStatus(resp, http.StatusAccepted)
	require.GreaterOrEqual(t, time.Since(began), time.Second, "the call waited its wait out")
	require.Equal(t, "wait=1", resp.Header.Get("Preference-Applied"))
	require.NotEmpty(t, ticket["runId"], "the usual ticket: %v", ticket)
	require.NotEmpty(t, ticket["messageId"])
	e.mustStatus(e.do("POST", "/api/v1/runs/"+ticket["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)

	for _, prefer := range []string{"wait=abc", "wait=0", "wait=-5", "respond-async", "wait"} {
		began := time.Now()
		resp := e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "x"}, &ticket,
			map[string]string{"Prefer": prefer})
		e.mustStatus(resp, http.StatusAccepted)
		require.Less(t, time.Since(began), 900*time.Millisecond, "%q: answered at once", prefer)
		require.Empty(t, resp.Header.Get("Preference-Applied"), prefer)
		e.mustStatus(e.do("POST", "/api/v1/runs/"+ticket["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
	}

	_, fast := e.newChat(basicGraph(""))
	resp = e.do("POST", "/api/v1/chats/"+fast+"/messages", map[string]any{"content": "hi"}, nil,
		map[string]string{"Prefer": "wait=86400"})
	e.mustStatus(resp, http.StatusOK)
	require.Equal(t, "wait=600", resp.Header.Get("Preference-Applied"))
}

// A client that leaves while its call waits takes its run with it when
// the call said onDisconnect "cancel" — and only then.
func TestChatCallPreferringToWaitLeftByItsClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":3000}`))
	leave := func(onDisconnect string) string {
		body := `{"content":"one two three"`
		if onDisconnect != "" {
			body += `,"onDisconnect":"` + onDisconnect + `"`
		}
		body += "}"
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/chats/"+chatID+"/messages", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "wait=60")
		req.Header.Set("Idempotency-Key", "leave-"+onDisconnect)
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		_, err = http.DefaultClient.Do(req)
		require.Error(t, err, "the client left before an answer")
		// The same call again (its idempotency key) names its run.
		var ticket map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", json.RawMessage(body), &ticket,
			map[string]string{"Idempotency-Key": "leave-" + onDisconnect}), http.StatusAccepted)
		return ticket["runId"].(string)
	}
	e.waitRunStatus(leave("cancel"), "cancelled")
	kept := leave("")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, "running", e.runStatus(kept), "without onDisconnect the run goes on")
	e.mustStatus(e.do("POST", "/api/v1/runs/"+kept+"/cancel", nil, nil), http.StatusAccepted)
}

// The human-in-the-loop round of a LangGraph client, a call each way: a
// message that waits is answered with its run interrupted and what it
// asks; a resume that waits is answered with the run that went on and
// its final answer.
func TestApprovalRoundWithCallsThatWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	wait := map[string]string{"Prefer": "wait=30"}
	var asked map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"6*7"}`}, &asked, wait), http.StatusOK)
	require.Equal(t, "interrupted", asked["status"])
	require.NotEmpty(t, asked["interrupts"])
	require.Equal(t, "interrupted", asked["message"].(map[string]any)["status"])

	var answered map[string]any
	e.mustStatus(e.do("POST", "/api/v1/runs/"+asked["id"].(string)+"/resume",
		map[string]any{"value": map[string]any{"approved": true}}, &answered, wait), http.StatusOK)
	require.Equal(t, "completed", answered["status"])
	require.Equal(t, asked["id"], answered["parentRunId"], "the resume is a new run after the one that asked")
	m := answered["message"].(map[string]any)
	require.Equal(t, asked["messageId"], m["id"], "the same answer, continued")
	require.Equal(t, "completed", m["status"])
	require.Contains(t, m["content"], "42")
}
