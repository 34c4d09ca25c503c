package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
)

// messageJSON is a message on the wire.
type messageJSON struct {
	ID          string    `json:"id"`
	ParentID    *string   `json:"parentId"`
	Role        string    `json:"role"`
	Content     string    `json:"content"`
	RunID       *string   `json:"runId"`
	Status      string    `json:"status"`
	AgentNodeID string    `json:"agentNodeId,omitempty"`
	UserTools   []string  `json:"userTools,omitempty"`
	Error       string    `json:"error,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toMessageJSON(m *chat.Message) messageJSON {
	return messageJSON{ID: m.ID, ParentID: nullable(m.ParentID), Role: string(m.Role), Content: m.Content, RunID: nullable(m.RunID),
		Status: string(m.Status), AgentNodeID: m.AgentNodeID, UserTools: m.UserTools, Error: m.Error,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
}

// chatJSON is a chat on the wire; Messages is its message tree in
// creation order (nil, so left out, in listings; [] for an empty chat):
// the whole tree, or its first chatMessagesLimit messages and, in
// MessagesCursor, the cursor of GET /chats/{id}/messages that goes on
// from there.
type chatJSON struct {
	ID             string        `json:"id"`
	GraphID        string        `json:"graphId"`
	Title          string        `json:"title,omitempty"`
	ActiveLeafID   *string       `json:"activeLeafId"`
	Messages       []messageJSON `json:"messages,omitzero"`
	MessagesCursor string        `json:"messagesCursor,omitempty"`
	CreatedAt      time.Time     `json:"createdAt"`
	UpdatedAt      time.Time     `json:"updatedAt"`
}

// chatMessagesLimit is how many messages GET /chats/{id} embeds at most
// (the most a page of GET /chats/{id}/messages holds).
const chatMessagesLimit = maxPageLimit

func toChatJSON(c *chat.Chat, msgs []*chat.Message) chatJSON {
	out := chatJSON{ID: c.ID, GraphID: c.GraphID, Title: c.Title, ActiveLeafID: nullable(c.ActiveLeafID),
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	if msgs != nil {
		out.Messages = make([]messageJSON, len(msgs))
		for i, m := range msgs {
			out.Messages[i] = toMessageJSON(m)
		}
	}
	return out
}

type createChatBody struct {
	GraphID string `json:"graphId" validate:"required"`
	Title   string `json:"title" validate:"max=200"`
	ID      string `json:"id" validate:"omitempty,ident"`
}

func (s *Server) createChat(c echo.Context) error {
	var b createChatBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := s.chats.GetGraph(ctx, b.GraphID); err != nil {
		return err
	}
	id := b.ID
	if id == "" {
		id = chat.NewID("c_")
	}
	chat := &chat.Chat{ID: id, GraphID: b.GraphID, Title: b.Title}
	if err := s.svc.CreateChat(ctx, chat); err != nil {
		return err
	}
	out := toChatJSON(chat, nil)
	out.Messages = []messageJSON{}
	return created(c, out)
}

// getChat answers the chat with its first chatMessagesLimit messages;
// when it has more, messagesCursor and a Link rel="next" name the page
// of GET /chats/{id}/messages that follows.
func (s *Server) getChat(c echo.Context) error {
	ctx := c.Request().Context()
	chat, err := s.chats.GetChat(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	msgs, err := s.chats.ListMessages(ctx, chat.ID, 0, chatMessagesLimit+1)
	if err != nil {
		return err
	}
	more := len(msgs) > chatMessagesLimit
	if more {
		msgs = msgs[:chatMessagesLimit]
	}
	out := toChatJSON(chat, msgs)
	if out.Messages == nil {
		out.Messages = []messageJSON{}
	}
	if more {
		out.MessagesCursor = encodeSeqCursor(msgs[len(msgs)-1].Seq)
		setLink(c, "/api/v1/chats/"+url.PathEscape(chat.ID)+"/messages", url.Values{}, chatMessagesLimit, out.MessagesCursor)
	}
	return c.JSON(http.StatusOK, out)
}

// listMessages answers one page of a chat's messages in creation order
// (see pageOf; the cursor is a message's place in that order).
func (s *Server) listMessages(c echo.Context) error {
	limit, after, err := seqPageOf(c)
	if err != nil {
		return err
	}
	msgs, err := s.chats.ListMessages(c.Request().Context(), c.Param("id"), after, limit)
	if err != nil {
		return err
	}
	if len(msgs) == limit {
		setNextLink(c, limit, encodeSeqCursor(msgs[len(msgs)-1].Seq))
	}
	out := make([]messageJSON, len(msgs))
	for i, m := range msgs {
		out[i] = toMessageJSON(m)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) listChats(c echo.Context) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	chats, err := s.chats.ListChats(c.Request().Context(), c.QueryParam("graphId"), p)
	if err != nil {
		return err
	}
	if len(chats) > 0 {
		last := chats[len(chats)-1]
		setNext(c, p, len(chats), chat.Cursor{At: last.CreatedAt, ID: last.ID})
	}
	out := make([]chatJSON, len(chats))
	for i, ch := range chats {
		out[i] = toChatJSON(ch, nil)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) deleteChat(c echo.Context) error {
	if err := s.chats.DeleteChat(c.Request().Context(), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type activeLeafBody struct {
	MessageID string `json:"messageId" validate:"required"`
}

// setActiveLeaf switches the branch the chat shows.
func (s *Server) setActiveLeaf(c echo.Context) error {
	var b activeLeafBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := s.chats.SetActiveLeaf(ctx, c.Param("id"), b.MessageID); err != nil {
		return err
	}
	return s.getChat(c)
}

// Request bodies of the five chat calls.

type sendBody struct {
	Content           string   `json:"content" validate:"required,max=200000"`
	ParentID          *string  `json:"parentId" validate:"omitempty,max=128"`
	ClientRequestID   string   `json:"clientRequestId" validate:"omitempty,clientid"`
	UserTools         []string `json:"userTools" validate:"max=64,dive,max=64"`
	MultitaskStrategy string   `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string   `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

type agentSendBody struct {
	AgentNodeID       string   `json:"agentNodeId" validate:"required,max=128"`
	Content           string   `json:"content" validate:"required,max=200000"`
	ParentID          *string  `json:"parentId" validate:"omitempty,max=128"`
	ClientRequestID   string   `json:"clientRequestId" validate:"omitempty,clientid"`
	UserTools         []string `json:"userTools" validate:"max=64,dive,max=64"`
	MultitaskStrategy string   `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string   `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

type continueBody struct {
	Resume            any    `json:"resume"`
	Value             any    `json:"value"`
	ClientRequestID   string `json:"clientRequestId" validate:"omitempty,clientid"`
	MultitaskStrategy string `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

type retryBody struct {
	ClientRequestID   string   `json:"clientRequestId" validate:"omitempty,clientid"`
	UserTools         []string `json:"userTools" validate:"max=64,dive,max=64"`
	MultitaskStrategy string   `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string   `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

type editBody struct {
	Content           string   `json:"content" validate:"required,max=200000"`
	ClientRequestID   string   `json:"clientRequestId" validate:"omitempty,clientid"`
	UserTools         []string `json:"userTools" validate:"max=64,dive,max=64"`
	MultitaskStrategy string   `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string   `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

// Each chat route reads its body into the command's fields (the body
// types above say what each call accepts) and runs it through the command
// table.

func (s *Server) streamChat(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: string(chat.KindStreamChat), ChatID: c.Param("id")})
}

func (s *Server) streamAgentChat(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: string(chat.KindStreamAgentChat), ChatID: c.Param("id")})
}

func (s *Server) continueMessage(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: string(chat.KindContinueMessage), ChatID: c.Param("id"), MessageID: c.Param("mid")})
}

func (s *Server) retryMessage(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: string(chat.KindRetryMessage), ChatID: c.Param("id"), MessageID: c.Param("mid")})
}

func (s *Server) editUserMessage(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: string(chat.KindEditUserMessage), ChatID: c.Param("id"), MessageID: c.Param("mid")})
}

type resumeBody struct {
	Value             any    `json:"value"`
	Resume            any    `json:"resume"`
	ClientRequestID   string `json:"clientRequestId" validate:"omitempty,clientid"`
	MultitaskStrategy string `json:"multitaskStrategy" validate:"omitempty,oneof=reject enqueue interrupt rollback"`
	OnDisconnect      string `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

// resumeRun is continue_message for the run's assistant message.
func (s *Server) resumeRun(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: "resume", RunID: c.Param("id")})
}

type cancelChatBody struct {
	ClientRequestID string `json:"clientRequestId" validate:"omitempty,clientid"`
	// Action is what becomes of what the cancel stops: "interrupt" (the
	// default) ends it cancelled, its progress kept; "rollback" then
	// deletes its turn (chat.CancelRequest.Rollback).
	Action string `json:"action" validate:"omitempty,oneof=interrupt rollback"`
}

// cancelChat cancels what runs (or will run) in the chat, or in one
// request of it.
func (s *Server) cancelChat(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: "cancel", ChatID: c.Param("id")})
}

// cancelRun cancels one run. A finished run answers 409 with its status.
func (s *Server) cancelRun(c echo.Context) error {
	return s.httpCommand(c, &clientFrame{Type: "cancel", RunID: c.Param("id")})
}

// httpCommand reads the request body into f's body fields (httpBody
// leaves the route's ids alone), runs the command, and answers 202 with
// the ticket or the cancel outcome — or, for a chat call whose client
// accepts SSE, streams the run's events, and for one that prefers to
// wait (Prefer: wait=N), answers once its run has ended.
func (s *Server) httpCommand(c echo.Context, f *clientFrame) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	if err := unmarshalStrictShape(b, (*httpBody)(f)); err != nil {
		return err
	}
	if key := idempotencyKey(c.Request().Header.Get("Idempotency-Key")); key != "" && f.Type != "cancel" {
		if f.ClientRequestID != "" && f.ClientRequestID != key {
			return badRequest("the Idempotency-Key header and clientRequestId differ: they name one call")
		}
		f.ClientRequestID = key
	}
	f.idempotent = f.ClientRequestID != ""
	res, _, err := s.exec(c.Request().Context(), f)
	if err != nil {
		return err
	}
	if res.cancel != nil {
		return c.JSON(http.StatusAccepted, res.cancel)
	}
	ticket := res.ticket
	if ticket.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if !wantsSSE(c) {
		if wait, ok := preferredWait(c); ok {
			return s.answerWhenDone(c, f, ticket, wait)
		}
		return c.JSON(http.StatusAccepted, ticket)
	}
	setTicketHeaders(c, ticket)
	if err := s.streamSSE(c, ticket.RunID, 0); err != nil && f.OnDisconnect == "cancel" && c.Request().Context().Err() != nil {
		// The client left before the run's end: the turn goes with it.
		s.cancelRunQuietly(ticket.RunID)
	}
	return nil // the response is committed
}

// idempotencyKey is the value of an Idempotency-Key header: a chat call's
// clientRequestId sent the way HTTP clients send one (the IETF draft's
// structured-field string, "…", or a bare token, as many APIs take it).
func idempotencyKey(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
	}
	return v
}

// httpBody is a clientFrame as an HTTP body: only the fields a body may
// carry are read (ids come from the route).
type httpBody clientFrame

func (b *httpBody) UnmarshalJSON(data []byte) error {
	var v struct {
		ClientRequestID   string   `json:"clientRequestId"`
		AgentNodeID       string   `json:"agentNodeId"`
		Content           string   `json:"content"`
		ParentID          *string  `json:"parentId"`
		UserTools         []string `json:"userTools"`
		MultitaskStrategy string   `json:"multitaskStrategy"`
		OnDisconnect      string   `json:"onDisconnect"`
		Resume            any      `json:"resume"`
		Value             any      `json:"value"`
		Action            string   `json:"action"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	b.ClientRequestID, b.AgentNodeID, b.Content, b.ParentID, b.UserTools = v.ClientRequestID, v.AgentNodeID, v.Content, v.ParentID, v.UserTools
	b.MultitaskStrategy, b.OnDisconnect, b.Resume, b.Value, b.Action = v.MultitaskStrategy, v.OnDisconnect, v.Resume, v.Value, v.Action
	return nil
}

// setTicketHeaders names a streamed turn's run and assistant message in
// the response headers.
func setTicketHeaders(c echo.Context, t *chat.Ticket) {
	h := c.Response().Header()
	h.Set("X-Run-Id", t.RunID)
	h.Set("X-Message-Id", t.MessageID)
}

// wantsSSE reports whether the client asked for an event stream.
func wantsSSE(c echo.Context) bool {
	return strings.Contains(c.Request().Header.Get("Accept"), "text/event-stream")
}
