package transport

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// AG-UI (protocol 1.0) over the chat service: POST
// /api/v1/ag-ui/graphs/{id} takes a RunAgentInput and streams the turn's
// run as AG-UI events (see docs/api.md, "AG-UI", for the translation
// table). The thread is a chat of the graph.

// aguiInput is the part of RunAgentInput chatgraph reads (state and
// context are accepted and ignored).
type aguiInput struct {
	ThreadID       string          `json:"threadId"`
	RunID          string          `json:"runId"`
	ParentRunID    string          `json:"parentRunId"`
	Messages       []aguiMessage   `json:"messages"`
	Tools          []aguiTool      `json:"tools"`
	Resume         []aguiResume    `json:"resume"`
	ForwardedProps json.RawMessage `json:"forwardedProps"`
}

type aguiMessage struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"toolCallId"`
	Error      string          `json:"error"`
}

type aguiTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type aguiResume struct {
	InterruptID string `json:"interruptId"`
	Status      string `json:"status"`
	Payload     any    `json:"payload"`
}

// aguiProps are the forwardedProps chatgraph understands.
type aguiProps struct {
	// AgentNodeID makes the turn a stream_agent_chat to that agent.
	AgentNodeID string `json:"agentNodeId"`
	// UserTools enables registered (server-side) tools by name.
	UserTools []string `json:"userTools"`
}

// text reads a message's content: a string, or text parts.
func (m *aguiMessage) text(i int) (string, error) {
	om := oaiMessage{Content: m.Content}
	return om.text(i)
}

func (s *Server) aguiRun(c echo.Context) error {
	ctx := c.Request().Context()
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var in aguiInput
	if err := json.Unmarshal(b, &in); err != nil {
		return badRequest("the body is not an AG-UI RunAgentInput: %v", err)
	}
	if !idPattern.MatchString(in.ThreadID) {
		return badRequest("threadId must be 1-128 letters, digits or _.:-")
	}
	var props aguiProps
	if len(in.ForwardedProps) > 0 && string(in.ForwardedProps) != "null" {
		if err := json.Unmarshal(in.ForwardedProps, &props); err != nil {
			return badRequest("forwardedProps: %v", err)
		}
	}
	g, err := s.chats.GetGraph(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	graph, err := chat.LoadGraph(g)
	if err != nil {
		return err
	}
	t, err := s.aguiTurn(ctx, g, &in, props)
	if err != nil {
		return err
	}
	setTicketHeaders(c, t)
	st := &aguiStream{s: s, in: &in, text: newAnswerText(graph), ticket: t, steps: map[string]bool{}, calls: map[string]bool{}}
	st.serve(c)
	if ctx.Err() != nil && !st.ended {
		// The client went away (HttpAgent.abortRun) before the run's end:
		// the turn goes with it. After RUN_FINISHED it cancels nothing (a
		// run waiting for a client tool's result keeps waiting).
		s.cancelRunQuietly(t.RunID)
	}
	return nil
}

// aguiTurn starts the chat call an input asks for: resume entries or
// trailing tool messages continue the run they answer; a trailing user
// message is a new turn in the thread's chat (created on first use, with
// the earlier messages as its transcript).
func (s *Server) aguiTurn(ctx context.Context, g *chat.Graph, in *aguiInput, props aguiProps) (*chat.Ticket, error) {
	ch, err := s.chats.GetChat(ctx, in.ThreadID)
	switch {
	case errors.Is(err, chat.ErrNotFound):
		ch = nil
	case err != nil:
		return nil, err
	case ch.GraphID != g.ID:
		return nil, conflict("thread %s is a chat of graph %s, not %s", in.ThreadID, ch.GraphID, g.ID)
	}
	texts := map[string]string{} // wire interrupt id -> tool message text
	given := map[string]any{}
	for i, r := range in.Resume {
		switch r.Status {
		case "resolved":
			given[r.InterruptID] = r.Payload
		case "cancelled":
			given[r.InterruptID] = nil
		default:
			return nil, badRequest("resume[%d].status must be resolved or cancelled", i)
		}
	}
	last := len(in.Messages) - 1
	for i := last; len(given) == 0 && i >= 0 && in.Messages[i].Role == "tool"; i-- {
		m := in.Messages[i]
		text, err := m.text(i)
		if err != nil {
			return nil, err
		}
		if m.Error != "" {
			text = "error: " + m.Error
		}
		texts[m.ToolCallID] = text
	}
	if len(given) > 0 || len(texts) > 0 {
		if ch == nil {
			return nil, badRequest("thread %s has no run to continue", in.ThreadID)
		}
		return s.aguiContinue(ctx, ch, given, texts)
	}
	if last < 0 || in.Messages[last].Role != "user" {
		return nil, badRequest("the last message must be a user message or tool results (or send resume entries)")
	}
	content, err := in.Messages[last].text(last)
	if err != nil {
		return nil, err
	}
	tools := make([]chat.ClientTool, len(in.Tools))
	for i, t := range in.Tools {
		tools[i] = chat.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	if err := checkClientTools(tools); err != nil {
		return nil, err
	}
	req := chat.Request{Kind: chat.KindStreamChat, ChatID: in.ThreadID, Content: content, ClientTools: tools, UserTools: props.UserTools}
	if props.AgentNodeID != "" {
		req.Kind, req.AgentNodeID = chat.KindStreamAgentChat, props.AgentNodeID
	}
	if err := s.validateStruct(&sendBody{Content: content, UserTools: props.UserTools}); err != nil {
		return nil, err
	}
	if ch == nil {
		for i, m := range in.Messages[:last] {
			if _, ok := transcriptMessage(m.Role, "x"); !ok {
				continue // tool results, activity, reasoning: not part of the transcript
			}
			text, err := m.text(i)
			if err != nil {
				return nil, err
			}
			if h, ok := transcriptMessage(m.Role, text); ok {
				req.History = append(req.History, h)
			}
		}
		if err := s.svc.CreateChat(ctx, &chat.Chat{ID: in.ThreadID, GraphID: g.ID, Title: title(content)}); err != nil &&
			!errors.Is(err, chat.ErrConflict) {
			return nil, err
		}
	}
	return s.sendChat(ctx, req)
}

// aguiContinue continues the run the answers name (wire ids
// "<runId>.<interruptId>", see interruptCallID). given holds resume
// entry payloads (nil: cancelled); texts tool message texts.
func (s *Server) aguiContinue(ctx context.Context, ch *chat.Chat, given map[string]any, texts map[string]string) (*chat.Ticket, error) {
	var rec *runtime.RunRecord
	vals := map[string]any{}
	take := func(wire string) (string, string, error) {
		rid, iid, ok := splitCallID(wire)
		if !ok {
			return "", "", badRequest("%q is not an interrupt or tool call this server made", wire)
		}
		if rec == nil {
			r, err := s.store.GetRun(ctx, rid)
			if errors.Is(err, runtime.ErrRunNotFound) {
				return "", "", badRequest("%q names no run", wire)
			}
			if err != nil {
				return "", "", err
			}
			if r.ChatID != ch.ID {
				return "", "", badRequest("%q belongs to another thread", wire)
			}
			rec = r
		} else if rid != rec.ID {
			return "", "", badRequest("the answers are for different runs")
		}
		return iid, interruptReason(rec, iid), nil
	}
	for wire, p := range given {
		iid, reason, err := take(wire)
		if err != nil {
			return nil, err
		}
		switch {
		case p != nil:
			vals[iid] = p
		case reason == reasonClientTool:
			vals[iid] = map[string]any{"error": "cancelled by the user"}
		default:
			vals[iid] = map[string]any{"approved": false, "reason": "cancelled by the user"}
		}
	}
	for wire, text := range texts {
		iid, reason, err := take(wire)
		if err != nil {
			return nil, err
		}
		v, err := answerValue(reason, text)
		if err != nil {
			return nil, err
		}
		vals[iid] = v
	}
	resume, err := answers(rec, vals)
	if err != nil {
		return nil, err
	}
	return s.sendChat(ctx, chat.Request{Kind: chat.KindContinueMessage, FromRunID: rec.ID, Resume: resume})
}

// aguiStream translates one run into AG-UI events.
type aguiStream struct {
	s      *Server
	in     *aguiInput
	text   *answerText // what of the run's text streams
	ticket *chat.Ticket
	w      *sseWriter
	// steps are the nodes with an open step; calls the tool calls
	// announced in this stream.
	steps    map[string]bool
	calls    map[string]bool
	textOpen bool // the text message is open
	ended    bool // the run's terminal event was translated
}

// send writes one AG-UI event into the stream's buffer: watchRun flushes
// it with the rest of its batch.
func (st *aguiStream) send(ev map[string]any) error {
	ev["timestamp"] = time.Now().UnixMilli()
	return st.w.put(sseData(mustJSON(ev)))
}

func (st *aguiStream) runID() string {
	if st.in.RunID != "" {
		return st.in.RunID
	}
	return st.ticket.RunID
}

func (st *aguiStream) serve(c echo.Context) {
	ctx := c.Request().Context()
	st.w = st.s.startEventStream(c)
	st.s.metrics.activeStreams.WithLabelValues("agui").Inc()
	defer st.s.metrics.activeStreams.WithLabelValues("agui").Dec()
	started := map[string]any{"type": "RUN_STARTED", "threadId": st.in.ThreadID, "runId": st.runID(),
		"metadata": map[string]any{"chatgraph": map[string]any{"runId": st.ticket.RunID, "messageId": st.ticket.MessageID, "chatId": st.ticket.ChatID}}}
	if st.in.ParentRunID != "" {
		started["parentRunId"] = st.in.ParentRunID
	}
	if err := st.send(started); err != nil {
		return
	}
	// RUN_STARTED goes out with watchRun's first flush, RUN_FINISHED when
	// the handler returns.
	err := st.s.watchRun(ctx, st.ticket.RunID, st.w, func(ev runEvent) error { return st.event(ctx, ev) })
	if err == nil && !st.ended {
		err = errRunGone // deleted meanwhile (a rollback)
	}
	if err != nil && ctx.Err() == nil {
		st.s.log.Warn("ag-ui stream ended", "run", st.ticket.RunID, "err", err)
		e := apiError(err)
		if st.send(map[string]any{"type": "RUN_ERROR", "message": e.Message, "code": e.Code}) == nil {
			_ = st.w.flush()
		}
	}
}

// sendText sends text of the answer into the turn's message, opening it
// first. Text after the message was closed (the lead's answer was not the
// whole final text after all, see answerText.rest) opens it again.
func (st *aguiStream) sendText(text string) error {
	if text == "" {
		return nil
	}
	if !st.textOpen {
		st.textOpen = true
		if err := st.send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": st.ticket.MessageID, "role": "assistant"}); err != nil {
			return err
		}
	}
	return st.send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": st.ticket.MessageID, "delta": text})
}

func (st *aguiStream) closeText() error {
	if !st.textOpen {
		return nil
	}
	st.textOpen = false
	return st.send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": st.ticket.MessageID})
}

// toolCall shows a tool call on the turn's message (inside its text
// message, when that is open: the message is opened and closed once).
func (st *aguiStream) toolCall(id, name, args string) error {
	st.calls[id] = true
	for _, ev := range []map[string]any{
		{"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name, "parentMessageId": st.ticket.MessageID},
		{"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": args},
		{"type": "TOOL_CALL_END", "toolCallId": id},
	} {
		if err := st.send(ev); err != nil {
			return err
		}
	}
	return nil
}

// event translates one chatgraph event (see the table in docs/api.md).
func (st *aguiStream) event(ctx context.Context, ev runEvent) error {
	if text := st.text.event(ev); text != "" {
		return st.sendText(text)
	}
	switch ev.Type {
	case runtime.EventNodeStarted:
		st.steps[ev.NodeID] = true
		return st.send(map[string]any{"type": "STEP_STARTED", "stepName": ev.NodeID})
	case runtime.EventNodeCompleted, runtime.EventNodeFailed, runtime.EventNodeCancelled, runtime.EventNodeInterrupted:
		if !st.steps[ev.NodeID] {
			return nil
		}
		delete(st.steps, ev.NodeID)
		if st.text.closesAt(ev.NodeID) {
			if err := st.closeText(); err != nil {
				return err
			}
		}
		return st.send(map[string]any{"type": "STEP_FINISHED", "stepName": ev.NodeID})
	case eventToolCall:
		var d toolCallEvent
		if json.Unmarshal(ev.Data, &d) != nil || d.Replayed || d.ClientTool {
			// Replayed calls were shown by the run that made them; a
			// client tool's call is shown when the run stops for it.
			return nil
		}
		return st.toolCall(d.ID, d.Name, d.args())
	case eventToolResult:
		var d toolResultEvent
		if json.Unmarshal(ev.Data, &d) != nil || !st.calls[d.ID] {
			return nil // replayed, or a client tool's result the client sent
		}
		return st.send(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "tr_" + d.ID, "toolCallId": d.ID,
			"content": d.text(), "role": "tool"})
	}
	if !ev.Type.Terminal() {
		return nil
	}
	st.ended = true
	if ev.Type == runtime.EventRunCompleted {
		// The final text that did not stream live (a template's, a
		// second input's, another chat_output's).
		rest, err := st.s.unstreamed(ctx, st.ticket, st.text)
		if err != nil {
			return err
		}
		if err := st.sendText(rest); err != nil {
			return err
		}
	}
	if err := st.closeText(); err != nil {
		return err
	}
	for id := range st.steps {
		if err := st.send(map[string]any{"type": "STEP_FINISHED", "stepName": id}); err != nil {
			return err
		}
	}
	end := readRunEnd(ev)
	finished := map[string]any{"type": "RUN_FINISHED", "threadId": st.in.ThreadID, "runId": st.runID()}
	switch end.Status {
	case runtime.EventRunCompleted:
		finished["outcome"] = map[string]any{"type": "success"}
	case runtime.EventRunCancelled:
		finished["outcome"] = map[string]any{"type": "cancelled"}
	case runtime.EventRunInterrupted:
		outcome, err := st.interrupted(end)
		if err != nil {
			return err
		}
		finished["outcome"] = outcome
	default:
		return st.send(map[string]any{"type": "RUN_ERROR", "message": endError(end).Message, "code": end.Code})
	}
	return st.send(finished)
}

// approvalSchema is what answers an approval interrupt (its resume
// payload).
var approvalSchema = map[string]any{"type": "object", "required": []string{"approved"},
	"properties": map[string]any{"approved": map[string]any{"type": "boolean"}, "reason": map[string]any{"type": "string"}}}

// interrupted shows the calls a run stopped for: client tool calls as
// tool calls the client runs (outcome success with pendingToolCallIds
// when nothing else waits), other interrupts as AG-UI interrupts.
func (st *aguiStream) interrupted(end runEnd) (map[string]any, error) {
	var pending []string
	var interrupts []map[string]any
	for _, in := range end.Interrupts {
		wire := interruptCallID(st.ticket.RunID, in.ID)
		it := map[string]any{"id": wire, "reason": in.Reason, "metadata": map[string]any{"nodeId": in.NodeID, "payload": in.raw}}
		if call := in.clientCall(); call != nil {
			if err := st.toolCall(wire, call.Name, call.args()); err != nil {
				return nil, err
			}
			pending = append(pending, wire)
			it["toolCallId"] = wire
		} else {
			it["responseSchema"] = approvalSchema
			if in.Payload.Prompt != "" {
				it["message"] = in.Payload.Prompt
			}
			if tc := in.Payload.ToolCall; tc != nil && st.calls[tc.ID] {
				it["toolCallId"] = tc.ID
			}
		}
		interrupts = append(interrupts, it)
	}
	if len(pending) == len(end.Interrupts) {
		return map[string]any{"type": "success", "pendingToolCallIds": pending}, nil
	}
	return map[string]any{"type": "interrupt", "interrupts": interrupts}, nil
}
