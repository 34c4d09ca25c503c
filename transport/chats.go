package transport

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/runcontrol"
	"chatgraph/transport/chatstore"
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

func toMessageJSON(m *chatstore.Message) messageJSON {
	return messageJSON{ID: m.ID, ParentID: nullable(m.ParentID), Role: m.Role, Content: m.Content, RunID: nullable(m.RunID),
		Status: m.Status, AgentNodeID: m.AgentNodeID, UserTools: m.UserTools, Error: m.Error,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
}

// chatJSON is a chat on the wire; Messages is the whole tree in creation
// order (nil in listings).
type chatJSON struct {
	ID           string        `json:"id"`
	GraphID      string        `json:"graphId"`
	Title        string        `json:"title,omitempty"`
	ActiveLeafID *string       `json:"activeLeafId"`
	Messages     []messageJSON `json:"messages,omitempty"`
	CreatedAt    time.Time     `json:"createdAt"`
	UpdatedAt    time.Time     `json:"updatedAt"`
}

func toChatJSON(c *chatstore.Chat, msgs []*chatstore.Message) chatJSON {
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
		id = newID("c_")
	}
	chat := &chatstore.Chat{ID: id, GraphID: b.GraphID, Title: b.Title}
	if err := s.chats.CreateChat(ctx, chat); err != nil {
		return err
	}
	out := toChatJSON(chat, nil)
	out.Messages = []messageJSON{}
	return created(c, out)
}

func (s *Server) getChat(c echo.Context) error {
	ctx := c.Request().Context()
	chat, err := s.chats.GetChat(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	msgs, err := s.chats.Messages(ctx, chat.ID)
	if err != nil {
		return err
	}
	out := toChatJSON(chat, msgs)
	if out.Messages == nil {
		out.Messages = []messageJSON{}
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) listChats(c echo.Context) error {
	chats, err := s.chats.ListChats(c.Request().Context(), c.QueryParam("graphId"))
	if err != nil {
		return err
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

func (s *Server) streamChat(c echo.Context) error {
	var b sendBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	return s.chatCall(c, chatRequest{Kind: KindStreamChat, ChatID: c.Param("id"), Content: b.Content, ParentID: b.ParentID,
		UserTools: b.UserTools, ClientRequestID: b.ClientRequestID, Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
}

func (s *Server) streamAgentChat(c echo.Context) error {
	var b agentSendBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	return s.chatCall(c, chatRequest{Kind: KindStreamAgentChat, ChatID: c.Param("id"), AgentNodeID: b.AgentNodeID,
		Content: b.Content, ParentID: b.ParentID, UserTools: b.UserTools, ClientRequestID: b.ClientRequestID,
		Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
}

func (s *Server) continueMessage(c echo.Context) error {
	var b continueBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	v := b.Resume
	if v == nil {
		v = b.Value
	}
	return s.chatCall(c, chatRequest{Kind: KindContinueMessage, ChatID: c.Param("id"), MessageID: c.Param("mid"),
		Resume: v, ClientRequestID: b.ClientRequestID, Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
}

func (s *Server) retryMessage(c echo.Context) error {
	var b retryBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	return s.chatCall(c, chatRequest{Kind: KindRetryMessage, ChatID: c.Param("id"), MessageID: c.Param("mid"),
		UserTools: b.UserTools, ClientRequestID: b.ClientRequestID, Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
}

func (s *Server) editUserMessage(c echo.Context) error {
	var b editBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	return s.chatCall(c, chatRequest{Kind: KindEditUserMessage, ChatID: c.Param("id"), MessageID: c.Param("mid"),
		Content: b.Content, UserTools: b.UserTools, ClientRequestID: b.ClientRequestID,
		Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
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
	var b resumeBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	v := b.Value
	if v == nil {
		v = b.Resume
	}
	return s.chatCall(c, chatRequest{Kind: KindContinueMessage, FromRunID: c.Param("id"), Resume: v,
		ClientRequestID: b.ClientRequestID, Strategy: runcontrol.Strategy(b.MultitaskStrategy)}, b.OnDisconnect)
}

// wantsSSE reports whether the client asked for an event stream.
func wantsSSE(c echo.Context) bool {
	return strings.Contains(c.Request().Header.Get("Accept"), "text/event-stream")
}

// chatCall starts a chat call through the runner and answers 202 with the
// ticket, or streams the run's events when the client accepts SSE.
func (s *Server) chatCall(c echo.Context, req chatRequest, onDisconnect string) error {
	ticket, err := s.startChatRun(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if !wantsSSE(c) {
		return c.JSON(http.StatusAccepted, ticket)
	}
	h := c.Response().Header()
	h.Set("X-Run-Id", ticket.RunID)
	h.Set("X-Message-Id", ticket.MessageID)
	err = s.serveSSE(c, ticket.RunID, 0)
	if onDisconnect == "cancel" && c.Request().Context().Err() != nil {
		s.cancelScope(runcontrol.RunScope(ticket.RunID))
	}
	return err
}

type cancelChatBody struct {
	ClientRequestID string `json:"clientRequestId" validate:"omitempty,clientid"`
}

// cancelChat cancels what runs (or will run) in the chat, or in one
// request of it.
func (s *Server) cancelChat(c echo.Context) error {
	var b cancelChatBody
	if err := s.decodeJSON(c, &b); err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := s.chats.GetChat(ctx, c.Param("id")); err != nil {
		return err
	}
	var res *cancelResult
	var err error
	if b.ClientRequestID != "" {
		res, err = s.cancelScope(runcontrol.RequestScope(b.ClientRequestID))
	} else {
		res, err = s.cancelChatRuns(ctx, c.Param("id"))
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, res)
}

// cancelChatRuns cancels what runs in a chat — bound runs (executing or
// queued) and runs waiting for a human (interrupted: the wait ends, their
// messages become cancelled). When nothing of either kind exists the
// intent is kept for the chat's next run.
func (s *Server) cancelChatRuns(ctx context.Context, chatID string) (*cancelResult, error) {
	waiting := s.waitingRuns(ctx, chatID)
	if len(waiting) > 0 {
		if active, err := s.ctl.Active(ctx, runcontrol.ChatScope(chatID)); err == nil && len(active) == 0 {
			return &cancelResult{Status: runcontrol.StatusCancelled, RunIDs: s.cancelWaiting(ctx, waiting)}, nil
		}
	}
	res, err := s.cancelScope(runcontrol.ChatScope(chatID))
	if err != nil {
		return nil, err
	}
	if res.Status == runcontrol.StatusCancelled {
		res.RunIDs = append(res.RunIDs, s.cancelWaiting(ctx, waiting)...)
	}
	return res, nil
}

// waitingRuns returns the assistant messages of a chat whose run waits
// for a human (interrupted).
func (s *Server) waitingRuns(ctx context.Context, chatID string) []*chatstore.Message {
	msgs, err := s.chats.Messages(ctx, chatID)
	if err != nil {
		return nil
	}
	var out []*chatstore.Message
	for _, m := range msgs {
		if m.Role == chatstore.RoleAssistant && m.Status == chatstore.StatusInterrupted && m.RunID != "" {
			out = append(out, m)
		}
	}
	return out
}

// cancelWaiting ends the human waits of interrupted runs (user cancel)
// and marks their messages cancelled; it returns the runs it cancelled.
func (s *Server) cancelWaiting(ctx context.Context, msgs []*chatstore.Message) []string {
	var ids []string
	for _, m := range msgs {
		if _, err := s.engine.CancelInterrupted(ctx, m.RunID, runcontrol.ErrUserCancel); err != nil {
			continue // resumed or cancelled meanwhile
		}
		m.Status, m.Error = chatstore.StatusCancelled, runcontrol.Code(runcontrol.ErrUserCancel)
		if err := s.chats.UpdateMessage(ctx, m); err != nil {
			s.log.Warn("cancel: writing the message", "message", m.ID, "err", err)
		}
		s.log.Info("run waiting for a human cancelled", "run", m.RunID, "chat", m.ChatID)
		ids = append(ids, m.RunID)
	}
	return ids
}

// cancelResult is the answer of a cancel call.
type cancelResult struct {
	Status string   `json:"status"`
	RunIDs []string `json:"runIds,omitempty"`
}

// cancelScope cancels a scope with the user cause.
func (s *Server) cancelScope(scope runcontrol.Scope) (*cancelResult, error) {
	res, err := s.ctl.Cancel(s.base, scope, runcontrol.ErrUserCancel)
	if err != nil {
		return nil, err
	}
	s.noteCancel(res.RunIDs)
	out := &cancelResult{Status: res.Status, RunIDs: res.RunIDs}
	if out.Status == runcontrol.StatusCancelled && out.RunIDs == nil {
		out.RunIDs = []string{}
	}
	return out, nil
}
