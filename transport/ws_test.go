package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// wsClient is a test WebSocket client speaking chatgraph.v1.
type wsClient struct {
	t    testing.TB
	conn *websocket.Conn
	ctx  context.Context
}

func (e *env) dialWS(opts *websocket.DialOptions, query string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	if opts.Subprotocols == nil {
		opts.Subprotocols = []string{"chatgraph.v1"}
	}
	if e.token != "" && opts.HTTPHeader == nil && query == "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + e.token}}
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/api/v1/ws"+query, opts)
}

func (e *env) ws() *wsClient {
	e.t.Helper()
	conn, _, err := e.dialWS(nil, "")
	require.NoError(e.t, err)
	require.Equal(e.t, "chatgraph.v1", conn.Subprotocol())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e.t.Cleanup(func() {
		cancel()
		_ = conn.Close(websocket.StatusNormalClosure, "")
	})
	return &wsClient{t: e.t, conn: conn, ctx: ctx}
}

func (c *wsClient) send(frame map[string]any) {
	c.t.Helper()
	b, err := json.Marshal(frame)
	require.NoError(c.t, err)
	require.NoError(c.t, c.conn.Write(c.ctx, websocket.MessageText, b))
}

func (c *wsClient) read() map[string]any {
	c.t.Helper()
	_, b, err := c.conn.Read(c.ctx)
	require.NoError(c.t, err)
	var f map[string]any
	require.NoError(c.t, json.Unmarshal(b, &f))
	return f
}

// until reads frames until one matches; it returns the frames read.
func (c *wsClient) until(match func(map[string]any) bool) []map[string]any {
	c.t.Helper()
	var out []map[string]any
	for {
		f := c.read()
		out = append(out, f)
		if match(f) {
			return out
		}
	}
}

func terminalOf(runID string) func(map[string]any) bool {
	return func(f map[string]any) bool {
		if f["type"] != "event" {
			return false
		}
		ev := f["event"].(map[string]any)
		switch ev["type"] {
		case "run_completed", "run_failed", "run_cancelled", "run_interrupted":
			return ev["runId"] == runID
		}
		return false
	}
}

// eventsOf picks the envelopes of runID out of frames.
func eventsOf(frames []map[string]any, runID string) []map[string]any {
	var out []map[string]any
	for _, f := range frames {
		if f["type"] == "event" {
			if ev := f["event"].(map[string]any); ev["runId"] == runID {
				out = append(out, ev)
			}
		}
	}
	return out
}

func requireEnvelopesGapFree(t *testing.T, evs []map[string]any, after int64) {
	t.Helper()
	for i, ev := range evs {
		require.EqualValues(t, after+int64(i)+1, ev["seq"], "event %d %v", i, ev["type"])
	}
}

func evTypes(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev["type"].(string)
	}
	return out
}

func TestWebSocketStreamChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	c := e.ws()
	c.send(map[string]any{"id": "q1", "type": "stream_chat", "chatId": chatID, "content": "hi there"})
	ack := c.read()
	require.Equal(t, "ack", ack["type"])
	require.Equal(t, "q1", ack["id"])
	runID := ack["runId"].(string)
	require.NotEmpty(t, ack["messageId"])
	frames := c.until(terminalOf(runID))
	evs := eventsOf(frames, runID)
	requireEnvelopesGapFree(t, evs, 0)
	ts := evTypes(evs)
	require.Equal(t, "run_started", ts[0])
	require.Equal(t, "run_completed", ts[len(ts)-1])
	for _, want := range []string{"node_started", "node_delta", "node_completed", "edge_taken"} {
		require.Contains(t, ts, want)
	}
	for _, ev := range evs {
		if ev["type"] == "node_started" && ev["nodeId"] == "a1" {
			d := ev["data"].(map[string]any)
			require.Equal(t, "chat_history", d["inputMode"])
			require.Contains(t, d, "messageCount")
			require.Contains(t, d, "tools")
		}
	}
	require.Equal(t, "echo: hi there", e.waitMessage(chatID, ack["messageId"].(string))["content"])

	// Subscribe again from the middle: the rest, exactly once.
	c.send(map[string]any{"id": "s1", "type": "subscribe", "runId": runID, "afterSeq": 3})
	require.Equal(t, "ack", c.read()["type"])
	again := eventsOf(c.until(terminalOf(runID)), runID)
	requireEnvelopesGapFree(t, again, 3)
	require.Len(t, again, len(evs)-3)

	// Errors come back in error frames with the request id.
	c.send(map[string]any{"id": "x1", "type": "subscribe", "runId": "r_nope"})
	f := c.read()
	require.Equal(t, "error", f["type"])
	require.Equal(t, "x1", f["id"])
	require.Equal(t, "not_found", f["error"].(map[string]any)["code"])
	c.send(map[string]any{"id": "x2", "type": "what"})
	require.Equal(t, "error", c.read()["type"])
}

func TestWebSocketCancelBeforeStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	c := e.ws()
	c.send(map[string]any{"id": "c1", "type": "cancel", "clientRequestId": "later"})
	ack := c.read()
	require.Equal(t, "ack", ack["type"])
	require.Equal(t, "pending", ack["status"])
	c.send(map[string]any{"id": "later", "type": "stream_chat", "chatId": chatID, "content": "hi"})
	ack = c.read()
	require.Equal(t, "ack", ack["type"])
	runID := ack["runId"].(string)
	evs := eventsOf(c.until(terminalOf(runID)), runID)
	requireEnvelopesGapFree(t, evs, 0)
	require.Equal(t, "run_cancelled", evs[len(evs)-1]["type"])
	require.NotContains(t, evTypes(evs), "node_started")
}

func TestWebSocketApprovalResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	c := e.ws()
	c.send(map[string]any{"id": "q1", "type": "stream_chat", "chatId": chatID, "content": `/tool calculator {"expression":"6*7"}`})
	ack := c.read()
	runID := ack["runId"].(string)
	evs := eventsOf(c.until(terminalOf(runID)), runID)
	require.Equal(t, "run_interrupted", evs[len(evs)-1]["type"])
	require.Contains(t, evTypes(evs), "approval_required")
	c.send(map[string]any{"id": "q2", "type": "resume", "runId": runID, "value": map[string]any{"approved": true}})
	ack2 := c.read()
	require.Equal(t, "ack", ack2["type"])
	require.Equal(t, ack["messageId"], ack2["messageId"])
	run2 := ack2["runId"].(string)
	evs = eventsOf(c.until(terminalOf(run2)), run2)
	requireEnvelopesGapFree(t, evs, 0)
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, "tool calculator returned: 42", e.waitMessage(chatID, ack["messageId"].(string))["content"])
}

// onDisconnect "cancel" cancels a run whose client leaves before its end,
// not one that ended waiting for an approval before the client left: that
// run keeps waiting, and a later client answers it.
func TestWebSocketOnDisconnectAfterTheEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(approvalGraph())
	c := e.ws()
	c.send(map[string]any{"id": "q1", "type": "stream_chat", "chatId": chatID, "content": `/tool calculator {"expression":"6*7"}`,
		"onDisconnect": "cancel"})
	ack := c.read()
	runID := ack["runId"].(string)
	evs := eventsOf(c.until(terminalOf(runID)), runID)
	require.Equal(t, "run_interrupted", evs[len(evs)-1]["type"])
	require.NoError(t, c.conn.Close(websocket.StatusNormalClosure, "bye"))
	// The server has let go of the connection, and done what its
	// disconnect does, when the gauge falls.
	waitFor(t, "the connection to be let go", func() bool {
		return e.metric(`chatgraph_active_streams{transport="websocket"}`) == 0
	})
	require.Equal(t, "interrupted", e.waitMessage(chatID, ack["messageId"].(string))["status"])

	c = e.ws()
	c.send(map[string]any{"id": "q2", "type": "resume", "runId": runID, "value": map[string]any{"approved": true}})
	ack2 := c.read()
	require.Equal(t, "ack", ack2["type"], "%v", ack2)
	run2 := ack2["runId"].(string)
	evs = eventsOf(c.until(terminalOf(run2)), run2)
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, "tool calculator returned: 42", e.waitMessage(chatID, ack["messageId"].(string))["content"])
}

func TestWebSocketCloseCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.Token = "s3cret" })
	// No token: 4001.
	conn, _, err := e.dialWS(&websocket.DialOptions{HTTPHeader: http.Header{}}, "?x=1")
	require.NoError(t, err)
	_, _, err = conn.Read(context.Background())
	require.Equal(t, websocket.StatusCode(4001), websocket.CloseStatus(err))

	// Token as a subprotocol entry: accepted, never echoed.
	conn, _, err = e.dialWS(&websocket.DialOptions{HTTPHeader: http.Header{}, Subprotocols: []string{"chatgraph.v1", "chatgraph.token.s3cret"}}, "?x=1")
	require.NoError(t, err)
	require.Equal(t, "chatgraph.v1", conn.Subprotocol())
	// A frame that is not JSON: 4400.
	require.NoError(t, conn.Write(context.Background(), websocket.MessageText, []byte("nope")))
	_, _, err = conn.Read(context.Background())
	require.Equal(t, websocket.StatusCode(4400), websocket.CloseStatus(err))

	// ?token= works; a frame over the read limit (the 1 MiB body limit):
	// 1009.
	conn, _, err = e.dialWS(&websocket.DialOptions{HTTPHeader: http.Header{}}, "?token=s3cret")
	require.NoError(t, err)
	big := `{"type":"stream_chat","content":"` + strings.Repeat("x", 1<<20) + `"}`
	_ = conn.Write(context.Background(), websocket.MessageText, []byte(big))
	_, _, err = conn.Read(context.Background())
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err))

	// A foreign Origin is refused.
	_, resp, err := e.dialWS(&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer s3cret"}}}, "")
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// padJSON pads the JSON object b with spaces before its closing brace to
// n bytes: the same object, in a frame or body of exactly n bytes.
func padJSON(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	require.LessOrEqual(t, len(b), n)
	out := append(b[:len(b)-1:len(b)-1], bytes.Repeat([]byte(" "), n-len(b))...)
	out = append(out, '}')
	require.True(t, json.Valid(out))
	return out
}

// A WebSocket client frame may be as large as an HTTP body: a large
// message HTTP takes is taken and answered over WebSocket too, and one
// byte more closes the connection with 1009 as HTTP answers 413.
func TestWebSocketFrameLimitIsTheBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20 // the default BodyLimit, no WSReadLimit set
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	// 200,000 characters (the most a message may have) of 4 bytes each:
	// an 800,000-byte message, in a frame padded to exactly the limit.
	content := strings.Repeat("\U0001F600", 200000)
	frame, err := json.Marshal(map[string]any{"id": "big", "type": "stream_chat", "chatId": chatID, "content": content})
	require.NoError(t, err)
	frame = padJSON(t, frame, limit)

	c := e.ws()
	c.conn.SetReadLimit(4 << 20) // the answer's frames carry the message too
	require.NoError(t, c.conn.Write(c.ctx, websocket.MessageText, frame))
	ack := c.read()
	require.Equal(t, "ack", ack["type"], "%v", ack)
	runID := ack["runId"].(string)
	evs := eventsOf(c.until(terminalOf(runID)), runID)
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, "echo: "+content, e.waitMessage(chatID, ack["messageId"].(string))["content"])

	// HTTP takes the same message in a body of the same size.
	body, err := json.Marshal(map[string]any{"content": content})
	require.NoError(t, err)
	var acc map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", padJSON(t, body, limit), &acc), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatID, acc["messageId"].(string))["status"])

	// One byte more: 413 over HTTP, 1009 over WebSocket.
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", padJSON(t, body, limit+1), nil), http.StatusRequestEntityTooLarge)
	c = e.ws()
	_ = c.conn.Write(c.ctx, websocket.MessageText, padJSON(t, frame, limit+1))
	_, _, err = c.conn.Read(c.ctx)
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "%v", err)
}

// The frame limit follows BodyLimit unless WSReadLimit is set.
func TestWebSocketReadLimitConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		body, ws, allowed int64
	}{
		{"follows BodyLimit", 4096, 0, 4096},
		{"WSReadLimit overrides", 4096, 8192, 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *transportConfig) { c.BodyLimit, c.WSReadLimit = tc.body, tc.ws })
			frame := []byte(`{"id":"s","type":"subscribe","runId":"r_nope"}`)
			// At the limit: read and answered (the run does not exist).
			c := e.ws()
			require.NoError(t, c.conn.Write(c.ctx, websocket.MessageText, padJSON(t, frame, int(tc.allowed))))
			f := c.read()
			require.Equal(t, "error", f["type"])
			require.Equal(t, "not_found", f["error"].(map[string]any)["code"])
			// One byte over: 1009.
			_ = c.conn.Write(c.ctx, websocket.MessageText, padJSON(t, frame, int(tc.allowed)+1))
			_, _, err := c.conn.Read(c.ctx)
			require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "%v", err)
		})
	}
}

func TestWebSocketSlowClientClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) {
		// A write stalled for 30 s drops its client: longer than the big
		// run takes under -race on a loaded 2-core machine (4-6 s alone,
		// more than 10 s beside other packages' tests), so that the run
		// is seen to finish while the stalled client still holds on.
		c.WriteTimeout = time.Minute
		c.WSPing = time.Hour           // no ping timeout before the stall's
		c.Nodes.DeltaEventsPerRun = -1 // one frame per word: a flood
	})
	_, chatID := e.newChat(basicGraph(""))
	// A client with a tiny receive buffer that stops reading.
	dialer := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	slow, _, err := e.dialWS(&websocket.DialOptions{HTTPClient: hc}, "")
	require.NoError(t, err)
	defer slow.CloseNow()
	slow.SetReadLimit(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	frame, _ := json.Marshal(map[string]any{"id": "big", "type": "stream_chat", "chatId": chatID, "content": strings.Repeat("w ", 30000)})
	require.NoError(t, slow.Write(ctx, websocket.MessageText, frame))
	dropped := func() string {
		return strconv.FormatFloat(e.metric(`chatgraph_stream_dropped_total{transport="websocket"}`), 'f', -1, 64)
	}

	// The run is not slowed by the client that stopped reading: it
	// completes while the client still holds its connection, and so does
	// another client's turn.
	waitForWithin(t, "the big run to finish", 25*time.Second, func() bool {
		ms := messages(e.chat(chatID))
		return len(ms) == 2 && ms[1]["status"] == "completed"
	})
	require.Equal(t, "0", dropped(), "the big run waited for its stalled client to be dropped")
	_, chat2 := e.newChat(basicGraph(""))
	fast := e.ws()
	fast.send(map[string]any{"id": "q", "type": "stream_chat", "chatId": chat2, "content": "quick"})
	ack := fast.read()
	evs := eventsOf(fast.until(terminalOf(ack["runId"].(string))), ack["runId"].(string))
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, "0", dropped(), "the fast turn waited for the stalled client to be dropped")

	// The stalled client is dropped with 1008 (it resumes with afterSeq).
	waitForWithin(t, "the slow client to be dropped", 40*time.Second, func() bool { return dropped() == "1" })
	for {
		_, _, err := slow.Read(ctx)
		if err != nil {
			require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "%v", err)
			break
		}
	}
}

// Every chat call over one WebSocket.
func TestWebSocketAllChatCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := approvalGraph()
	_, chatID := e.newChat(g)
	c := e.ws()
	run := func(frame map[string]any) (ack map[string]any, evs []map[string]any) {
		t.Helper()
		c.send(frame)
		ack = c.read()
		require.Equal(t, "ack", ack["type"], "%v", ack)
		require.Equal(t, frame["id"], ack["id"])
		runID := ack["runId"].(string)
		evs = eventsOf(c.until(terminalOf(runID)), runID)
		requireEnvelopesGapFree(t, evs, 0)
		return ack, evs
	}
	a1, evs := run(map[string]any{"id": "f1", "type": "stream_chat", "chatId": chatID, "content": "one"})
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	a2, evs := run(map[string]any{"id": "f2", "type": "stream_agent_chat", "chatId": chatID, "agentNodeId": "a1", "content": "two"})
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, []any{"a1"}, evs[0]["data"].(map[string]any)["entryNodeIds"])
	a3, _ := run(map[string]any{"id": "f3", "type": "retry_message", "chatId": chatID, "messageId": a1["messageId"]})
	a4, _ := run(map[string]any{"id": "f4", "type": "edit_user_message", "chatId": chatID, "messageId": a1["userMessageId"], "content": "one, edited"})
	a5, evs := run(map[string]any{"id": "f5", "type": "stream_chat", "chatId": chatID, "content": `/tool calculator {"expression":"1+2"}`})
	require.Equal(t, "run_interrupted", evs[len(evs)-1]["type"])
	a6, evs := run(map[string]any{"id": "f6", "type": "continue_message", "chatId": chatID, "messageId": a5["messageId"], "resume": map[string]any{"approved": true}})
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"])
	require.Equal(t, a5["messageId"], a6["messageId"])

	ch := e.chat(chatID)
	require.Equal(t, "echo: one", message(ch, a3["messageId"].(string))["content"])
	require.Equal(t, "echo: one, edited", message(ch, a4["messageId"].(string))["content"])
	require.Equal(t, "echo: two", message(ch, a2["messageId"].(string))["content"])
	require.Equal(t, "tool calculator returned: 3", message(ch, a5["messageId"].(string))["content"])

	// A frame missing what the call needs is an error frame, not a close.
	c.send(map[string]any{"id": "bad", "type": "retry_message", "chatId": chatID})
	f := c.read()
	require.Equal(t, "error", f["type"])
	require.Equal(t, "invalid_json", f["error"].(map[string]any)["code"])
}

// onDisconnect "cancel" cancels the run when its WebSocket goes away;
// without it the run goes on.
func TestWebSocketOnDisconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 20}`))
	for _, mode := range []string{"cancel", "continue"} {
		c := e.ws()
		c.send(map[string]any{"id": "d-" + mode, "type": "stream_chat", "chatId": chatID, "content": strings.Repeat("w ", 40), "onDisconnect": mode})
		ack := c.read()
		c.until(func(f map[string]any) bool {
			return f["type"] == "event" && f["event"].(map[string]any)["type"] == "node_delta"
		})
		require.NoError(t, c.conn.Close(websocket.StatusNormalClosure, "bye"))
		m := e.waitMessage(chatID, ack["messageId"].(string))
		if mode == "cancel" {
			require.Equal(t, "cancelled", m["status"])
		} else {
			require.Equal(t, "completed", m["status"])
		}
	}
}

// A client request id names a call in its chat, and a frame id names one
// on its connection: a cancel by request id reaches neither another
// chat's call with the same id nor, from a connection that sent none,
// another connection's frame with the same id, now or as a kept intent.
// With its chat named it reaches the call from any connection.
func TestCancelByRequestIDStaysInItsChatAndConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	graphID, chatA := e.newChat(basicGraph(`{"tokenDelayMs": 20}`))
	var ch map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
	chatB := ch["id"].(string)
	long := strings.Repeat("w ", 100)

	// Over HTTP: the same clientRequestId in two chats, chat A cancelled.
	var a, b map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatA+"/messages", map[string]any{"content": long, "clientRequestId": "dup"}, &a), http.StatusAccepted)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatB+"/messages", map[string]any{"content": long, "clientRequestId": "dup"}, &b), http.StatusAccepted)
	var res map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatA+"/cancel", map[string]any{"clientRequestId": "dup"}, &res), http.StatusAccepted)
	require.Equal(t, []any{a["runId"]}, res["runIds"])
	require.Equal(t, "cancelled", e.waitMessage(chatA, a["messageId"].(string))["status"])
	require.Equal(t, "completed", e.waitMessage(chatB, b["messageId"].(string))["status"], "the other chat's call runs on")
	// A kept intent for chat A leaves chat B's next call with the id alone.
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatA+"/cancel", map[string]any{"clientRequestId": "next"}, &res), http.StatusAccepted)
	require.Equal(t, "pending", res["status"])
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatB+"/messages", map[string]any{"content": "hi", "clientRequestId": "next"}, &b), http.StatusAccepted)
	require.Equal(t, "completed", e.waitMessage(chatB, b["messageId"].(string))["status"])

	// Over WebSocket: two connections numbering their frames alike.
	c1, c2 := e.ws(), e.ws()
	c1.send(map[string]any{"id": "1", "type": "stream_chat", "chatId": chatA, "content": "hi"})
	ack := c1.read()
	c1.until(terminalOf(ack["runId"].(string)))
	c1.send(map[string]any{"id": "k1", "type": "cancel", "clientRequestId": "2"})
	require.Equal(t, "pending", c1.read()["status"], "a late cancel by frame id is kept for this connection")
	c2.send(map[string]any{"id": "2", "type": "stream_chat", "chatId": chatA, "content": "hi"})
	ack = c2.read()
	run2 := ack["runId"].(string)
	evs := eventsOf(c2.until(terminalOf(run2)), run2)
	require.Equal(t, "run_completed", evs[len(evs)-1]["type"], "another connection's frame 2 is not cancelled")

	// The call cancelled from another connection, by chat and id.
	c2.send(map[string]any{"id": "3", "type": "stream_chat", "chatId": chatA, "content": long})
	ack = c2.read()
	run3 := ack["runId"].(string)
	c1.send(map[string]any{"id": "k2", "type": "cancel", "chatId": chatA, "clientRequestId": "3"})
	cancelAck := c1.read()
	require.Equal(t, "cancelled", cancelAck["status"])
	require.Equal(t, []any{run3}, cancelAck["runIds"])
	evs = eventsOf(c2.until(terminalOf(run3)), run3)
	require.Equal(t, "run_cancelled", evs[len(evs)-1]["type"])
}
