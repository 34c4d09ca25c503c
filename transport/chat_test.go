package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
	"chatgraph/runtime"
)

func sseCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCancelBeforeStartHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", map[string]any{"clientRequestId": "req-1"}, &res), http.StatusAccepted)
	require.Equal(t, "pending", res["status"])
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi", "clientRequestId": "req-1"}, nil)
	evs := s.all(t)
	requireGapFree(t, evs, 0)
	require.Equal(t, "run_started", evs[0].Type)
	require.Equal(t, "run_cancelled", evs[len(evs)-1].Type)
	require.NotContains(t, types(evs), "node_started")
	m := e.waitMessage(chatID, s.resp.Header.Get("X-Message-Id"))
	require.Equal(t, "cancelled", m["status"])

	// The intent was consumed: the next request of the chat runs.
	s = e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "again", "clientRequestId": "req-2"}, nil)
	evs = s.all(t)
	require.Equal(t, "run_completed", evs[len(evs)-1].Type)
	e.waitRunDone(evs[0].Data["runId"].(string))

	// A chat-scope intent cancels whatever runs next in the chat.
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", nil, &res), http.StatusAccepted)
	require.Equal(t, "pending", res["status"])
	var ticket map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "third"}, &ticket), http.StatusAccepted)
	m = e.waitMessage(chatID, ticket["messageId"].(string))
	require.Equal(t, "cancelled", m["status"])
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 50}`))
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("word ", 100)}, nil)
	var evs []*sseEvent
	for {
		ev, err := s.next(false)
		require.NoError(t, err)
		evs = append(evs, ev)
		if ev.Type == "node_delta" {
			break
		}
	}
	runID := evs[0].Data["runId"].(string)
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/runs/"+runID+"/cancel", nil, &res), http.StatusAccepted)
	require.Equal(t, "cancelled", res["status"])
	evs = append(evs, s.all(t)...)
	requireGapFree(t, evs, 0)
	require.Equal(t, "run_cancelled", evs[len(evs)-1].Type)
	require.Contains(t, types(evs), "node_cancelled")
	// Once the run has ended and released, a cancel is a conflict.
	waitFor(t, "the run to release", func() bool {
		return e.do("POST", "/api/v1/runs/"+runID+"/cancel", nil, nil).StatusCode == http.StatusConflict
	})
}

// slowStops is the chat store without its joined writes (not a
// chat.Joiner: every answer is written after the commit of its run's
// end, as with a store that cannot join them), with the write of a
// stopped answer (a cancelled message) held once armed: entered is
// closed when the write waits, and it goes on when release is closed.
type slowStops struct {
	chat.Store
	armed            atomic.Bool
	entered, release chan struct{}
}

func (s *slowStops) FinishMessage(ctx context.Context, m *chat.Message) error {
	if m.Status == chat.StatusCancelled && s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.FinishMessage(ctx, m)
}

// On a store that writes a run's answer after the commit of its end,
// GET /runs/{id} of a run that ended here answers only once the answer
// is final, so a client that polls the run and then reads the chat never
// finds the run ended and its answer running.
func TestEndedRunIsReportedOnceItsAnswerIsFinal(t *testing.T) {
	t.Parallel()
	stops := &slowStops{entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, func(c *transportConfig) {
		c.WrapChats = func(s *chatsqlite.Store) chat.Store { stops.Store = s; return stops }
	})
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 50}`))
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": strings.Repeat("word ", 100)}, nil)
	started := s.until(t, "run_started")
	s.until(t, "node_delta")
	runID, messageID := started.Data["runId"].(string), started.Data["data"].(map[string]any)["messageId"].(string)
	stops.armed.Store(true)
	// The cancel answers once the run has ended, its answer written.
	cancelled := make(chan int, 1)
	go func() { cancelled <- e.do("POST", "/api/v1/runs/"+runID+"/cancel", nil, nil).StatusCode }()
	<-stops.entered
	rec, err := e.store.GetRun(context.Background(), runID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status, "the run's end is committed, its answer not yet written")

	time.AfterFunc(200*time.Millisecond, func() { close(stops.release) })
	var r map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &r), http.StatusOK)
	m := message(e.chat(chatID), messageID)
	require.Equal(t, "cancelled", r["status"])
	require.Equal(t, "cancelled", m["status"], "the answer is final once the run is reported ended")
	require.NotEmpty(t, m["content"], "the stopped answer keeps what was streamed")
	require.Equal(t, "run_cancelled", s.until(t, "run_cancelled").Type)
	require.Equal(t, http.StatusAccepted, <-cancelled)
}

// A run that another process has ended and not yet written the answer of
// (its message still running, as a cancelled answer is for a moment
// after the end's commit): a replay of its log holds the terminal event
// back, and GET /runs/{id} its answer, until the answer is final.
func TestReplayedEndWaitsForItsAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	runID := "r_elsewhere"
	user := &chat.Message{ID: "m_user", ChatID: chatID, Role: chat.RoleUser, Content: "hi", RunID: runID,
		TurnRunID: runID, Status: chat.StatusCompleted, CreatedAt: now}
	answer := &chat.Message{ID: "m_answer", ChatID: chatID, ParentID: user.ID, Role: chat.RoleAssistant, RunID: runID,
		TurnRunID: runID, Status: chat.StatusRunning, CreatedAt: now}
	require.NoError(t, e.chats.BeginTurn(ctx, chat.Turn{ChatID: chatID, Messages: []*chat.Message{user, answer},
		Run: &runtime.RunRecord{ID: runID, RootID: runID, ChatID: chatID, Kind: string(chat.KindStreamChat),
			Status: runtime.RunPending, Attrs: map[string]any{"messageId": answer.ID, "userMessageId": user.ID},
			CreatedAt: now, UpdatedAt: now}}))
	require.NoError(t, e.store.AppendEvents(ctx, runID, 0, []runtime.Event{
		{Seq: 1, RunID: runID, ChatID: chatID, Type: runtime.EventRunStarted, Time: now, Data: json.RawMessage(`{}`)},
		{Seq: 2, RunID: runID, ChatID: chatID, Type: runtime.EventRunCancelled, Time: now, Data: json.RawMessage(`{"cause":"cancelled by user"}`)},
	}))
	rec, err := e.store.GetRun(ctx, runID)
	require.NoError(t, err)
	rec.Status, rec.LastSeq = runtime.RunCancelled, 2
	require.NoError(t, e.store.UpdateRun(ctx, rec))

	// Each reader notes the answer's status as it learns the run ended.
	answerAt := func() chat.Status {
		m, err := e.chats.GetMessage(ctx, chatID, answer.ID)
		require.NoError(t, err)
		return m.Status
	}
	replayed, got := make(chan chat.Status, 1), make(chan chat.Status, 1)
	stream := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	go func() {
		stream.until(t, "run_cancelled")
		replayed <- answerAt()
	}()
	go func() {
		var r map[string]any
		e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &r), http.StatusOK)
		got <- answerAt()
	}()
	time.Sleep(200 * time.Millisecond) // both readers have found the end by now
	answer.Status, answer.Content = chat.StatusCancelled, "partly"
	require.NoError(t, e.chats.FinishMessage(ctx, answer))
	require.Equal(t, chat.StatusCancelled, <-replayed, "the replay's run_cancelled came before the answer was final")
	require.Equal(t, chat.StatusCancelled, <-got, "GET /runs answered before the answer was final")
}

func TestRetryAndEditMakeSiblings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var t1 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "first"}, &t1), http.StatusAccepted)
	a1 := t1["messageId"].(string)
	u1 := t1["userMessageId"].(string)
	e.waitMessage(chatID, a1)

	var t2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+a1+"/retry", nil, &t2), http.StatusAccepted)
	a2 := t2["messageId"].(string)
	m := e.waitMessage(chatID, a2)
	require.Equal(t, u1, m["parentId"], "a retry is a sibling answer")
	require.Equal(t, "echo: first", m["content"])
	require.NotEqual(t, t1["runId"], t2["runId"])

	var t3 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+u1+"/edit", map[string]any{"content": "edited"}, &t3), http.StatusAccepted)
	a3 := t3["messageId"].(string)
	u3 := t3["userMessageId"].(string)
	e.waitMessage(chatID, a3)
	c := e.chat(chatID)
	require.Len(t, messages(c), 5, "nothing is overwritten")
	require.Nil(t, message(c, u3)["parentId"], "an edit is a sibling of the edited message (both roots)")
	require.Nil(t, message(c, u1)["parentId"])
	require.Equal(t, "first", message(c, u1)["content"])
	require.Equal(t, "echo: edited", message(c, a3)["content"])
	require.Equal(t, a3, c["activeLeafId"])
	require.Equal(t, "echo: first", message(c, a1)["content"])

	// A follow-up on the edited branch sees that branch's history only.
	var t4 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "next"}, &t4), http.StatusAccepted)
	m = e.waitMessage(chatID, t4["messageId"].(string))
	require.Equal(t, "echo: next", m["content"])
	require.Equal(t, a3, message(e.chat(chatID), t4["userMessageId"].(string))["parentId"])

	// Switching branches.
	e.mustStatus(e.do("PUT", "/api/v1/chats/"+chatID+"/active-leaf", map[string]any{"messageId": a1}, nil), http.StatusOK)
	require.Equal(t, a1, e.chat(chatID)["activeLeafId"])
}

func approvalGraph() map[string]any { return approvalGraphWith("") }

// approvalGraphWith is approvalGraph with the agent's data.
func approvalGraphWith(agentData string) map[string]any {
	g := basicGraph(agentData)
	g["nodes"] = append(g["nodes"].([]any), map[string]any{"id": "calc", "type": "tool",
		"data": map[string]any{"name": "calculator", "requireApproval": true}})
	g["edges"] = append(g["edges"].([]any), edge("l1", "calc", "tool", "a1", "tools", "link"))
	return g
}

func TestContinueAfterApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"6*7"}`}, nil)
	evs := s.all(t)
	requireGapFree(t, evs, 0)
	require.Equal(t, "run_interrupted", evs[len(evs)-1].Type)
	require.Contains(t, types(evs), "approval_required")
	runID := evs[0].Data["runId"].(string)
	mid := s.resp.Header.Get("X-Message-Id")
	require.Equal(t, "interrupted", e.waitMessage(chatID, mid)["status"])

	s = e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages/"+mid+"/continue",
		map[string]any{"resume": map[string]any{"approved": true}}, nil)
	evs = s.all(t)
	requireGapFree(t, evs, 0)
	data := evs[0].Data["data"].(map[string]any)
	require.Equal(t, runID, data["parentRunId"])
	require.Equal(t, mid, data["messageId"])
	require.Equal(t, "continue_message", data["kind"], "the run names the call that started it")
	require.Equal(t, "run_completed", evs[len(evs)-1].Type)
	var replayed bool
	for _, ev := range evs {
		if ev.Type == "node_started" && ev.Data["nodeId"] == "start" {
			replayed = ev.Data["data"].(map[string]any)["replayed"] == true
		}
	}
	require.True(t, replayed, "succeeded nodes replay")
	m := e.waitMessage(chatID, mid)
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "tool calculator returned: 42", m["content"])
	require.Len(t, messages(e.chat(chatID)), 2, "completed in place")

	// Continuing a completed message: conflict.
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+mid+"/continue", nil, nil), http.StatusConflict)
	// So is cancelling the answered run: nothing waits on it, and it
	// stays as it ended.
	var refused struct {
		Error struct{ Details map[string]any }
	}
	e.mustStatus(e.do("POST", "/api/v1/runs/"+runID+"/cancel", nil, &refused), http.StatusConflict)
	require.Equal(t, "interrupted", refused.Error.Details["status"])
	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &run), http.StatusOK)
	require.Equal(t, "interrupted", run["status"])
}

func TestResumeDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"1+1"}`}, &tk), http.StatusAccepted)
	mid := tk["messageId"].(string)
	require.Equal(t, "interrupted", e.waitMessage(chatID, mid)["status"])
	// An answer that is no decision is refused before anything runs: the
	// wait stays, and the right answer is taken after it.
	for _, bad := range []any{"yes", map[string]any{"approved": "x"}, 42} {
		var refused struct {
			Error struct{ Code, Message string }
		}
		e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["runId"].(string)+"/resume", map[string]any{"value": bad}, &refused),
			http.StatusBadRequest)
		require.Equal(t, "invalid_json", refused.Error.Code)
		require.Contains(t, refused.Error.Message, `"approved": true|false`)
	}
	require.Equal(t, "interrupted", message(e.chat(chatID), mid)["status"])
	var tk2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["runId"].(string)+"/resume",
		map[string]any{"value": map[string]any{"approved": false, "reason": "no"}}, &tk2), http.StatusAccepted)
	require.Equal(t, mid, tk2["messageId"])
	m := e.waitMessage(chatID, mid)
	require.Equal(t, "completed", m["status"])
	require.Contains(t, m["content"], "refused")
}

func TestSSEResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 5}`))
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": strings.Repeat("w ", 60)}, &tk), http.StatusAccepted)
	runID := tk["runId"].(string)

	// Mid-run: read a few events, drop the connection, resume from the last id.
	ctx, cancel := context.WithCancel(sseCtx(t))
	s := e.openSSE(ctx, "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	var first []*sseEvent
	for len(first) < 8 {
		ev, err := s.next(false)
		require.NoError(t, err)
		first = append(first, ev)
	}
	cancel()
	last := first[len(first)-1].ID
	s = e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, map[string]string{"Last-Event-ID": itoa(last)})
	rest := s.all(t)
	all := append(first, rest...)
	requireGapFree(t, all, 0)
	require.Equal(t, "run_completed", all[len(all)-1].Type)

	// After the end: a replay from any point, with ?after=.
	for _, after := range []int64{0, 3, int64(len(all)) - 1, int64(len(all))} {
		s = e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events?after="+itoa(after), nil, nil)
		got := s.all(t)
		requireGapFree(t, got, after)
		require.Len(t, got, len(all)-int(after))
		for i, ev := range got {
			require.Equal(t, all[int(after)+i].Raw, ev.Raw)
		}
	}
	e.mustStatus(e.do("GET", "/api/v1/runs/nope/events", nil, nil), http.StatusNotFound)
}

func TestDoubleTextingReject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 20}`))
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": strings.Repeat("w ", 50)}, &tk), http.StatusAccepted)
	var body struct {
		Error struct {
			Code    string
			Details map[string]any
		}
	}
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "again", "multitaskStrategy": "reject"}, &body), http.StatusConflict)
	require.Equal(t, "conflict", body.Error.Code)
	require.Contains(t, body.Error.Details["runIds"], tk["runId"])
	require.Len(t, messages(e.chat(chatID)), 2, "a rejected message is not written")

	// enqueue (the default) waits its turn and sees the first answer.
	var tk2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "queued"}, &tk2), http.StatusAccepted)
	m := e.waitMessage(chatID, tk2["messageId"].(string))
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "completed", message(e.chat(chatID), tk["messageId"].(string))["status"])
}

func TestDoubleTextingInterruptAndRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 20}`))
	var tk1 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": strings.Repeat("w ", 200)}, &tk1), http.StatusAccepted)
	waitFor(t, "first run to run", func() bool { return message(e.chat(chatID), tk1["messageId"].(string))["status"] == "running" })
	var tk2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "interrupting", "multitaskStrategy": "interrupt"}, &tk2), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, tk2["messageId"].(string))["status"])
	m1 := message(e.chat(chatID), tk1["messageId"].(string))
	require.Equal(t, "cancelled", m1["status"])
	require.Equal(t, "superseded", m1["error"])

	var tk3 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": strings.Repeat("w ", 200)}, &tk3), http.StatusAccepted)
	waitFor(t, "third run to run", func() bool { return message(e.chat(chatID), tk3["messageId"].(string))["status"] == "running" })
	var tk4 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "rolling back", "multitaskStrategy": "rollback"}, &tk4), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, tk4["messageId"].(string))["status"])
	c := e.chat(chatID)
	require.Nil(t, message(c, tk3["messageId"].(string)), "rolled back")
	require.Nil(t, message(c, tk3["userMessageId"].(string)), "rolled back")
	require.Equal(t, tk2["messageId"], message(c, tk4["userMessageId"].(string))["parentId"], "re-parented onto what remains")
}

// Cancelling a chat (or a run) that waits for an approval ends the wait;
// no intent is left for the next message.
func TestCancelEndsApprovalWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	ask := func() map[string]any {
		var tk map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": `/tool calculator {"expression":"1+1"}`}, &tk), http.StatusAccepted)
		require.Equal(t, "interrupted", e.waitMessage(chatID, tk["messageId"].(string))["status"])
		return tk
	}
	tk := ask()
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", nil, &res), http.StatusAccepted)
	require.Equal(t, "cancelled", res["status"])
	require.Equal(t, []any{tk["runId"]}, res["runIds"])
	m := message(e.chat(chatID), tk["messageId"].(string))
	require.Equal(t, "cancelled", m["status"])
	require.Equal(t, "user_cancel", m["error"])
	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+tk["runId"].(string), nil, &run), http.StatusOK)
	require.Equal(t, "cancelled", run["status"])

	// The next message runs (no intent was kept).
	var t2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "plain"}, &t2), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, t2["messageId"].(string))["status"])

	// The same through the run.
	tk = ask()
	e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["runId"].(string)+"/cancel", nil, &res), http.StatusAccepted)
	require.Equal(t, "cancelled", res["status"])
	require.Equal(t, "cancelled", message(e.chat(chatID), tk["messageId"].(string))["status"])
	// The cancel voided the wait: an answer to it is refused, by the run
	// and by the message, and nothing runs.
	var refused struct {
		Error struct{ Code, Message string }
	}
	e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["runId"].(string)+"/resume", map[string]any{"value": map[string]any{"approved": true}}, &refused),
		http.StatusConflict)
	require.Equal(t, "conflict", refused.Error.Code)
	require.Contains(t, refused.Error.Message, "no pending interrupt")
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+tk["messageId"].(string)+"/continue",
		map[string]any{"resume": map[string]any{"approved": true}}, nil), http.StatusConflict)
	require.Equal(t, "cancelled", message(e.chat(chatID), tk["messageId"].(string))["status"])
	// A cancelled message can still be continued: the graph runs again.
	var t3 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+tk["messageId"].(string)+"/continue", nil, &t3), http.StatusAccepted)
	require.Equal(t, "interrupted", e.waitMessage(chatID, tk["messageId"].(string))["status"])
}

// onDisconnect on an SSE answer: with "cancel", a client that leaves
// before its run's end takes the turn with it, and without it the run
// goes on; a client that leaves once the end went out cancels nothing —
// a run that ended interrupted for an approval keeps waiting, and a later
// call answers it. The last case runs several turns: the client leaves
// as soon as it has read the end, while the server may still be closing
// the response.
func TestSSEOnDisconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 20}`))
	for _, mode := range []string{"cancel", "continue"} {
		ctx, leave := context.WithCancel(sseCtx(t))
		s := e.openSSE(ctx, "POST", "/api/v1/chats/"+chatID+"/messages",
			map[string]any{"content": strings.Repeat("w ", 40), "onDisconnect": mode}, nil)
		mid := s.resp.Header.Get("X-Message-Id")
		s.until(t, "node_delta")
		leave()
		s.resp.Body.Close()
		m := e.waitMessage(chatID, mid)
		if mode == "cancel" {
			require.Equal(t, "cancelled", m["status"])
		} else {
			require.Equal(t, "completed", m["status"])
		}
	}

	_, chatID = e.newChat(approvalGraph())
	for range 10 {
		ctx, leave := context.WithCancel(sseCtx(t))
		s := e.openSSE(ctx, "POST", "/api/v1/chats/"+chatID+"/messages",
			map[string]any{"content": `/tool calculator {"expression":"6*7"}`, "onDisconnect": "cancel"}, nil)
		mid := s.resp.Header.Get("X-Message-Id")
		s.until(t, "run_interrupted")
		leave()
		s.resp.Body.Close()
		// The server has let go of the stream, and done what its
		// disconnect does, when the gauge falls.
		waitFor(t, "the stream to be let go", func() bool {
			return e.metric(`chatgraph_active_streams{transport="sse"}`) == 0
		})
		require.Equal(t, "interrupted", e.waitMessage(chatID, mid)["status"])
		evs := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages/"+mid+"/continue",
			map[string]any{"resume": map[string]any{"approved": true}}, nil).all(t)
		require.Equal(t, "run_completed", evs[len(evs)-1].Type)
		require.Equal(t, "tool calculator returned: 42", e.waitMessage(chatID, mid)["content"])
	}
}

// A chat call with a clientRequestId sent again — over HTTP or, with the
// id in the frame, over WebSocket — answers the first call's ticket
// (header Idempotent-Replayed, ack "replayed": true) and starts nothing;
// with SSE it streams the first call's run. Another call with the id is
// 409. A WebSocket frame's own id stands in for a cancel scope only: two
// frames of one id without clientRequestId are two calls.
func TestClientRequestIDAnswersRepeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	body := map[string]any{"content": "hello", "clientRequestId": "retry-1"}
	var first, again map[string]any
	resp := e.do("POST", "/api/v1/chats/"+chatID+"/messages", body, &first)
	e.mustStatus(resp, http.StatusAccepted)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
	resp = e.do("POST", "/api/v1/chats/"+chatID+"/messages", body, &again)
	e.mustStatus(resp, http.StatusAccepted)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first, again)

	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", body, nil)
	require.Equal(t, "true", s.resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first["runId"], s.resp.Header.Get("X-Run-Id"))
	evs := s.all(t)
	requireGapFree(t, evs, 0)
	require.Equal(t, "run_completed", evs[len(evs)-1].Type)

	var b errBody
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "other", "clientRequestId": "retry-1"}, &b),
		http.StatusConflict)
	require.Equal(t, "conflict", b.Error.Code)
	require.Contains(t, b.Error.Message, "clientRequestId retry-1 was used by another call")

	// The Idempotency-Key header names the call as clientRequestId does
	// (quoted, as a structured-field string, or bare).
	var byHeader, again2 map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "keyed"}, &byHeader,
		map[string]string{"Idempotency-Key": `"key-1"`}), http.StatusAccepted)
	resp = e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "keyed", "clientRequestId": "key-1"}, &again2,
		map[string]string{"Idempotency-Key": "key-1"})
	e.mustStatus(resp, http.StatusAccepted)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, byHeader, again2)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "keyed", "clientRequestId": "other"}, &b,
		map[string]string{"Idempotency-Key": "key-1"}), http.StatusBadRequest)
	require.Contains(t, b.Error.Message, "Idempotency-Key header and clientRequestId differ")

	c := e.ws()
	frame := map[string]any{"id": "f1", "type": "stream_chat", "chatId": chatID, "content": "hi", "clientRequestId": "retry-2"}
	c.send(frame)
	ack := c.read()
	require.Equal(t, "ack", ack["type"])
	require.Nil(t, ack["replayed"])
	c.until(terminalOf(ack["runId"].(string)))
	frame["id"] = "f2"
	c.send(frame)
	ack2 := c.read()
	require.Equal(t, true, ack2["replayed"])
	require.Equal(t, ack["runId"], ack2["runId"])
	require.Equal(t, ack["messageId"], ack2["messageId"])
	c.until(terminalOf(ack2["runId"].(string)))

	plain := map[string]any{"id": "f3", "type": "stream_chat", "chatId": chatID, "content": "hi"}
	c.send(plain)
	a := c.read()
	c.until(terminalOf(a["runId"].(string)))
	c.send(plain)
	b2 := c.read()
	require.NotEqual(t, a["runId"], b2["runId"])
	require.Nil(t, b2["replayed"])
	c.until(terminalOf(b2["runId"].(string)))
	require.Len(t, messages(e.chat(chatID)), 10, "five turns: retry-1, key-1, retry-2, and f3 twice")
}

// Turns sent together with rollback among them leave a consistent tree:
// a turn that survives a rollback but was written under one of the
// messages it deleted moves onto what remains, as the rolling-back
// turn's own user message does, so no message hangs from a deleted one,
// no turn fails for a branch it cannot find, and the chat takes the next
// message. The turns race for the chat, so each round orders them anew.
func TestConcurrentRollbackKeepsTheTree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 5}`))
	for round := range 8 {
		var base map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "base"}, &base), http.StatusAccepted)
		e.waitMessage(chatID, base["messageId"].(string))
		var wg sync.WaitGroup
		for i, strategy := range []string{"rollback", "rollback", "interrupt", "enqueue", "enqueue", "enqueue"} {
			wg.Go(func() {
				e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
					map[string]any{"content": fmt.Sprintf("round %d turn %d", round, i), "multitaskStrategy": strategy}, nil), http.StatusAccepted)
			})
		}
		wg.Wait()
		waitFor(t, "the round's turns to end", func() bool {
			for _, m := range messages(e.chat(chatID)) {
				if m["status"] == "pending" || m["status"] == "running" {
					return false
				}
			}
			return true
		})
		ids := map[string]bool{}
		msgs := messages(e.chat(chatID))
		for _, m := range msgs {
			ids[m["id"].(string)] = true
		}
		for _, m := range msgs {
			if p, _ := m["parentId"].(string); p != "" {
				require.True(t, ids[p], "round %d: message %s hangs from %s, which is gone", round, m["id"], p)
			}
			require.NotEqual(t, "failed", m["status"], "round %d: message %s failed: %v", round, m["id"], m["error"])
		}
	}
	var next map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "plain follow-up"}, &next), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, next["messageId"].(string))["status"])
}
