package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// The protocol adapters (AG-UI in agui.go, OpenAI chat completions in
// openai.go) translate other clients' requests into chat calls and a
// run's events into their wire formats. What they share is here: reading
// a run's events through follow, what of a run's text streams as the
// answer (answerText), the interrupts a run ended with, and the tool
// call ids clients send back.

// Node types and event data fields of the wire contract the adapters read.
const (
	typeAgent = "agent"

	eventNodeDelta  runtime.EventType = "node_delta"
	eventToolCall   runtime.EventType = "tool_call"
	eventToolResult runtime.EventType = "tool_result"

	reasonClientTool = "client_tool"
)

// runEvent is one event envelope of a run, its data still raw.
type runEvent struct {
	Seq    int64             `json:"seq"`
	Type   runtime.EventType `json:"type"`
	NodeID string            `json:"nodeId"`
	Data   json.RawMessage   `json:"data"`
}

// watchRun calls fn with every event of runID from its first, in seq
// order, until the run's terminal event (nil), ctx ends or fn fails.
// When w is not nil, fn writes its stream there with put: w is flushed
// after each batch of events, before watchRun waits for more (what the
// last batch wrote is the caller's to flush, see follow), and gets a
// ping comment after each heartbeat interval without events.
func (s *Server) watchRun(ctx context.Context, runID string, w *sseWriter, fn func(runEvent) error) error {
	var idle func() error
	if w != nil {
		idle = func() error { return w.comment("ping") }
	}
	return s.follow(ctx, runID, 0, eventSender{w, runID, fn}, idle)
}

// eventSender decodes each frame for a watchRun callback and flushes the
// stream the callback writes to (if any).
type eventSender struct {
	w     *sseWriter
	runID string
	fn    func(runEvent) error
}

func (e eventSender) send(f frame) error {
	var ev runEvent
	if err := json.Unmarshal(f.JSON, &ev); err != nil {
		return fmt.Errorf("decoding event %d of run %s: %w", f.Seq, e.runID, err)
	}
	return e.fn(ev)
}

func (e eventSender) flush() error {
	if e.w == nil {
		return nil
	}
	return e.w.flush()
}

// toolCallEvent is the data of tool_call (and an interrupt's toolCall).
type toolCallEvent struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Arguments   json.RawMessage `json:"arguments"`
	AgentNodeID string          `json:"agentNodeId"`
	ClientTool  bool            `json:"clientTool"`
	Replayed    bool            `json:"replayed"`
}

// args is the call's arguments as JSON text ("{}" when absent).
func (c *toolCallEvent) args() string {
	if len(c.Arguments) == 0 || string(c.Arguments) == "null" {
		return "{}"
	}
	return string(c.Arguments)
}

// toolResultEvent is the data of tool_result.
type toolResultEvent struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Result      string `json:"result"`
	Error       string `json:"error"`
	AgentNodeID string `json:"agentNodeId"`
	Replayed    bool   `json:"replayed"`
}

// text is what the model was told about the call.
func (r *toolResultEvent) text() string {
	if r.Error != "" {
		return "error: " + r.Error
	}
	return r.Result
}

// pendingInterrupt is one interrupt of run_interrupted.
type pendingInterrupt struct {
	ID      string `json:"interruptId"`
	NodeID  string `json:"nodeId"`
	Reason  string `json:"reason"`
	Payload struct {
		Kind     string         `json:"kind"`
		Prompt   string         `json:"prompt"`
		ToolCall *toolCallEvent `json:"toolCall"`
		Input    any            `json:"input"`
	} `json:"payload"`
	raw json.RawMessage
}

// UnmarshalJSON keeps the payload's raw JSON (what a client is shown).
func (p *pendingInterrupt) UnmarshalJSON(b []byte) error {
	type plain pendingInterrupt
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var raw struct {
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(b, &raw)
	*p = pendingInterrupt(v)
	p.raw = raw.Payload
	return nil
}

// clientCall is the call a client tool interrupt waits on (nil for other
// interrupts).
func (p *pendingInterrupt) clientCall() *toolCallEvent {
	if p.Reason == reasonClientTool && p.Payload.ToolCall != nil {
		return p.Payload.ToolCall
	}
	return nil
}

// runEnd is how a run ended, from its terminal event.
type runEnd struct {
	Status     runtime.EventType
	Interrupts []pendingInterrupt
	Code       string
	Error      string
}

func readRunEnd(ev runEvent) runEnd {
	end := runEnd{Status: ev.Type}
	var d struct {
		Interrupts []pendingInterrupt `json:"interrupts"`
		Error      string             `json:"error"`
		Code       string             `json:"code"`
		Cause      string             `json:"cause"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	end.Interrupts, end.Code, end.Error = d.Interrupts, d.Code, d.Error
	if ev.Type == runtime.EventRunCancelled {
		end.Code, end.Error = "cancelled", d.Cause
	}
	if ev.Type == runtime.EventRunFailed && end.Code == "" {
		end.Code = "run_failed"
	}
	return end
}

// The answer's text on an adapter's stream: a client that builds its
// answer from the stream ends with exactly the chat message's text. What
// that text is, and which agent's deltas are certainly its start (the
// lead), is chat's rule (chat.LiveAnswer); the adapters only follow it.
// Only the lead's node_delta text streams live; every other node's
// deltas are dropped, and whatever the final text holds beyond what
// streamed is sent once the run completes (answerText.rest).

// answerText follows one run's events for an adapter: what of its
// answer to stream live, and what to send at its end. Not safe for
// concurrent use (one stream's events come in order on one goroutine).
type answerText struct {
	graph *runtime.Graph
	live  chat.AnswerSource // what streams live (chat.LiveAnswer of its run_started)
	sent  strings.Builder   // the text streamed so far
	// replay is, after the lead was retried, how much of sent its new
	// attempt has said again (an attempt streams its answer from the
	// start); -1 when it is not replaying.
	replay int
	// stopped: the lead's new attempt said something else than what
	// was sent; nothing more streams live.
	stopped bool
}

func newAnswerText(g *runtime.Graph) *answerText { return &answerText{graph: g, replay: -1} }

// event reads one event of the run and returns the text to stream for
// it ("" for none): the lead's new text.
func (a *answerText) event(ev runEvent) string {
	if ev.Type == runtime.EventRunStarted {
		var d runStartedInfo
		_ = json.Unmarshal(ev.Data, &d)
		a.live = chat.LiveAnswer(a.graph, d.EntryNodeIDs, d.ActiveNodeIDs)
		return ""
	}
	if a.live.Lead == "" || ev.NodeID != a.live.Lead || a.stopped {
		return ""
	}
	switch ev.Type {
	case runtime.EventNodeRetrying:
		if a.sent.Len() > 0 {
			a.replay = 0 // the next attempt says its answer from the start
		}
	case eventNodeDelta:
		return a.delta(deltaText(ev))
	}
	return ""
}

// delta takes one delta of the lead: a replaying attempt's text is
// checked against what was sent and only what goes beyond it is new.
func (a *answerText) delta(t string) string {
	if a.replay >= 0 {
		said := a.sent.String()[a.replay:]
		n := min(len(t), len(said))
		if t[:n] != said[:n] {
			a.stopped = true
			return ""
		}
		a.replay += n
		if n == len(t) {
			return ""
		}
		a.replay, t = -1, t[n:]
	}
	a.sent.WriteString(t)
	return t
}

// closesAt reports whether nodeID's terminal event ends the answer's
// live text: it is the lead's and its answer is the whole final text.
func (a *answerText) closesAt(nodeID string) bool {
	return a.live.Whole && nodeID == a.live.Lead
}

// rest is the text of the final message the stream has not carried: what
// follows the streamed text. If the final text does not start with it
// (the lead failed, or its retry said something else, after it streamed;
// a router or a failure skipped its chat_output), the stream cannot take
// back what it sent: rest is then the whole final text, so none of the
// answer is lost, and ok is false.
func (a *answerText) rest(final string) (text string, ok bool) {
	sent := a.sent.String()
	if !strings.HasPrefix(final, sent) {
		return final, false
	}
	return final[len(sent):], true
}

// unstreamed reads the turn's final message (once its run completed)
// and returns the text of it a's stream has not carried (see rest).
func (s *Server) unstreamed(ctx context.Context, t *chat.Ticket, a *answerText) (string, error) {
	m, err := s.chats.GetMessage(ctx, t.ChatID, t.MessageID)
	if err != nil {
		return "", err
	}
	text, ok := a.rest(m.Content)
	if !ok {
		s.log.Warn("the streamed text is not the start of the answer: the whole answer follows it", "run", t.RunID,
			"streamed", a.sent.Len(), "answer", len(m.Content))
	}
	return text, nil
}

// runStartedInfo is what the adapters read from run_started.
type runStartedInfo struct {
	EntryNodeIDs  []string `json:"entryNodeIds"`
	ActiveNodeIDs []string `json:"activeNodeIds"`
}

// deltaText is the text a node_delta event carries ("" when none).
func deltaText(ev runEvent) string {
	var d struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(ev.Data, &d) != nil {
		return ""
	}
	return d.Text
}

// A tool call id an adapter gives a client for an interrupt names the
// run and the interrupt, so the answer a client sends back (an OpenAI
// tool message, an AG-UI tool message or resume entry) finds the run to
// continue without server-side state: "<runId>.<interruptId>". Run ids
// hold no '.'.
func interruptCallID(runID, interruptID string) string { return runID + "." + interruptID }

// splitCallID reverses interruptCallID; ok is false for other ids.
func splitCallID(id string) (runID, interruptID string, ok bool) {
	runID, interruptID, ok = strings.Cut(id, ".")
	return runID, interruptID, ok && strings.HasPrefix(runID, "r_") && runID != "r_" && interruptID != ""
}

// toolNamePattern is what a client tool may be called (the OpenAI and
// Anthropic APIs' rule).
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// checkClientTools validates tools a client declared.
func checkClientTools(ts []chat.ClientTool) error {
	if len(ts) > 64 {
		return badRequest("at most 64 tools")
	}
	seen := map[string]bool{}
	for i, t := range ts {
		if !toolNamePattern.MatchString(t.Name) {
			return badRequest("tools[%d]: name %q must be 1-64 letters, digits, '_' or '-'", i, t.Name)
		}
		if seen[t.Name] {
			return badRequest("tools[%d]: the name %q is used twice", i, t.Name)
		}
		seen[t.Name] = true
		if len(t.Description) > 4000 {
			return badRequest("tools[%d]: description longer than 4000 bytes", i)
		}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			var obj map[string]any
			if err := json.Unmarshal(t.Parameters, &obj); err != nil {
				return badRequest("tools[%d]: parameters must be a JSON Schema object", i)
			}
		}
	}
	return nil
}

// answers builds the resume value of a continue from the answers a
// client gave to a run's interrupts (by interrupt id): a client tool's
// answer is its result text; any other interrupt's answer is JSON
// ({"approved": true}). One pending interrupt takes the bare value;
// several take an object keyed by interrupt id.
func answers(rec *runtime.RunRecord, given map[string]any) (any, error) {
	if rec.Status != runtime.RunInterrupted {
		return nil, conflict("run %s is %s: it waits for no tool result", rec.ID, rec.Status)
	}
	vals := map[string]any{}
	for _, in := range rec.Interrupts {
		if v, ok := given[in.ID]; ok {
			vals[in.ID] = v
		}
	}
	if len(vals) == 0 {
		return nil, conflict("run %s waits for %d other answer(s)", rec.ID, len(rec.Interrupts))
	}
	if len(rec.Interrupts) == 1 {
		for _, v := range vals {
			return v, nil
		}
	}
	return vals, nil
}

// answerValue reads a client's answer text to an interrupt: a client
// tool's result as is; any other interrupt's answer must be JSON.
func answerValue(reason, content string) (any, error) {
	if reason == reasonClientTool {
		return content, nil
	}
	var v any
	if err := json.Unmarshal([]byte(content), &v); err != nil {
		return nil, badRequest(`the answer to a %s interrupt must be JSON, e.g. {"approved": true}`, reason)
	}
	return v, nil
}

// interruptReason returns the reason of interrupt id of rec ("" if none).
func interruptReason(rec *runtime.RunRecord, id string) string {
	for _, in := range rec.Interrupts {
		if in.ID == id {
			return in.Reason
		}
	}
	return ""
}

// transcriptMessage maps one message of a client's transcript to the
// history of a new chat: system and developer messages become system
// messages; user messages and assistant messages with text are kept; ok
// is false for what a transcript leaves out (tool results, empty
// assistant messages, other roles).
func transcriptMessage(role, text string) (chat.HistoryMessage, bool) {
	var r chat.Role
	switch role {
	case "system", "developer":
		r = chat.RoleSystem
	case "user":
		r = chat.RoleUser
	case "assistant":
		r = chat.RoleAssistant
	default:
		return chat.HistoryMessage{}, false
	}
	return chat.HistoryMessage{Role: r, Content: text}, text != "" || r == chat.RoleUser
}

// startEventStream commits an SSE response and returns its writer.
func (s *Server) startEventStream(c echo.Context) *sseWriter {
	h := c.Response().Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	return &sseWriter{w: c.Response(), rc: http.NewResponseController(c.Response()), timeout: s.cfg.WriteTimeout}
}

// sseData frames b as one SSE data event.
func sseData(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// errRunGone: a run's events ended without a terminal event (the run
// was deleted: a rollback superseded its turn).
var errRunGone = &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "the run was deleted before it ended (a rollback)"}
