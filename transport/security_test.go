package transport_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/nodes"
)

// send sends one request with exactly the given headers (no defaults;
// "Host" sets the Host) and returns the answer, its body read.
func (e *env) send(method, path, body string, header map[string]string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	require.NoError(e.t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// raw is send, answering the status and the decoded JSON body.
func (e *env) raw(method, path, body string, header map[string]string) (int, map[string]any) {
	e.t.Helper()
	resp := e.send(method, path, body, header)
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func errCode(body map[string]any) string {
	if e, ok := body["error"].(map[string]any); ok {
		c, _ := e["code"].(string)
		return c
	}
	return ""
}

func (e *env) graphCount() int {
	e.t.Helper()
	var list []any
	e.mustStatus(e.do("GET", "/api/v1/graphs", nil, &list), http.StatusOK)
	return len(list)
}

// A page on another site cannot drive the local server: the simple
// requests a browser sends without a CORS preflight (text/plain, forms)
// and any request a browser marks cross-site are refused, and nothing is
// created.
func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.AllowedOrigins = []string{"dev.example:5173", "*.trusted.example"} })
	graph, err := json.Marshal(basicGraph(""))
	require.NoError(t, err)
	before := e.graphCount()
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"text/plain from a foreign origin", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"},
			http.StatusForbidden, "cross_origin"},
		{"form from a foreign origin", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
			http.StatusForbidden, "cross_origin"},
		{"browser-marked cross-site JSON", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example",
			"Content-Type": "application/json"}, http.StatusForbidden, "cross_origin"},
		{"text/plain without an origin", map[string]string{"Content-Type": "text/plain"},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"no content type", map[string]string{}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	} {
		status, body := e.raw("POST", "/api/v1/graphs", string(graph), tc.header)
		require.Equal(t, tc.status, status, tc.name)
		require.Equal(t, tc.code, errCode(body), tc.name)
	}
	// A cross-site cancel with no body is refused too.
	status, _ := e.raw("POST", "/api/v1/runs/r1/cancel", "", map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, before, e.graphCount(), "no graph was created")

	// Same-origin browsers, trusted origins and plain API clients pass.
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": e.url, "Content-Type": "application/json"},
		{"Origin": e.url, "Content-Type": "application/json; charset=utf-8"},
		{"Origin": "http://dev.example:5173", "Content-Type": "application/json"},
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://ui.trusted.example", "Content-Type": "application/json"},
		{"Content-Type": "application/json"},
	} {
		status, body := e.raw("POST", "/api/v1/graphs", string(graph), h)
		require.Equal(t, http.StatusCreated, status, "%v: %v", h, body)
	}
	// Reads stay open to any origin (the answer is what CORS guards).
	status, _ = e.raw("GET", "/api/v1/graphs", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"})
	require.Equal(t, http.StatusOK, status)
}

// DNS rebinding: a request naming a host the server does not know is
// refused; IP literals and localhost are served, and --allowed-hosts adds
// names.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.AllowedHosts = []string{"chat.example.com", "*.corp.example"} })
	for _, host := range []string{"evil.example", "evil.example:8080", "localhost.evil.example", "corp.example"} {
		for _, path := range []string{"/api/v1/graphs", "/", "/healthz"} {
			status, body := e.raw("GET", path, "", map[string]string{"Host": host})
			require.Equal(t, http.StatusMisdirectedRequest, status, "%s %s", host, path)
			require.Equal(t, "host_not_allowed", errCode(body))
		}
	}
	for _, host := range []string{"localhost", "localhost:8080", "app.localhost:1", "127.0.0.1:9", "[::1]:8080", "10.1.2.3",
		"chat.example.com", "CHAT.example.com.", "a.corp.example:443"} {
		status, _ := e.raw("GET", "/api/v1/graphs", "", map[string]string{"Host": host})
		require.Equal(t, http.StatusOK, status, host)
	}
}

// The OpenAI-compatible routes spend the same per-client budget as the
// API, limited before the token is checked: alternating between them
// does not double a client's requests.
func TestOpenAIRoutesShareTheRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.RateLimit, c.RateBurst, c.Token = 1, 5, "secret" })
	passed := 0
	for i := range 40 {
		path := "/api/v1/graphs"
		if i%2 == 1 {
			path = "/v1/models"
		}
		status, _ := e.raw("GET", path, "", map[string]string{"Authorization": "Bearer wrong"})
		switch status {
		case http.StatusUnauthorized:
			passed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("%s: status %d", path, status)
		}
	}
	require.LessOrEqual(t, passed, 6, "one burst for both route families")
}

// The rate limit keys on the peer address: rotating X-Forwarded-For does
// not buy requests, and wrong-token guesses are limited as well.
func TestRotatedForwardedForStillLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.RateLimit, c.RateBurst, c.Token = 1, 5, "secret" })
	passed := 0
	for i := range 40 {
		status, _ := e.raw("GET", "/api/v1/graphs", "", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.%d.%d", i/250, i%250),
			"Authorization": "Bearer wrong"})
		switch status {
		case http.StatusUnauthorized:
			passed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d", status)
		}
	}
	require.LessOrEqual(t, passed, 6, "the burst, not one bucket per forged address")

	// Behind a trusted proxy the forwarded client is the key.
	p := newEnv(t, func(c *transportConfig) {
		c.RateLimit, c.RateBurst, c.TrustedProxies = 1, 2, []string{"127.0.0.0/8", "::1"}
	})
	for i := range 10 {
		status, _ := p.raw("GET", "/api/v1/graphs", "", map[string]string{"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i)})
		require.Equal(t, http.StatusOK, status, "each forwarded client has its own bucket")
	}
	limited := false
	for range 5 {
		status, _ := p.raw("GET", "/api/v1/graphs", "", map[string]string{"X-Forwarded-For": "203.0.113.200"})
		limited = limited || status == http.StatusTooManyRequests
	}
	require.True(t, limited, "one forwarded client is still limited")
}

// A client trickling its body is cut off once the body read timeout
// passes, instead of holding the connection open.
func TestTrickledBodyClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.BodyReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /api/v1/graphs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	require.NoError(t, err)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 100ms, for far longer than the timeout
		for range 300 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	// A bound on a hung connection, not a timing assertion: the server
	// answers and closes long before the trickle would end (30 s).
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers the trickled request")
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	// And closes the connection: EOF, or a reset when the trickle's next
	// byte met the closed socket first.
	_, err = conn.Read(make([]byte, 1))
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "connection still open: %v", err)
}

// One client cannot hold more than MaxWebSocketsPerIP connections.
func TestWebSocketsPerClientCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.MaxWebSocketsPerIP = 3 })
	var open []*websocket.Conn
	for range 3 {
		c, _, err := e.dialWS(nil, "")
		require.NoError(t, err)
		open = append(open, c)
	}
	_, resp, err := e.dialWS(nil, "")
	require.Error(t, err)
	require.NotNil(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NoError(t, open[0].Close(websocket.StatusNormalClosure, ""))
	waitFor(t, "a freed slot", func() bool {
		c, _, err := e.dialWS(nil, "")
		if err != nil {
			return false
		}
		open[0] = c
		return true
	})
	for _, c := range open {
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
}

// The UI and the API answer with nosniff, no framing and the UI's CSP.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/", "/api/v1/graphs", "/chats/x"} {
		resp := e.do("GET", path, nil, nil)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Contains(t, csp, "default-src 'self'", path)
		require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), path)
	}
}

// /readyz names the dependency that is down, never its error text.
func TestReadyzNamesDependencyNotError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := e.do("GET", "/readyz", nil, nil)
	e.mustStatus(resp, http.StatusOK)
	require.NoError(t, e.store.(io.Closer).Close())
	var body map[string]any
	resp = e.do("GET", "/readyz", nil, &body)
	e.mustStatus(resp, http.StatusServiceUnavailable)
	checks := body["checks"].(map[string]any)
	require.Equal(t, "unavailable", checks["runs"])
	require.Equal(t, "unavailable", checks["chats"])
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	require.NotContains(t, strings.ToLower(string(raw)), "sql")
	require.NotContains(t, strings.ToLower(string(raw)), "closed")
}

// A chat call enabling a user tool its graph does not allow is refused
// with 400 before anything is written: without a userTools list on the
// chat_start only tools with no outside effects (calculator,
// current_time) may be enabled; a list allows what it names.
func TestUserToolsOutsideTheGraphRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	var out map[string]any
	resp := e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi",
		"userTools": []string{"calculator", "http_request"}}, &out)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	errObj := out["error"].(map[string]any)
	require.Equal(t, "invalid_json", errObj["code"])
	require.Contains(t, errObj["message"], "userTools http_request: not allowed by graph")
	require.Contains(t, errObj["message"], "(calculator, current_time)")
	require.Equal(t, map[string]any{"userTools": []any{"http_request"}}, errObj["details"])
	msgs, err := e.chats.Messages(t.Context(), chatID)
	require.NoError(t, err)
	require.Empty(t, msgs, "nothing was written")

	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi",
		"userTools": []string{"calculator", "current_time"}}, &tk), http.StatusAccepted)
	e.waitRunDone(tk["runId"].(string))
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages/"+tk["userMessageId"].(string)+"/edit", map[string]any{"content": "again",
		"userTools": []string{"http_request"}}, &out), http.StatusBadRequest)
	// A retry may enable other tools than its user message's: checked the
	// same way, and they are the ones its run gets.
	retry := "/api/v1/chats/" + chatID + "/messages/" + tk["messageId"].(string) + "/retry"
	e.mustStatus(e.do("POST", retry, map[string]any{"userTools": []string{"http_request"}}, &out), http.StatusBadRequest)
	var rt map[string]any
	e.mustStatus(e.do("POST", retry, map[string]any{"userTools": []string{"current_time"}}, &rt), http.StatusAccepted)
	e.waitRunDone(rt["runId"].(string))
	rec, err := e.store.GetRun(t.Context(), rt["runId"].(string))
	require.NoError(t, err)
	require.Equal(t, []string{"current_time"}, nodes.AsChatInput(rec.Input).UserTools, "the retry's tools, not its message's")
	e.mustStatus(e.do("POST", retry, map[string]any{}, &rt), http.StatusAccepted)
	e.waitRunDone(rt["runId"].(string))
	rec, err = e.store.GetRun(t.Context(), rt["runId"].(string))
	require.NoError(t, err)
	require.Equal(t, []string{"calculator", "current_time"}, nodes.AsChatInput(rec.Input).UserTools, "without its own, the message's")

	listed := basicGraph("")
	listed["nodes"].([]any)[0].(map[string]any)["data"] = map[string]any{"userTools": []string{"http_request"}}
	_, listedChat := e.newChat(listed)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+listedChat+"/messages", map[string]any{"content": "hi",
		"userTools": []string{"http_request"}}, &tk), http.StatusAccepted)
	e.waitRunDone(tk["runId"].(string))
	out = nil
	e.mustStatus(e.do("POST", "/api/v1/chats/"+listedChat+"/messages", map[string]any{"content": "hi",
		"userTools": []string{"calculator"}}, &out), http.StatusBadRequest)
	require.Contains(t, out["error"].(map[string]any)["message"], "userTools calculator: not allowed", "a list allows only what it names")

	// A graph whose agents take no user tools: they are moot, not refused.
	off := basicGraph("")
	off["nodes"].([]any)[0].(map[string]any)["data"] = map[string]any{"includeUserTools": false}
	_, offChat := e.newChat(off)
	e.mustStatus(e.do("POST", "/api/v1/chats/"+offChat+"/messages", map[string]any{"content": "hi",
		"userTools": []string{"http_request"}}, &tk), http.StatusAccepted)
	e.waitRunDone(tk["runId"].(string))
}

// The request timeout is wired to skip the streaming routes: with a
// timeout that has passed before any handler runs, a plain request is
// cut (503), while the chat calls asking for SSE (a message, an agent
// message, a retry, an edit), the run's event stream, an AG-UI run and an
// OpenAI chat completion are served whole. (Which route streams is
// checked route by route, also continue and resume, in
// TestStreamingRoutes.)
func TestRequestTimeoutSkipsStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.RequestTimeout = time.Nanosecond })
	// The graph and chat go straight into the store: saving them through
	// the API would time out.
	g := basicGraph("")
	g["id"] = "g1"
	body, err := json.Marshal(g)
	require.NoError(t, err)
	require.NoError(t, e.chats.CreateGraph(t.Context(), &chat.Graph{ID: "g1", Name: "basic", Body: body}))
	require.NoError(t, e.chats.CreateChat(t.Context(), &chat.Chat{ID: "c1", GraphID: "g1"}, 0))

	var out map[string]any
	resp := e.do("GET", "/api/v1/chats/c1", nil, &out)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a plain request is cut: %v", out)

	turn := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/c1/messages", map[string]any{"content": "hi"}, nil)
	evs := turn.all(t)
	require.Equal(t, "run_completed", evs[len(evs)-1].Type)
	runID := evs[0].Data["runId"].(string)
	replay := e.openSSE(sseCtx(t), "GET", "/api/v1/runs/"+runID+"/events", nil, nil).all(t)
	require.Equal(t, types(evs), types(replay))
	msgs, err := e.chats.Messages(t.Context(), "c1")
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	answer, user := turn.resp.Header.Get("X-Message-Id"), msgs[0].ID
	for path, body := range map[string]map[string]any{
		"/api/v1/chats/c1/agent-messages":                {"content": "hi", "agentNodeId": "a1"},
		"/api/v1/chats/c1/messages/" + answer + "/retry": {},
		"/api/v1/chats/c1/messages/" + user + "/edit":    {"content": "again"},
	} { // the chat's runs take turns (enqueue)
		evs := e.openSSE(sseCtx(t), "POST", path, body, nil).all(t)
		require.Equal(t, "run_completed", evs[len(evs)-1].Type, path)
	}

	agui := e.openSSE(sseCtx(t), "POST", "/api/v1/ag-ui/graphs/g1", map[string]any{"threadId": "t1", "runId": "r1",
		"messages": []any{map[string]any{"id": "u1", "role": "user", "content": "hi"}}}, nil).all(t)
	require.Equal(t, "RUN_FINISHED", agui[len(agui)-1].Data["type"])

	client := e.openai()
	completion, err := client.Chat.Completions.New(sseCtx(t), openai.ChatCompletionNewParams{Model: "g1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	require.NoError(t, err)
	require.NotEmpty(t, completion.Choices[0].Message.Content)
}
