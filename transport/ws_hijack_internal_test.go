package transport

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hijacker hands out a connection and a reader that already holds bytes
// the client sent right behind its handshake.
type hijacker struct {
	http.ResponseWriter
	conn  net.Conn
	early string
}

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	br := bufio.NewReader(io.MultiReader(strings.NewReader(h.early), h.conn))
	if _, err := br.Peek(len(h.early)); err != nil {
		return nil, nil, err
	}
	return h.conn, bufio.NewReadWriter(br, bufio.NewWriter(h.conn)), nil
}

// Bytes net/http read past the handshake before the hijack are in the
// buffer of the reader the upgrade hands on, where coder/websocket looks
// for them (it keeps what the reader has buffered and reads the rest from
// the connection itself): left behind the buffer they were lost, and the
// client's next frame read from its middle (a protocol error).
func TestHijackKeepsBytesReadBeforeIt(t *testing.T) {
	for _, early := range []string{"\x81\x85", strings.Repeat("x", 3*wsReadBuffer)} {
		server, client := net.Pipe()
		h := hijacker{conn: server, early: early}
		conn, brw, err := wsUpgrade{hj: h, wire: &wireWriter{}}.Hijack()
		require.NoError(t, err)
		require.Equal(t, len(early), brw.Reader.Buffered(), "the early bytes are buffered")
		// What coder/websocket does with the reader after the hijack.
		b, _ := brw.Reader.Peek(brw.Reader.Buffered())
		brw.Reader.Reset(io.MultiReader(bytes.NewReader(b), conn))
		go func() { _, _ = client.Write([]byte("rest")); _ = client.Close() }()
		got, err := io.ReadAll(brw.Reader)
		require.NoError(t, err)
		require.Equal(t, early+"rest", string(got))
		_ = conn.Close()
	}
}
