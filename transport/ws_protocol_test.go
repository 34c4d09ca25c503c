package transport_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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

// rawWS is a WebSocket client on a bare TCP connection: it writes the
// frames it is given, masked or not, and never answers a ping.
type rawWS struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// dialRawWS opens a connection and completes the handshake.
func (e *env) dialRawWS(t *testing.T) *rawWS {
	t.Helper()
	host := strings.TrimPrefix(e.url, "http://")
	conn, err := net.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /api/v1/ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chatgraph.v1\r\n\r\n", host)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return &rawWS{t: t, conn: conn, br: br}
}

// write sends one final frame of opcode op.
func (c *rawWS) write(op byte, payload []byte, masked bool) {
	c.t.Helper()
	b := []byte{0x80 | op}
	maskBit := byte(0)
	if masked {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n <= 125:
		b = append(b, maskBit|byte(n))
	default:
		b = append(b, maskBit|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	}
	p := append([]byte(nil), payload...)
	if masked {
		key := [4]byte{0x1f, 0x2e, 0x3d, 0x4c}
		b = append(b, key[:]...)
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	_, err := c.conn.Write(append(b, p...))
	require.NoError(c.t, err)
}

// readFrame reads the server's next frame: its opcode and payload.
func (c *rawWS) readFrame() (op byte, payload []byte) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	h := make([]byte, 2)
	_, err := io.ReadFull(c.br, h)
	require.NoError(c.t, err, "no close frame came")
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		x := make([]byte, 2)
		_, err = io.ReadFull(c.br, x)
		n = uint64(binary.BigEndian.Uint16(x))
	case 127:
		x := make([]byte, 8)
		_, err = io.ReadFull(c.br, x)
		n = binary.BigEndian.Uint64(x)
	}
	require.NoError(c.t, err)
	payload = make([]byte, n)
	_, err = io.ReadFull(c.br, payload)
	require.NoError(c.t, err)
	return h[0] & 0x0f, payload
}

// readText reads frames up to the next text frame and returns it.
func (c *rawWS) readText() string {
	c.t.Helper()
	for {
		if op, p := c.readFrame(); op == 0x1 {
			return string(p)
		}
	}
}

// readClose reads frames up to the server's close frame and returns its
// code and reason, and the text frames before it.
func (c *rawWS) readClose() (code int, reason string, texts []string) {
	c.t.Helper()
	for {
		switch op, p := c.readFrame(); op {
		case 0x1:
			texts = append(texts, string(p))
		case 0x8:
			require.GreaterOrEqual(c.t, len(p), 2, "a close frame without a code")
			return int(binary.BigEndian.Uint16(p)), string(p[2:]), texts
		}
	}
}

// A frame RFC 6455 does not allow closes the connection with 1002, a text
// frame that is not UTF-8 with 1007; 1000 answers a client's own close.
func TestWebSocketProtocolViolationsCloseCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	frame := []byte(`{"id":"u","type":"unsubscribe","runId":"r_x"}`)
	for _, tc := range []struct {
		name   string
		op     byte
		frame  []byte
		masked bool
		code   int
	}{
		{"an unmasked frame", 0x1, frame, false, 1002},
		{"invalid UTF-8 in a text frame", 0x1, []byte("{\"id\":\"u\",\"type\":\"unsubscribe\",\"runId\":\"r_\xff\"}"), true, 1007},
		{"the client's close", 0x8, []byte{0x03, 0xe8}, true, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dialRawWS(t)
			c.write(0x1, frame, true) // a valid frame is answered
			require.Contains(t, c.readText(), `"type":"ack"`)
			c.write(tc.op, tc.frame, tc.masked)
			code, reason, texts := c.readClose()
			require.Equal(t, tc.code, code, "reason %q", reason)
			require.Empty(t, texts, "the frame was answered")
		})
	}
}

// A client that does not answer a ping within the ping interval is
// closed with 4408, not with 1001 (which says the server shuts down).
func TestWebSocketPingTimeoutCloseCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.WSPing = 100 * time.Millisecond })
	c := e.dialRawWS(t) // it never answers a ping
	code, reason, _ := c.readClose()
	require.Equal(t, 4408, code, "reason %q", reason)
	require.Equal(t, "ping timed out", reason)
}
