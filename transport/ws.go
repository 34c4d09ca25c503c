package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// Subprotocol is the WebSocket subprotocol of the wire contract.
const Subprotocol = "chatgraph.v1"

// tokenProtocolPrefix marks a Sec-WebSocket-Protocol entry carrying the
// bearer token (for browsers, which cannot set headers). It is never
// echoed back: the server only ever selects Subprotocol.
const tokenProtocolPrefix = "chatgraph.token."

// maxSubscriptions bounds the runs one connection follows at once.
const maxSubscriptions = 256

// clientFrame is every field a client frame may carry.
type clientFrame struct {
	ID                string   `json:"id"`
	Type              string   `json:"type"`
	ChatID            string   `json:"chatId"`
	MessageID         string   `json:"messageId"`
	RunID             string   `json:"runId"`
	ClientRequestID   string   `json:"clientRequestId"`
	AgentNodeID       string   `json:"agentNodeId"`
	Content           string   `json:"content"`
	ParentID          *string  `json:"parentId"`
	UserTools         []string `json:"userTools"`
	MultitaskStrategy string   `json:"multitaskStrategy"`
	OnDisconnect      string   `json:"onDisconnect"`
	Resume            any      `json:"resume"`
	Value             any      `json:"value"`
	AfterSeq          int64    `json:"afterSeq"`
	Action            string   `json:"action"` // a cancel's: "interrupt" (the default) or "rollback"
	// idempotent: the client named the call's clientRequestId itself (a
	// WebSocket frame's id stands in for a missing one, for cancel only):
	// the call sent again is answered, not run again (chat.Request.Idempotent).
	idempotent bool
	// conn names the WebSocket connection the frame came on (empty over
	// HTTP): a cancel from it may name a call by clientRequestId alone.
	conn string
}

// serverFrame is an ack or an error (events are written pre-encoded).
type serverFrame struct {
	Type          string   `json:"type"`
	ID            string   `json:"id,omitempty"`
	RunID         string   `json:"runId,omitempty"`
	MessageID     string   `json:"messageId,omitempty"`
	UserMessageID string   `json:"userMessageId,omitempty"`
	ChatID        string   `json:"chatId,omitempty"`
	Status        string   `json:"status,omitempty"`
	RunIDs        []string `json:"runIds,omitempty"`
	// Replayed: the ack of a call sent again (an idempotent
	// clientRequestId): the first call's run, nothing started.
	Replayed bool   `json:"replayed,omitempty"`
	Error    *Error `json:"error,omitempty"`
}

// errBadFrame: a client frame that is not a JSON object.
var errBadFrame = errors.New("bad frame")

// decodeClientFrame parses one client frame. A frame that is not a JSON
// object is errBadFrame (the connection is closed with 4400); a frame
// with wrong field types or no type is an *Error answered in an error
// frame.
func decodeClientFrame(b []byte) (*clientFrame, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return nil, errBadFrame
	}
	var f clientFrame
	if err := json.Unmarshal(t, &f); err != nil {
		// Keep the id for the error frame when it can be read.
		var id struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(t, &id)
		f.ID = id.ID
		e := jsonError(err)
		return &f, e
	}
	if f.Type == "" {
		return &f, badRequest("the frame has no type")
	}
	return &f, nil
}

// wsCommand is a client frame queued for the connection's worker: a
// frame to run, or, with err, the error answering a frame that could not
// be decoded. Both wait their turn in the one queue, so that every frame
// is answered in the order it was sent.
type wsCommand struct {
	f   *clientFrame
	err error
}

// wsConn is one WebSocket connection: a reader that always runs, a
// command worker while commands are queued, and one forwarder per
// followed run. Whoever has a frame to send writes it (one write at a
// time); a write the client does not take within half the write timeout
// closes the connection with 1008, and the client resumes with subscribe
// afterSeq. Runs are never slowed by a client: they hand their events to
// the hub, which never blocks. An idle connection holds one goroutine
// (its reader) and no send buffer.
type wsConn struct {
	s    *Server
	id   string // the connection's name in its calls' cancel scopes (chat.Request.Conn)
	conn *websocket.Conn
	ctx  context.Context
	stop context.CancelFunc
	cmds chan wsCommand

	closeOnce sync.Once
	wg        sync.WaitGroup

	wire  *wireWriter // what coder/websocket's writer flushes into
	q     sendQueue   // frames waiting for the connection's sender (wswrite.go)
	stall *time.Timer // fires when a write takes too long (the sender's; made at its first write)

	mu       sync.Mutex
	working  bool // a worker goroutine runs the queued commands
	subs     map[string]context.CancelFunc
	onCancel map[string]bool // runs to cancel when the client goes away before their end
}

// Buffers of a WebSocket connection: its reader's and its writer's, kept
// for the connection's life. A client frame is a command of a few hundred
// bytes; larger reads and writes bypass them.
const (
	wsReadBuffer  = 1024
	wsWriteBuffer = 1024
)

// wsUpgrade hands coder/websocket a hijacked connection with buffers of
// wsReadBuffer and wsWriteBuffer bytes instead of net/http's pair of 4 KiB
// ones, which an idle connection would otherwise hold for its whole life.
// Its writer flushes into wire, which Hijack points at the connection.
type wsUpgrade struct {
	http.ResponseWriter
	hj   http.Hijacker
	wire *wireWriter
}

func (w wsUpgrade) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(conn, wsReadBuffer)
	if n := brw.Reader.Buffered(); n > 0 {
		// The client may have sent frames right behind its handshake, and
		// net/http may have read them already. They must be in the new
		// reader's buffer, not behind it: coder/websocket keeps only what
		// the reader has buffered and reads the rest from conn itself.
		b, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn), max(n, wsReadBuffer))
		if _, err := br.Peek(n); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	w.wire.conn, w.wire.raw = conn, rawConn(conn)
	return conn, bufio.NewReadWriter(br, bufio.NewWriterSize(w.wire, wsWriteBuffer)), nil
}

func isUpgrade(r *http.Request) bool { return headerHasToken(r.Header, "Upgrade", "websocket") }

// headerHasToken reports whether one of the comma-separated values of
// header name is token (case-insensitively).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// handshakeRefusal is what coder/websocket's Accept would refuse in an
// upgrade request, as the API's error (Accept would answer text/plain):
// a handshake RFC 6455 §4.2.1 does not allow is 400; a version other than
// 13 is 426 with Sec-WebSocket-Version: 13 (§4.2.2, §4.4); a browser
// page of another origin is 403 cross_origin. nil: Accept takes it. The
// route takes GET alone: the router answers other methods 405. Headers
// the answer needs are set on h.
func (s *Server) handshakeRefusal(r *http.Request, h http.Header) *Error {
	switch {
	case !r.ProtoAtLeast(1, 1):
		return badRequest("a WebSocket handshake needs HTTP/1.1 or later, not %s", r.Proto)
	case !headerHasToken(r.Header, "Connection", "upgrade"):
		return badRequest("a WebSocket handshake needs Connection: Upgrade")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		h.Set("Sec-WebSocket-Version", "13")
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
		return newError(http.StatusUpgradeRequired, CodeInvalidJSON,
			"WebSocket version %q is not supported: the server speaks version 13", r.Header.Get("Sec-WebSocket-Version"))
	case !validWebSocketKey(r.Header.Values("Sec-WebSocket-Key")):
		return badRequest("a WebSocket handshake needs one Sec-WebSocket-Key: 16 bytes in base64")
	case !s.websocketOriginAllowed(r):
		return newError(http.StatusForbidden, CodeCrossOrigin,
			"a WebSocket from origin %q is refused: it is not the server's own nor in --allowed-origins", r.Header.Get("Origin"))
	}
	return nil
}

func validWebSocketKey(keys []string) bool {
	if len(keys) != 1 {
		return false
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0]))
	return err == nil && len(k) == 16
}

// websocketOriginAllowed is the rule Accept applies with OriginPatterns:
// a request without Origin is not a browser page's; a browser's Origin
// must name the request's Host or a host matching --allowed-origins
// (host patterns: originPatternAllowed).
func (s *Server) websocketOriginAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host) || s.originPatternAllowed(u.Host)
}

// websocket is GET /api/v1/ws.
func (s *Server) websocket(c echo.Context) error {
	r := c.Request()
	tok := bearer(r)
	if tok == "" {
		tok = r.URL.Query().Get("token")
	}
	if tok == "" {
		for _, p := range websocketProtocols(r) {
			if strings.HasPrefix(p, tokenProtocolPrefix) {
				tok = strings.TrimPrefix(p, tokenProtocolPrefix)
			}
		}
	}
	authorized := s.tokenOK(tok)
	if !isUpgrade(r) {
		if !authorized {
			return newError(http.StatusUnauthorized, CodeUnauthorized, "missing or invalid bearer token")
		}
		return newError(http.StatusBadRequest, CodeInvalidJSON, "this route needs a WebSocket upgrade (subprotocol %s)", Subprotocol)
	}
	if e := s.handshakeRefusal(r, c.Response().Header()); e != nil {
		return e
	}
	if s.svc.Closing() {
		return chat.ErrShuttingDown
	}
	ip := c.RealIP()
	if !s.wsSlots.acquire(ip) {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeTooManyConnections, RetryAfter: 5,
			Message: "too many WebSocket connections from this client"}
	}
	w := c.Response()
	wire := &wireWriter{}
	conn, err := websocket.Accept(wsUpgrade{ResponseWriter: w, hj: w, wire: wire}, r, &websocket.AcceptOptions{
		Subprotocols: []string{Subprotocol}, OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		s.wsSlots.release(ip)
		s.log.Info("websocket refused", "err", err)
		return nil // Accept answered the request (the hijack failed: handshakeRefusal let it through)
	}
	if !authorized {
		_ = conn.Close(CloseUnauthorized, "unauthorized")
		s.wsSlots.release(ip)
		return nil
	}
	// BodyLimit unless set (see New): a counter in coder/websocket, no
	// buffer of that size is held by the connection.
	conn.SetReadLimit(s.cfg.WSReadLimit)
	wc := &wsConn{s: s, id: chat.NewID("ws_"), conn: conn, wire: wire, cmds: make(chan wsCommand, 64),
		subs: map[string]context.CancelFunc{}, onCancel: map[string]bool{}}
	// The connection's commands count against the client's run limit.
	wc.ctx, wc.stop = context.WithCancel(chat.WithClient(s.base, ip))
	// Registered with Shutdown's wait under one lock: a connection
	// accepted while Shutdown closes the others (it passed the Closing
	// check before) is closed here rather than served past Shutdown.
	s.mu.Lock()
	if s.wsClosed {
		s.mu.Unlock()
		wc.stop()
		_ = conn.Close(CloseShutdown, "server shutting down")
		s.wsSlots.release(ip)
		return nil
	}
	s.wsConns[wc] = struct{}{}
	s.wsWG.Add(1)
	s.mu.Unlock()
	s.pingOnce.Do(func() { go s.pingLoop() })
	s.metrics.activeStreams.WithLabelValues("websocket").Inc()
	// The connection is hijacked: it is served on a goroutine of its own,
	// and the handler returns, so that net/http's state for the request
	// and the handler chain's stack are not kept for the connection's
	// life. Shutdown waits for it.
	go func() {
		defer s.wsWG.Done()
		wc.serve()
		s.mu.Lock()
		delete(s.wsConns, wc)
		s.mu.Unlock()
		s.metrics.activeStreams.WithLabelValues("websocket").Dec()
		s.wsSlots.release(ip)
	}()
	return nil
}

func websocketProtocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// serve runs the connection until it closes. An idle connection holds
// one goroutine: this reader (pings come from one loop for all
// connections; a worker runs only while commands are queued).
func (wc *wsConn) serve() {
	for {
		typ, data, err := wc.conn.Read(context.Background())
		if err != nil {
			wc.close(readCloseStatus(err))
			break
		}
		if typ == websocket.MessageText && !utf8.Valid(data) {
			// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
			// connection.
			wc.close(CloseInvalidUTF8, "invalid UTF-8 in a text frame")
			break
		}
		f, err := decodeClientFrame(data)
		if errors.Is(err, errBadFrame) {
			wc.close(CloseBadFrame, "bad frame: not a JSON object")
			break
		}
		// A frame that could not be decoded is answered by the worker too,
		// in its turn.
		select {
		case wc.cmds <- wsCommand{f: f, err: err}:
		case <-wc.ctx.Done():
		}
		if wc.ctx.Err() != nil {
			break
		}
		wc.mu.Lock()
		if !wc.working {
			wc.working = true
			wc.wg.Add(1)
			go wc.worker()
		}
		wc.mu.Unlock()
	}
	wc.stop()
	wc.wg.Wait()
	wc.mu.Lock()
	var cancel []string
	for id := range wc.onCancel {
		cancel = append(cancel, id)
	}
	wc.mu.Unlock()
	for _, id := range cancel {
		wc.s.cancelRunQuietly(id)
	}
}

// readCloseStatus is how the server closes a connection whose read
// failed: after the client's close frame (coder/websocket has answered
// it) or when the connection simply ended, 1000; a message over the read
// limit, 1009; anything else the reader refused (an unmasked frame,
// reserved bits or opcodes, a bad control or close frame) is a protocol
// violation, 1002 (for most of them coder/websocket has sent its own
// 1002 already, with its reason).
func readCloseStatus(err error) (websocket.StatusCode, string) {
	var ne net.Error
	switch {
	case websocket.CloseStatus(err) != -1, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return websocket.StatusNormalClosure, ""
	case errors.Is(err, websocket.ErrMessageTooBig):
		return CloseTooBig, "frame too big"
	}
	return CloseProtocolError, "protocol error"
}

// close ends the connection with a status that says why. Idempotent.
func (wc *wsConn) close(code websocket.StatusCode, reason string) {
	wc.closeOnce.Do(func() {
		if code == CloseTooSlow {
			wc.s.metrics.droppedSubs.WithLabelValues("websocket").Inc()
		}
		wc.stop()
		go func() { _ = wc.conn.Close(code, reason) }()
	})
}

// stalled closes a connection whose write has waited half the write
// timeout.
func (wc *wsConn) stalled() { wc.close(CloseTooSlow, "too slow: resubscribe with afterSeq") }

func (wc *wsConn) sendFrame(f serverFrame) { _ = wc.send(mustJSON(f)) }

func (wc *wsConn) sendError(id string, err error) {
	wc.sendFrame(serverFrame{Type: "error", ID: id, Error: errorJSON(err)})
}

// pingLoop pings every WebSocket connection every WSPing (one loop for
// the server; each ping waits for its pong in a short-lived goroutine).
// A connection that does not answer within WSPing is closed.
func (s *Server) pingLoop() {
	t := time.NewTicker(s.cfg.WSPing)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.base.Done():
			return
		}
		s.mu.Lock()
		conns := make([]*wsConn, 0, len(s.wsConns))
		for c := range s.wsConns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, wc := range conns {
			go wc.ping()
		}
	}
}

func (wc *wsConn) ping() {
	if wc.ctx.Err() != nil {
		return
	}
	// Not under wc.ctx: coder/websocket closes the connection at once
	// when a write's context ends during the write, and the pings of one
	// connection follow each other WSPing apart — a ping being written as
	// the connection is closed for a reason (the ping before it timed out,
	// say) would cut off the close frame that gives the reason.
	ctx, cancel := context.WithTimeout(context.Background(), wc.s.cfg.WSPing)
	defer cancel()
	if err := wc.conn.Ping(ctx); err != nil && wc.ctx.Err() == nil {
		wc.close(ClosePingTimeout, "ping timed out")
	}
}

// worker runs the queued commands in order and exits when none is left.
func (wc *wsConn) worker() {
	defer wc.wg.Done()
	for {
		select {
		case c := <-wc.cmds:
			if c.err != nil {
				wc.sendError(c.f.ID, c.err)
			} else {
				wc.command(c.f)
			}
			continue
		case <-wc.ctx.Done():
		default:
		}
		wc.mu.Lock()
		if len(wc.cmds) > 0 && wc.ctx.Err() == nil {
			wc.mu.Unlock()
			continue
		}
		wc.working = false
		wc.mu.Unlock()
		return
	}
}

// command runs one client frame: the chat service's commands through the
// command table (answered with an ack, and for a started run a
// subscription to its events), subscribe and unsubscribe here.
func (wc *wsConn) command(f *clientFrame) {
	ctx, cancel := context.WithTimeout(wc.ctx, wc.s.cfg.RequestTimeout)
	defer cancel()
	switch f.Type {
	case "subscribe":
		if f.RunID == "" {
			wc.sendError(f.ID, badRequest("subscribe needs runId"))
			return
		}
		if f.AfterSeq < 0 {
			wc.sendError(f.ID, badRequest("afterSeq must not be negative"))
			return
		}
		if err := wc.s.runExists(ctx, f.RunID); err != nil {
			wc.sendError(f.ID, err)
			return
		}
		wc.sendFrame(serverFrame{Type: "ack", ID: f.ID, RunID: f.RunID})
		wc.follow(f.ID, f.RunID, f.AfterSeq)
		return
	case "unsubscribe":
		wc.mu.Lock()
		if stop := wc.subs[f.RunID]; stop != nil {
			stop()
			delete(wc.subs, f.RunID)
		}
		wc.mu.Unlock()
		wc.sendFrame(serverFrame{Type: "ack", ID: f.ID, RunID: f.RunID})
		return
	}
	f.idempotent, f.conn = f.ClientRequestID != "", wc.id
	if f.Type != "cancel" && f.ClientRequestID == "" {
		// A frame's id is its client request id unless it names one.
		f.ClientRequestID = f.ID
	}
	res, known, err := wc.s.exec(ctx, f)
	switch {
	case !known:
		wc.sendError(f.ID, badRequest("unknown frame type %q", f.Type))
	case err != nil:
		wc.sendError(f.ID, err)
	case res.cancel != nil:
		wc.sendFrame(serverFrame{Type: "ack", ID: f.ID, RunID: f.RunID, ChatID: f.ChatID, Status: res.cancel.Status, RunIDs: res.cancel.RunIDs})
	default:
		t := res.ticket
		if f.OnDisconnect == "cancel" {
			wc.mu.Lock()
			wc.onCancel[t.RunID] = true
			wc.mu.Unlock()
		}
		wc.sendFrame(serverFrame{Type: "ack", ID: f.ID, RunID: t.RunID, MessageID: t.MessageID,
			UserMessageID: t.UserMessageID, ChatID: t.ChatID, Replayed: t.Replayed})
		wc.follow(f.ID, t.RunID, 0)
	}
}

// wsEvents is a WebSocket follower's sender: each frame goes out wrapped
// in the protocol's event frame. A group commit's publisher may queue the
// frames itself (queuer) while the follower waits.
type wsEvents struct {
	wc *wsConn
	b  []byte // reused: send is done with its bytes when it returns
}

func (w *wsEvents) send(f frame) error {
	w.b = appendEventFrame(w.b[:0], f)
	return w.wc.send(w.b)
}

func (*wsEvents) flush() error                            { return nil }
func (w *wsEvents) queue(f frame) (start bool, err error) { return w.wc.queueEvent(f) }
func (w *wsEvents) startSender()                          { w.wc.startSender() }
func (w *wsEvents) sendNow()                              { w.wc.sendNow() }

// follow starts (or restarts) forwarding runID's events after seq.
func (wc *wsConn) follow(id, runID string, after int64) {
	wc.mu.Lock()
	if stop := wc.subs[runID]; stop != nil {
		stop()
	} else if len(wc.subs) >= maxSubscriptions {
		wc.mu.Unlock()
		wc.sendError(id, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Message: "too many subscriptions on this connection"})
		return
	}
	ctx, stop := context.WithCancel(wc.ctx)
	wc.subs[runID] = stop
	wc.wg.Add(1)
	wc.mu.Unlock()
	go func() {
		defer wc.wg.Done()
		defer stop()
		err := wc.s.follow(ctx, runID, after, &wsEvents{wc: wc}, nil)
		if err != nil && ctx.Err() == nil && !errors.Is(err, runtime.ErrRunNotFound) {
			wc.sendError(id, err)
		}
		wc.mu.Lock()
		if wc.subs[runID] != nil && ctx.Err() == nil {
			delete(wc.subs, runID)
		}
		if err == nil {
			// The client has the run's end: leaving now cancels nothing
			// (an interrupted run keeps waiting for its answer).
			delete(wc.onCancel, runID)
		}
		wc.mu.Unlock()
	}()
}
