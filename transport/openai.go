package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// The OpenAI chat completions API over the chat service (see docs/api.md,
// "OpenAI-compatible API"): saved graphs are the models; a completion is
// one turn of a chat — a fresh chat seeded with the request's messages,
// or the chat the X-Chatgraph-Chat-Id header names.

// HeaderChatID names the chat an OpenAI request (or answer) belongs to.
const HeaderChatID = "X-Chatgraph-Chat-Id"

// approvalToolName is the function name under which an OpenAI client is
// shown an interrupt that is not a client tool call (an approval).
const approvalToolName = "chatgraph_approval"

func (s *Server) openAIRoutes(e *echo.Echo, guard []echo.MiddlewareFunc) {
	v1 := e.Group("/v1", guard...)
	v1.GET("/models", s.listModels)
	v1.GET("/models/:model", s.getModel)
	// A turn answered whole or streamed: as long as the graph runs.
	s.streams(streamsAlways, v1.POST("/chat/completions", s.chatCompletions))
	v1.RouteNotFound("/*", func(c echo.Context) error {
		return notFound("no route %s %s", c.Request().Method, c.Request().URL.Path)
	})
}

// oaiModel is a graph as an OpenAI model.
type oaiModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Name is the graph's name (accepted as the model too).
	Name string `json:"name,omitempty"`
}

func toModel(g *chat.Graph) oaiModel {
	return oaiModel{ID: g.ID, Object: "model", Created: g.CreatedAt.Unix(), OwnedBy: "chatgraph", Name: g.Name}
}

func (s *Server) listModels(c echo.Context) error {
	gs, err := s.chats.ListGraphs(c.Request().Context(), chat.Page{})
	if err != nil {
		return err
	}
	out := make([]oaiModel, len(gs))
	for i, g := range gs {
		out[i] = toModel(g)
	}
	return c.JSON(http.StatusOK, map[string]any{"object": "list", "data": out})
}

func (s *Server) getModel(c echo.Context) error {
	g, err := s.modelGraph(c.Request().Context(), c.Param("model"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toModel(g))
}

// errModelNotFound answers a model that names no graph.
func errModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Code: "model_not_found",
		Message: "the model " + strconv.Quote(model) + " does not exist: use a graph id or name (GET /v1/models)"}
}

// modelGraph finds the graph a model names: its id, else its name (which
// must then be unique).
func (s *Server) modelGraph(ctx context.Context, model string) (*chat.Graph, error) {
	if model == "" {
		return nil, badRequest("model is required (a graph id or name; GET /v1/models lists them)")
	}
	g, err := s.chats.GetGraph(ctx, model)
	if err == nil {
		return g, nil
	}
	if !errors.Is(err, chat.ErrNotFound) {
		return nil, err
	}
	// Two graphs are enough to know the name is not unique.
	gs, err := s.chats.GraphsNamed(ctx, model, 2)
	switch {
	case err != nil:
		return nil, err
	case len(gs) > 1:
		return nil, badRequest("several graphs are named %q: use the graph id", model)
	case len(gs) == 0:
		return nil, errModelNotFound(model)
	}
	return gs[0], nil
}

// oaiRequest is the part of a chat completion request chatgraph reads.
// Sampling fields (temperature, max_tokens...) are accepted and ignored:
// the graph's nodes decide them.
type oaiRequest struct {
	Model         string          `json:"model"`
	Messages      []oaiMessage    `json:"messages"`
	Stream        bool            `json:"stream"`
	Tools         []oaiTool       `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	N             *int            `json:"n"`
	User          string          `json:"user"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaiToolCall   `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// text reads a message's content: a string, null, or text parts.
func (m *oaiMessage) text(i int) (string, error) {
	c := m.Content
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", badRequest("messages[%d].content must be a string or an array of content parts", i)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest("messages[%d].content[%d]: only text parts are supported, not %q", i, j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func decodeOAIRequest(c echo.Context) (*oaiRequest, error) {
	b, err := readBody(c)
	if err != nil {
		return nil, err
	}
	var req oaiRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, badRequest("the body is not a chat completion request: %v", err)
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages must hold at least one message")
	}
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("n must be 1")
	}
	return &req, nil
}

// clientTools reads the request's tools (none with tool_choice "none").
func (r *oaiRequest) clientTools() ([]chat.ClientTool, error) {
	if string(r.ToolChoice) == `"none"` {
		return nil, nil
	}
	out := make([]chat.ClientTool, 0, len(r.Tools))
	for i, t := range r.Tools {
		if t.Type != "function" {
			return nil, badRequest("tools[%d]: only function tools are supported", i)
		}
		out = append(out, chat.ClientTool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out, checkClientTools(out)
}

// oaiTurn starts the chat call a request asks for: trailing tool
// messages continue the run their tool_call_id names; a trailing user
// message is a new turn.
func (s *Server) oaiTurn(ctx context.Context, c echo.Context, g *chat.Graph, req *oaiRequest) (*chat.Ticket, error) {
	chatID := c.Request().Header.Get(HeaderChatID)
	if chatID != "" {
		ch, err := s.chats.GetChat(ctx, chatID)
		if err != nil {
			return nil, err
		}
		if ch.GraphID != g.ID {
			return nil, badRequest("chat %s runs graph %s, not the model %s", chatID, ch.GraphID, req.Model)
		}
	}
	last := len(req.Messages) - 1
	switch req.Messages[last].Role {
	case "tool":
		return s.oaiToolAnswers(ctx, g, chatID, req)
	case "user":
	default:
		return nil, badRequest("the last message must be a user message or tool results, not %q", req.Messages[last].Role)
	}
	content, err := req.Messages[last].text(last)
	if err != nil {
		return nil, err
	}
	if err := s.validateStruct(&sendBody{Content: content}); err != nil {
		return nil, err
	}
	tools, err := req.clientTools()
	if err != nil {
		return nil, err
	}
	sreq := chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: content, ClientTools: tools}
	if chatID == "" {
		for i, m := range req.Messages[:last] {
			switch m.Role {
			case "system", "developer", "user", "assistant", "tool":
			default:
				return nil, badRequest("messages[%d]: unknown role %q", i, m.Role)
			}
			text, err := m.text(i)
			if err != nil {
				return nil, err
			}
			if h, ok := transcriptMessage(m.Role, text); ok {
				sreq.History = append(sreq.History, h)
			}
		}
		ch := &chat.Chat{ID: chat.NewID("c_"), GraphID: g.ID, Title: title(content)}
		if err := s.svc.CreateChat(ctx, ch); err != nil {
			return nil, err
		}
		sreq.ChatID = ch.ID
	}
	return s.sendChat(ctx, sreq)
}

// title is a chat title from its first message.
func title(content string) string {
	t := strings.Join(strings.Fields(content), " ")
	if len(t) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(t[cut]) {
			cut--
		}
		t = t[:cut] + "…"
	}
	return t
}

// oaiToolAnswers continues the run the trailing tool messages answer.
func (s *Server) oaiToolAnswers(ctx context.Context, g *chat.Graph, chatID string, req *oaiRequest) (*chat.Ticket, error) {
	var runID string
	given := map[string]any{}
	var rec *runtime.RunRecord
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role == "tool"; i-- {
		m := req.Messages[i]
		rid, iid, ok := splitCallID(m.ToolCallID)
		if !ok {
			return nil, badRequest("messages[%d].tool_call_id %q is not a call this server made", i, m.ToolCallID)
		}
		if runID != "" && rid != runID {
			return nil, badRequest("the tool results answer calls of different runs")
		}
		if rec == nil {
			r, err := s.store.GetRun(ctx, rid)
			if errors.Is(err, runtime.ErrRunNotFound) {
				return nil, badRequest("messages[%d].tool_call_id %q names no run", i, m.ToolCallID)
			}
			if err != nil {
				return nil, err
			}
			if r.GraphID != g.ID || (chatID != "" && r.ChatID != chatID) {
				return nil, badRequest("messages[%d].tool_call_id %q belongs to another model or chat", i, m.ToolCallID)
			}
			rec = r
		}
		runID = rid
		text, err := m.text(i)
		if err != nil {
			return nil, err
		}
		v, err := answerValue(interruptReason(rec, iid), text)
		if err != nil {
			return nil, err
		}
		given[iid] = v
	}
	resume, err := answers(rec, given)
	if err != nil {
		return nil, err
	}
	return s.sendChat(ctx, chat.Request{Kind: chat.KindContinueMessage, FromRunID: runID, Resume: resume})
}

// chatCompletions is POST /v1/chat/completions.
func (s *Server) chatCompletions(c echo.Context) error {
	ctx := c.Request().Context()
	req, err := decodeOAIRequest(c)
	if err != nil {
		return err
	}
	g, err := s.modelGraph(ctx, req.Model)
	if err != nil {
		return err
	}
	graph, err := chat.LoadGraph(g)
	if err != nil {
		return err
	}
	t, err := s.oaiTurn(ctx, c, g, req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(HeaderChatID, t.ChatID)
	setTicketHeaders(c, t)
	cc := &completion{s: s, req: req, ticket: t, id: "chatcmpl-" + t.RunID, created: time.Now().Unix(),
		text: newAnswerText(graph), agents: map[string]bool{}}
	for _, n := range graph.Nodes {
		if n.Type == typeAgent {
			cc.agents[n.ID] = true
		}
	}
	if req.Stream {
		err = cc.stream(c)
	} else {
		err = cc.complete(c)
	}
	if ctx.Err() != nil && !cc.ended {
		// The client went away before the run's end: the turn goes with
		// it. Once it has the end it cancels nothing (a run waiting for
		// a client tool's result keeps waiting for it).
		s.cancelRunQuietly(t.RunID)
	}
	return err
}

// completion translates one run into an OpenAI answer.
type completion struct {
	s       *Server
	req     *oaiRequest
	ticket  *chat.Ticket
	id      string
	created int64
	text    *answerText     // what of the run's text streams
	agents  map[string]bool // the graph's agent nodes (their outputs report usage)
	usage   *oaiUsage
	ended   bool // follow saw the run's terminal event
}

// addUsage adds the token counts an agent's output reports (its
// metadata.usage) to the completion's.
func (cc *completion) addUsage(data json.RawMessage) {
	var d struct {
		Output struct {
			Metadata struct {
				Usage *struct {
					PromptTokens     int `json:"promptTokens"`
					CompletionTokens int `json:"completionTokens"`
					TotalTokens      int `json:"totalTokens"`
				} `json:"usage"`
			} `json:"metadata"`
		} `json:"output"`
		Replayed bool `json:"replayed"`
	}
	if json.Unmarshal(data, &d) != nil || d.Replayed || d.Output.Metadata.Usage == nil {
		return
	}
	if cc.usage == nil {
		cc.usage = &oaiUsage{}
	}
	u := d.Output.Metadata.Usage
	cc.usage.PromptTokens += u.PromptTokens
	cc.usage.CompletionTokens += u.CompletionTokens
	cc.usage.TotalTokens += u.TotalTokens
}

// follow reads the run, calling text with the answer's text as it
// streams live (see answerText), and returns how it ended. text writes
// to w (nil when not streaming), which watchRun flushes after each batch.
func (cc *completion) follow(ctx context.Context, w *sseWriter, text func(string) error) (runEnd, error) {
	var end *runEnd
	err := cc.s.watchRun(ctx, cc.ticket.RunID, w, func(ev runEvent) error {
		if t := cc.text.event(ev); t != "" {
			return text(t)
		}
		switch {
		case ev.Type == runtime.EventNodeCompleted && cc.agents[ev.NodeID]:
			cc.addUsage(ev.Data)
		case ev.Type.Terminal():
			e := readRunEnd(ev)
			end = &e
		}
		return nil
	})
	if err != nil {
		return runEnd{}, err
	}
	if end == nil {
		return runEnd{}, errRunGone
	}
	cc.ended = true
	return *end, nil
}

// message reads the turn's assistant message once the run has ended.
func (cc *completion) message(ctx context.Context) (string, error) {
	m, err := cc.s.chats.GetMessage(ctx, cc.ticket.ChatID, cc.ticket.MessageID)
	if err != nil {
		return "", err
	}
	return m.Content, nil
}

// toolCalls are the interrupts a run ended with, as OpenAI tool calls.
func (cc *completion) toolCalls(end runEnd) []oaiToolCall {
	out := make([]oaiToolCall, 0, len(end.Interrupts))
	for i, in := range end.Interrupts {
		tc := oaiToolCall{ID: interruptCallID(cc.ticket.RunID, in.ID), Type: "function"}
		idx := i
		tc.Index = &idx
		if call := in.clientCall(); call != nil {
			tc.Function.Name, tc.Function.Arguments = call.Name, call.args()
		} else {
			args, _ := json.Marshal(map[string]any{"reason": in.Reason, "nodeId": in.NodeID, "request": in.raw})
			tc.Function.Name, tc.Function.Arguments = approvalToolName, string(args)
		}
		out = append(out, tc)
	}
	return out
}

// endError is the error a failed or cancelled run answers with.
func endError(end runEnd) *Error {
	if end.Status == runtime.EventRunCancelled {
		return &Error{Status: http.StatusConflict, Code: "run_cancelled", Message: "the run was cancelled"}
	}
	msg := end.Error
	if msg == "" {
		msg = "the run failed"
	}
	return &Error{Status: http.StatusInternalServerError, Code: end.Code, Message: msg}
}

type oaiChoice struct {
	Index        int        `json:"index"`
	Message      *oaiAnswer `json:"message,omitempty"`
	Delta        *oaiAnswer `json:"delta,omitempty"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type oaiAnswer struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	Refusal   *string       `json:"refusal,omitempty"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiCompletion struct {
	ID                string      `json:"id"`
	Object            string      `json:"object"`
	Created           int64       `json:"created"`
	Model             string      `json:"model"`
	SystemFingerprint string      `json:"system_fingerprint"`
	Choices           []oaiChoice `json:"choices"`
	Usage             *oaiUsage   `json:"usage"`
}

// oaiUsage sums the token counts the run's agents report in their
// outputs (null when none did: the offline echo model reports none).
type oaiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (cc *completion) envelope(object string, choices ...oaiChoice) oaiCompletion {
	return oaiCompletion{ID: cc.id, Object: object, Created: cc.created, Model: cc.req.Model,
		SystemFingerprint: "chatgraph", Choices: choices}
}

// complete answers stream: false with one chat.completion.
func (cc *completion) complete(c echo.Context) error {
	ctx := c.Request().Context()
	end, err := cc.follow(ctx, nil, func(string) error { return nil })
	if err != nil {
		return err
	}
	content, err := cc.message(ctx)
	if err != nil {
		return err
	}
	ans := &oaiAnswer{Role: "assistant", Content: &content}
	reason := "stop"
	switch end.Status {
	case runtime.EventRunCompleted:
	case runtime.EventRunInterrupted:
		reason = "tool_calls"
		ans.ToolCalls = cc.toolCalls(end)
		for i := range ans.ToolCalls {
			ans.ToolCalls[i].Index = nil
		}
		if content == "" {
			ans.Content = nil
		}
	default:
		return endError(end)
	}
	out := cc.envelope("chat.completion", oaiChoice{Message: ans, FinishReason: &reason})
	out.Usage = cc.usage
	return c.JSON(http.StatusOK, out)
}

// stream answers stream: true with chat.completion.chunk frames, ending
// "data: [DONE]"; a run that fails (or is cancelled) ends with an error
// frame instead. The chunks of one batch of the run's events go out with
// one flush.
func (cc *completion) stream(c echo.Context) error {
	ctx := c.Request().Context()
	w := cc.s.startEventStream(c)
	cc.s.metrics.activeStreams.WithLabelValues("openai").Inc()
	defer cc.s.metrics.activeStreams.WithLabelValues("openai").Dec()
	chunk := func(d *oaiAnswer, finish *string) error {
		return w.put(sseData(mustJSON(cc.envelope("chat.completion.chunk", oaiChoice{Delta: d, FinishReason: finish}))))
	}
	empty := ""
	// The first chunk goes out with follow's first flush.
	if err := chunk(&oaiAnswer{Role: "assistant", Content: &empty}, nil); err != nil {
		return nil
	}
	// fail ends the stream with an error frame instead of [DONE].
	fail := func(err error) error {
		if ctx.Err() == nil {
			cc.s.log.Warn("openai stream ended", "run", cc.ticket.RunID, "err", err)
			_ = w.write(sseData(mustJSON(oaiErrorBody(apiError(err)))))
		}
		return nil
	}
	end, err := cc.follow(ctx, w, func(t string) error { return chunk(&oaiAnswer{Content: &t}, nil) })
	if err != nil {
		return fail(err)
	}
	if err := w.flush(); err != nil { // the last chunks, before reading the message
		return nil
	}
	reason := "stop"
	switch end.Status {
	case runtime.EventRunCompleted:
		// The final text that did not stream live (a template's, a
		// second input's, another chat_output's).
		rest, err := cc.s.unstreamed(ctx, cc.ticket, cc.text)
		if err != nil {
			return fail(err)
		}
		if rest != "" {
			if err := chunk(&oaiAnswer{Content: &rest}, nil); err != nil {
				return nil
			}
		}
	case runtime.EventRunInterrupted:
		reason = "tool_calls"
		if err := chunk(&oaiAnswer{ToolCalls: cc.toolCalls(end)}, nil); err != nil {
			return nil
		}
	default:
		_ = w.write(sseData(mustJSON(oaiErrorBody(endError(end)))))
		return nil
	}
	if err := chunk(&oaiAnswer{}, &reason); err != nil {
		return nil
	}
	if cc.req.StreamOptions != nil && cc.req.StreamOptions.IncludeUsage {
		// OpenAI's last chunk for include_usage: no choices, the usage.
		last := cc.envelope("chat.completion.chunk")
		last.Choices, last.Usage = []oaiChoice{}, cc.usage
		if err := w.put(sseData(mustJSON(last))); err != nil {
			return nil
		}
	}
	_ = w.write([]byte("data: [DONE]\n\n")) // flushes the last chunks with it
	return nil
}

// oaiError is OpenAI's error object.
type oaiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// oaiErrorBody is an API error in OpenAI's shape: the type follows the
// HTTP status, the code is chatgraph's.
func oaiErrorBody(e *Error) map[string]oaiError {
	typ := "invalid_request_error"
	switch {
	case e.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	case e.Status == http.StatusForbidden:
		typ = "permission_error"
	case e.Status == http.StatusNotFound:
		typ = "not_found_error"
	case e.Status == http.StatusConflict:
		typ = "conflict_error"
	case e.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case e.Status >= 500:
		typ = "server_error"
	}
	msg := e.Message
	if ds, ok := e.Details.([]fieldProblem); ok && len(ds) > 0 {
		msg += ": " + ds[0].Path + ": " + ds[0].Message
	}
	return map[string]oaiError{"error": {Message: msg, Type: typ, Code: e.Code}}
}

// isOpenAIPath reports whether a request is for the OpenAI API (its
// errors take OpenAI's shape).
func isOpenAIPath(c echo.Context) bool {
	p := c.Request().URL.Path
	return p == "/v1" || strings.HasPrefix(p, "/v1/")
}
