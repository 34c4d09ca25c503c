package transport_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// Every refused upgrade answers the API's JSON error, with the status
// that says why.
func TestWebSocketRefusedUpgradesAnswerJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.AllowedOrigins = []string{"*.trusted.example"} })
	handshake := func() map[string]string {
		return map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	}
	for _, tc := range []struct {
		name   string
		method string
		change func(h map[string]string)
		status int
		code   string
	}{
		{"a foreign origin", "GET", func(h map[string]string) { h["Origin"] = "http://evil.example" }, http.StatusForbidden, "cross_origin"},
		{"an origin that is no URL", "GET", func(h map[string]string) { h["Origin"] = "null" }, http.StatusForbidden, "cross_origin"},
		{"version 12", "GET", func(h map[string]string) { h["Sec-WebSocket-Version"] = "12" }, http.StatusUpgradeRequired, "invalid_json"},
		{"no version", "GET", func(h map[string]string) { delete(h, "Sec-WebSocket-Version") }, http.StatusUpgradeRequired, "invalid_json"},
		{"no key", "GET", func(h map[string]string) { delete(h, "Sec-WebSocket-Key") }, http.StatusBadRequest, "invalid_json"},
		{"a key of 5 bytes", "GET", func(h map[string]string) { h["Sec-WebSocket-Key"] = "c2hvcnQ=" }, http.StatusBadRequest, "invalid_json"},
		{"Connection without Upgrade", "GET", func(h map[string]string) { h["Connection"] = "keep-alive" }, http.StatusBadRequest, "invalid_json"},
		{"POST", "POST", func(map[string]string) {}, http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handshake()
			tc.change(h)
			resp := e.send(tc.method, "/api/v1/ws", "", h)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, "%s", b)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var body errBody
			require.NoError(t, json.Unmarshal(b, &body), "%s", b)
			require.Equal(t, tc.code, body.Error.Code)
			require.NotEmpty(t, body.Error.Message)
			if tc.status == http.StatusUpgradeRequired {
				require.Equal(t, "13", resp.Header.Get("Sec-WebSocket-Version"))
				require.Equal(t, "websocket", resp.Header.Get("Upgrade"))
			}
		})
	}
	// The server's own origin and an allowed one are taken.
	for _, origin := range []string{e.url, "https://ui.trusted.example"} {
		conn, _, err := e.dialWS(&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}}, "")
		require.NoError(t, err, origin)
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}
}

// Commands and the errors of frames that could not be decoded are
// answered in the order they were sent.
func TestWebSocketAnswersInSendOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, chatID := e.newChat(basicGraph(""))
	c := e.ws()
	var sent []string
	c.send(map[string]any{"id": "A", "type": "stream_chat", "chatId": chatID, "content": "hi"})
	sent = append(sent, "A")
	for i := range 40 {
		id := fmt.Sprint(i)
		c.send(map[string]any{"id": "s" + id, "type": "subscribe", "runId": "r_nope"})
		require.NoError(t, c.conn.Write(c.ctx, websocket.MessageText, fmt.Appendf(nil, `{"id":"d%s","type":"stream_chat","chatId":5}`, id)))
		c.send(map[string]any{"id": "u" + id, "type": "what"})
		sent = append(sent, "s"+id, "d"+id, "u"+id)
	}
	var got []string
	for len(got) < len(sent) {
		f := c.read()
		if f["type"] == "event" {
			continue
		}
		got = append(got, f["id"].(string))
		if f["id"] != "A" {
			require.Equal(t, "error", f["type"], "%v", f)
		}
	}
	require.Equal(t, sent, got)
}
