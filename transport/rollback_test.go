package transport_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// rollbackChat is a chat whose first turn has ended (cancelled, its
// messages kept) and whose second streams slowly (its agent says a word
// every 3 s): the first answer's id and the second call's ticket.
func rollbackChat(t *testing.T, e *env) (chatID, firstAnswer string, second map[string]any) {
	t.Helper()
	_, chatID = e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":3000}`))
	var first map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "first"}, &first), http.StatusAccepted)
	e.mustStatus(e.do("POST", "/api/v1/runs/"+first["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "second"}, &second),
		http.StatusAccepted)
	return chatID, first["messageId"].(string), second
}

// messageIDs are the ids of a chat's messages, in creation order.
func (e *env) messageIDs(chatID string) []string {
	var ids []string
	for _, m := range messages(e.chat(chatID)) {
		ids = append(ids, m["id"].(string))
	}
	return ids
}

// continuingChat is a chat whose only answer asked for approval and is
// being continued, approved: its agent says a word every 3 s. It returns
// the answer's id and the continue's run, running.
func continuingChat(t *testing.T, e *env) (chatID, answer, contRun string) {
	t.Helper()
	_, chatID = e.newChat(approvalGraphWith(`{"name":"Slow","tokenDelayMs":3000}`))
	var asked map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"6*7"}`}, &asked, map[string]string{"Prefer": "wait=30"}), http.StatusOK)
	require.Equal(t, "interrupted", asked["status"])
	answer = asked["messageId"].(string)
	var cont map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+answer+"/continue",
		map[string]any{"resume": map[string]any{"approved": true}}, &cont), http.StatusAccepted)
	contRun = cont["runId"].(string)
	e.waitRunStatus(contRun, "running")
	return chatID, answer, contRun
}

// A cancel with action rollback stops the run, as a cancel does, and then
// undoes its turn: by its 202 the turn's messages and the run are gone,
// the chat's active leaf is back on the answer before, and a subscriber
// saw the run end run_cancelled with the rollback's cause.
func TestCancelWithRollbackUndoesTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, firstAnswer, second := rollbackChat(t, e)
	before := e.messageIDs(chatID)
	require.Len(t, before, 4)
	runID := second["runId"].(string)
	s := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	s.until(t, "node_started")

	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/runs/"+runID+"/cancel", map[string]any{"action": "rollback"}, &res), http.StatusAccepted)
	require.Equal(t, "cancelled", res["status"])
	require.Equal(t, []any{runID}, res["runIds"])

	require.Equal(t, before[:2], e.messageIDs(chatID), "the second turn's messages are gone")
	require.Equal(t, firstAnswer, e.chat(chatID)["activeLeafId"])
	var gone errBody
	e.mustStatus(e.do("GET", "/api/v1/runs/"+runID, nil, &gone), http.StatusNotFound)

	end := s.until(t, "run_cancelled")
	require.Contains(t, end.Data["data"].(map[string]any)["cause"], "user_rollback")

	// The chat goes on from what remains.
	var third map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "third"}, &third), http.StatusAccepted)
	m := message(e.chat(chatID), third["userMessageId"].(string))
	require.Equal(t, firstAnswer, m["parentId"])
	e.mustStatus(e.do("POST", "/api/v1/runs/"+third["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
}

// A turn queued behind the one rolled back hangs from what remains and
// runs next.
func TestCancelWithRollbackKeepsTheTurnQueuedBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, firstAnswer, second := rollbackChat(t, e)
	var third map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "third"}, &third), http.StatusAccepted)
	thirdRun := third["runId"].(string)
	var queued map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+thirdRun, nil, &queued), http.StatusOK)
	require.Equal(t, "pending", queued["status"], "the third turn waits behind the second")
	require.Equal(t, second["messageId"], message(e.chat(chatID), third["userMessageId"].(string))["parentId"],
		"sent under the second answer")

	e.mustStatus(e.do("POST", "/api/v1/runs/"+second["runId"].(string)+"/cancel", map[string]any{"action": "rollback"}, nil),
		http.StatusAccepted)
	c := e.chat(chatID)
	require.Nil(t, message(c, second["messageId"].(string)), "the second answer is gone")
	require.Equal(t, firstAnswer, message(c, third["userMessageId"].(string))["parentId"], "the third turn hangs from what remains")
	e.waitRunStatus(thirdRun, "running")
	e.mustStatus(e.do("POST", "/api/v1/runs/"+thirdRun+"/cancel", nil, nil), http.StatusAccepted)
}

// A chat's cancel with action rollback undoes every turn it stops: the
// running one and the one queued behind it.
func TestChatCancelWithRollbackUndoesEveryTurnItStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, firstAnswer, second := rollbackChat(t, e)
	var third map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "third"}, &third), http.StatusAccepted)
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", map[string]any{"action": "rollback"}, &res), http.StatusAccepted)
	require.ElementsMatch(t, []any{second["runId"], third["runId"]}, res["runIds"])
	// By the answer both turns are undone.
	require.Len(t, e.messageIDs(chatID), 2)
	require.Equal(t, firstAnswer, e.chat(chatID)["activeLeafId"])
	for _, id := range []any{second["runId"], third["runId"]} {
		e.mustStatus(e.do("GET", "/api/v1/runs/"+id.(string), nil, nil), http.StatusNotFound)
	}
}

// A run waiting for a human is rolled back at once: its turn and the
// run are gone.
func TestCancelWithRollbackOfAWaitingRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": `/tool calculator {"expression":"1+1"}`}, &tk, map[string]string{"Prefer": "wait=30"}), http.StatusOK)
	require.Equal(t, "interrupted", tk["status"])
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["id"].(string)+"/cancel", map[string]any{"action": "rollback"}, &res),
		http.StatusAccepted)
	require.Equal(t, "cancelled", res["status"])
	require.Empty(t, e.messageIDs(chatID), "the chat's only turn is undone")
	e.mustStatus(e.do("GET", "/api/v1/runs/"+tk["id"].(string), nil, nil), http.StatusNotFound)
}

// A cancel with action rollback before its call arrives is kept with its
// action: the call's run ends at once and its turn is undone.
func TestCancelWithRollbackBeforeTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/cancel", map[string]any{"clientRequestId": "early", "action": "rollback"}, &res),
		http.StatusAccepted)
	require.Equal(t, "pending", res["status"])
	s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "x", "clientRequestId": "early"}, nil)
	evs := s.all(t)
	require.Equal(t, "run_cancelled", evs[len(evs)-1].Type)
	require.NotContains(t, types(evs), "node_started")
	runID := s.resp.Header.Get("X-Run-Id")
	waitFor(t, "the early call's turn to be undone", func() bool {
		return len(e.messageIDs(chatID)) == 0 && e.do("GET", "/api/v1/runs/"+runID, nil, nil).StatusCode == http.StatusNotFound
	})
}

// An action that is neither interrupt nor rollback is refused, nothing
// cancelled.
func TestCancelRefusesAnUnknownAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, _, second := rollbackChat(t, e)
	var b errBody
	e.mustStatus(e.do("POST", "/api/v1/runs/"+second["runId"].(string)+"/cancel", map[string]any{"action": "undo"}, &b), http.StatusBadRequest)
	require.Equal(t, "invalid_json", b.Error.Code)
	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+second["runId"].(string), nil, &run), http.StatusOK)
	require.Equal(t, "running", run["status"])
	e.mustStatus(e.do("POST", "/api/v1/runs/"+second["runId"].(string)+"/cancel", map[string]any{"action": "interrupt"}, nil),
		http.StatusAccepted)
	require.Len(t, e.messageIDs(chatID), 4, "interrupt keeps the turn")
}

// Over the WebSocket, a cancel frame with action rollback does what the
// HTTP cancel does: the run ends run_cancelled and its turn is undone.
func TestWebSocketCancelWithRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"name":"Slow","tokenDelayMs":3000}`))
	c := e.ws()
	c.send(map[string]any{"id": "s1", "type": "stream_chat", "chatId": chatID, "content": "undo me"})
	runID := c.read()["runId"].(string)
	c.until(func(f map[string]any) bool {
		ev, _ := f["event"].(map[string]any)
		return ev["type"] == "node_started" && ev["runId"] == runID && ev["nodeId"] == "a1"
	})
	c.send(map[string]any{"id": "k1", "type": "cancel", "runId": runID, "action": "rollback"})
	evs := eventsOf(c.until(terminalOf(runID)), runID)
	require.Equal(t, "run_cancelled", evs[len(evs)-1]["type"])
	require.Contains(t, evs[len(evs)-1]["data"].(map[string]any)["cause"], "user_rollback")
	waitFor(t, "the turn to be undone", func() bool {
		return len(e.messageIDs(chatID)) == 0 && e.do("GET", "/api/v1/runs/"+runID, nil, nil).StatusCode == http.StatusNotFound
	})
	c.send(map[string]any{"id": "k2", "type": "cancel", "runId": runID, "action": "undo"})
	f := c.until(func(f map[string]any) bool { return f["id"] == "k2" })
	require.Equal(t, "error", f[len(f)-1]["type"])
	require.Equal(t, "invalid_json", f[len(f)-1]["error"].(map[string]any)["code"])
}

// A continue run wrote no message of its own: a rollback leaves it as a
// cancel does, its message cancelled and continuable again.
func TestCancelWithRollbackOfAContinueRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, mid, contRun := continuingChat(t, e)
	e.mustStatus(e.do("POST", "/api/v1/runs/"+contRun+"/cancel", map[string]any{"action": "rollback"}, nil), http.StatusAccepted)
	var run map[string]any
	e.mustStatus(e.do("GET", "/api/v1/runs/"+contRun, nil, &run), http.StatusOK)
	require.Equal(t, "cancelled", run["status"], "the continue run stays")
	m := message(e.chat(chatID), mid)
	require.Equal(t, "cancelled", m["status"])
	require.Equal(t, contRun, m["runId"])
	require.Len(t, e.messageIDs(chatID), 2, "the turn it continued stays")
	var cont map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+mid+"/continue", map[string]any{}, &cont), http.StatusAccepted)
	e.mustStatus(e.do("POST", "/api/v1/runs/"+cont["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
}

// A newer message with the rollback strategy supersedes a continue run
// without deleting it: the continue wrote no message of its own, and the
// answer it continued stays continuable.
func TestRollbackStrategyKeepsASupersededContinueRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chatID, mid, contRun := continuingChat(t, e)
	var next map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
		map[string]any{"content": "instead", "parentId": mid, "multitaskStrategy": "rollback"}, &next), http.StatusAccepted)
	e.waitRunStatus(contRun, "cancelled") // superseded
	m := message(e.chat(chatID), mid)
	require.NotNil(t, m, "the continued answer stays")
	require.Equal(t, contRun, m["runId"], "naming a run that is still there")
	e.mustStatus(e.do("POST", "/api/v1/runs/"+next["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
}
