package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

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
	Error         *Error   `json:"error,omitempty"`
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

// wsConn is one WebSocket connection: a reader that always runs, one
// command worker, one writer draining a bounded send queue, a pinger, and
// one forwarder per followed run. A client whose queue overflows is
// closed with 1008 and resumes with subscribe afterSeq; runs are never
// slowed by it.
type wsConn struct {
	s    *Server
	conn *websocket.Conn
	ctx  context.Context
	stop context.CancelFunc
	out  chan []byte
	cmds chan *clientFrame

	closeOnce sync.Once
	wg        sync.WaitGroup

	mu       sync.Mutex
	working  bool // a worker goroutine runs the queued commands
	subs     map[string]context.CancelFunc
	onCancel map[string]bool // runs to cancel when the client goes away
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
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
	if s.svc.Closing() {
		return chat.ErrShuttingDown
	}
	ip := c.RealIP()
	if !s.wsSlots.acquire(ip) {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeTooManyConnections, RetryAfter: 5,
			Message: "too many WebSocket connections from this client"}
	}
	defer s.wsSlots.release(ip)
	conn, err := websocket.Accept(c.Response(), r, &websocket.AcceptOptions{
		Subprotocols: []string{Subprotocol}, OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		s.log.Info("websocket refused", "err", err)
		return nil // Accept answered the request
	}
	if !authorized {
		_ = conn.Close(CloseUnauthorized, "unauthorized")
		return nil
	}
	conn.SetReadLimit(s.cfg.WSReadLimit)
	wc := &wsConn{s: s, conn: conn, out: make(chan []byte, s.cfg.WSSendQueue), cmds: make(chan *clientFrame, 64),
		subs: map[string]context.CancelFunc{}, onCancel: map[string]bool{}}
	// The connection's commands count against the client's run limit.
	wc.ctx, wc.stop = context.WithCancel(chat.WithClient(s.base, c.RealIP()))
	s.mu.Lock()
	s.wsConns[wc] = struct{}{}
	s.mu.Unlock()
	s.pingOnce.Do(func() { go s.pingLoop() })
	s.metrics.activeStreams.WithLabelValues("websocket").Inc()
	defer s.metrics.activeStreams.WithLabelValues("websocket").Dec()
	wc.serve()
	s.mu.Lock()
	delete(s.wsConns, wc)
	s.mu.Unlock()
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
// two goroutines: this reader and the writer (pings come from one loop
// for all connections; a worker runs only while commands are queued).
func (wc *wsConn) serve() {
	wc.wg.Add(1)
	go wc.writer()
	for {
		_, data, err := wc.conn.Read(context.Background())
		if err != nil {
			switch websocket.CloseStatus(err) {
			case -1:
				if strings.Contains(err.Error(), "read limited") {
					wc.close(CloseTooBig, "frame too big")
				} else {
					wc.close(websocket.StatusNormalClosure, "")
				}
			default:
				wc.close(websocket.StatusNormalClosure, "")
			}
			break
		}
		f, err := decodeClientFrame(data)
		if errors.Is(err, errBadFrame) {
			wc.close(CloseBadFrame, "bad frame: not a JSON object")
			break
		}
		if err != nil {
			wc.sendFrame(serverFrame{Type: "error", ID: f.ID, Error: errorJSON(err)})
			continue
		}
		select {
		case wc.cmds <- f:
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

// enqueue queues one frame. A burst (a replay from the log) may wait for
// room; a queue that stays full for half the write timeout means the
// client cannot keep up: it is closed with 1008 and resumes with
// subscribe afterSeq. Only the connection's own forwarders wait here,
// never a run.
func (wc *wsConn) enqueue(b []byte) error {
	if wc.ctx.Err() != nil {
		return wc.ctx.Err()
	}
	select {
	case wc.out <- b:
		return nil
	default:
	}
	t := time.NewTimer(wc.s.cfg.WriteTimeout / 2)
	defer t.Stop()
	select {
	case wc.out <- b:
		return nil
	case <-wc.ctx.Done():
		return wc.ctx.Err()
	case <-t.C:
		wc.close(CloseTooSlow, "too slow: resubscribe with afterSeq")
		return errors.New("send queue full")
	}
}

func (wc *wsConn) sendFrame(f serverFrame) { _ = wc.enqueue(mustJSON(f)) }

func (wc *wsConn) sendError(id string, err error) {
	wc.sendFrame(serverFrame{Type: "error", ID: id, Error: errorJSON(err)})
}

func (wc *wsConn) writer() {
	defer wc.wg.Done()
	for {
		if wc.ctx.Err() != nil {
			return // closing: leave the line free for the close frame
		}
		select {
		case b := <-wc.out:
			ctx, cancel := context.WithTimeout(context.Background(), wc.s.cfg.WriteTimeout)
			err := wc.conn.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				wc.close(CloseTooSlow, "write timed out")
				return
			}
		case <-wc.ctx.Done():
			return
		}
	}
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
	ctx, cancel := context.WithTimeout(wc.ctx, wc.s.cfg.WSPing)
	defer cancel()
	if err := wc.conn.Ping(ctx); err != nil && wc.ctx.Err() == nil {
		wc.close(websocket.StatusGoingAway, "ping timed out")
	}
}

// worker runs the queued commands in order and exits when none is left.
func (wc *wsConn) worker() {
	defer wc.wg.Done()
	for {
		select {
		case f := <-wc.cmds:
			wc.command(f)
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
			UserMessageID: t.UserMessageID, ChatID: t.ChatID})
		wc.follow(f.ID, t.RunID, 0)
	}
}

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
		err := wc.s.follow(ctx, runID, after, func(f frame) error {
			b := make([]byte, 0, len(f.JSON)+26)
			b = append(b, `{"type":"event","event":`...)
			b = append(b, f.JSON...)
			b = append(b, '}')
			return wc.enqueue(b)
		}, nil)
		if err != nil && ctx.Err() == nil && !errors.Is(err, runtime.ErrRunNotFound) {
			wc.sendError(id, err)
		}
		wc.mu.Lock()
		if wc.subs[runID] != nil && ctx.Err() == nil {
			delete(wc.subs, runID)
		}
		wc.mu.Unlock()
	}()
}
