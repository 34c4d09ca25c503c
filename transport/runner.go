package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/transport/chatstore"
)

// Kinds of chat calls; a run's run_started data.kind names the call that
// started it (a continuation also says "trigger":"continue_message").
const (
	KindStreamChat      = "stream_chat"
	KindStreamAgentChat = "stream_agent_chat"
	KindContinueMessage = "continue_message"
	KindRetryMessage    = "retry_message"
	KindEditUserMessage = "edit_user_message"
)

// chatRequest is one chat call, from HTTP or WebSocket: everything the
// one runner needs to build the run.
type chatRequest struct {
	Kind   string
	ChatID string
	// MessageID is the message named by continue, retry and edit.
	MessageID string
	// FromRunID: continue exactly this run (POST /runs/{id}/resume).
	FromRunID   string
	Content     string
	ParentID    *string
	AgentNodeID string
	UserTools   []string
	// ClientRequestID is also a cancel scope.
	ClientRequestID string
	Strategy        runcontrol.Strategy
	Resume          any
}

// runTicket is what a started chat call reveals to its client.
type runTicket struct {
	RunID         string `json:"runId"`
	MessageID     string `json:"messageId"`
	UserMessageID string `json:"userMessageId,omitempty"`
	ChatID        string `json:"chatId"`
}

// liveRun is a run bound in this process, from its id being minted until
// it has ended and its message is final.
type liveRun struct {
	id, chatID, messageID string
	nodeTypes             map[string]string
	done                  chan struct{}
}

// turn is a prepared chat call: what to write and what to run.
type turn struct {
	req       chatRequest
	chat      *chatstore.Chat
	graph     *runtime.Graph
	entries   []string
	user      *chatstore.Message // the turn's user message (new or existing)
	newUser   bool
	assistant *chatstore.Message // the message the run writes
	newAsst   bool
	parentRun *runtime.RunRecord // continue
	values    map[string]any     // continue: answers by interrupt id
	value     any                // continue: the single answer
}

// startChatRun is THE runner: every chat call (stream_chat,
// stream_agent_chat, continue_message, retry_message, edit_user_message,
// over HTTP or WebSocket, and run resume) goes through it. It prepares the
// turn, mints the run id, binds run control under the chat (and the
// client request id) before the id is revealed, applies the double
// texting strategy, writes the turn's messages, and starts the run in the
// background. The ticket names the run and the assistant message.
func (s *Server) startChatRun(ctx context.Context, req chatRequest) (*runTicket, error) {
	t, err := s.prepareTurn(ctx, req)
	if err != nil {
		return nil, err
	}
	runID := newID("r_")
	lr := &liveRun{id: runID, chatID: t.chat.ID, messageID: t.assistant.ID, nodeTypes: map[string]string{}, done: make(chan struct{})}
	for _, n := range t.graph.Nodes {
		lr.nodeTypes[n.ID] = n.Type
	}
	if err := s.admit(lr); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.retire(lr)
		}
	}()
	scopes := []runcontrol.Scope{runcontrol.ChatScope(t.chat.ID)}
	if req.ClientRequestID != "" {
		scopes = append(scopes, runcontrol.RequestScope(req.ClientRequestID))
	}
	bound, release, err := s.ctl.Bind(s.base, runID, scopes...)
	if err != nil {
		return nil, err
	}
	// Try for the chat's turn at once, in request order: a free chat is
	// taken now, so a later request can never overtake this one. Only a
	// busy chat makes an enqueue/interrupt/rollback request wait (in the
	// background); a reject request answers 409 now. A cancel that
	// already reached the run lets it through to end run_cancelled.
	held, err := s.queue.Acquire(bound, t.chat.ID, runID, runcontrol.Reject)
	switch {
	case err == nil, bound.Err() != nil:
	case errors.Is(err, runcontrol.ErrChatBusy) && req.Strategy != runcontrol.Reject:
		held = nil
	default:
		release()
		return nil, err
	}
	if err := s.writeTurn(ctx, t, runID); err != nil {
		if held != nil {
			held.Release()
		}
		release()
		return nil, err
	}
	s.hub.open(runID, 0)
	ok = true
	go s.execute(bound, release, held, t, lr)
	ticket := &runTicket{RunID: runID, MessageID: t.assistant.ID, ChatID: t.chat.ID}
	if t.newUser {
		ticket.UserMessageID = t.user.ID
	}
	s.log.Info("run accepted", "run", runID, "chat", t.chat.ID, "kind", req.Kind, "message", t.assistant.ID)
	return ticket, nil
}

// admit registers a run, enforcing the server and per-chat limits.
func (s *Server) admit(lr *liveRun) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errShuttingDown
	}
	if len(s.runs) >= s.cfg.MaxRuns {
		return fmt.Errorf("%w: the server runs %d (the limit)", errTooManyRuns, len(s.runs))
	}
	if s.perChat[lr.chatID] >= s.cfg.MaxRunsPerChat {
		return fmt.Errorf("%w: the chat has %d runs queued or running (the limit)", errTooManyRuns, s.perChat[lr.chatID])
	}
	s.runs[lr.id] = lr
	s.perChat[lr.chatID]++
	s.runsDone.Add(1)
	s.metrics.activeRuns.Inc()
	return nil
}

// retire unregisters a run that has ended (or never started).
func (s *Server) retire(lr *liveRun) {
	s.mu.Lock()
	delete(s.runs, lr.id)
	if s.perChat[lr.chatID]--; s.perChat[lr.chatID] <= 0 {
		delete(s.perChat, lr.chatID)
	}
	delete(s.cancelAt, lr.id)
	s.mu.Unlock()
	s.hub.close(lr.id)
	close(lr.done)
	s.metrics.activeRuns.Dec()
	s.runsDone.Done()
}

func (s *Server) liveRun(id string) *liveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// prepareTurn loads and checks everything a chat call needs; it writes
// nothing.
func (s *Server) prepareTurn(ctx context.Context, req chatRequest) (*turn, error) {
	if req.Strategy == "" {
		req.Strategy = runcontrol.DefaultStrategy
	}
	if err := req.Strategy.Validate(); err != nil {
		return nil, badRequest("%v", err)
	}
	if req.Kind == KindContinueMessage && req.FromRunID != "" {
		rec, err := s.store.GetRun(ctx, req.FromRunID)
		if err != nil {
			return nil, err
		}
		mid, _ := rec.Attrs["messageId"].(string)
		if rec.ChatID == "" || mid == "" {
			return nil, conflict("run %s is not a chat run", rec.ID)
		}
		req.ChatID, req.MessageID = rec.ChatID, mid
	}
	chat, err := s.chats.GetChat(ctx, req.ChatID)
	if err != nil {
		return nil, err
	}
	grec, err := s.chats.GetGraph(ctx, chat.GraphID)
	if errors.Is(err, chatstore.ErrNotFound) {
		return nil, conflict("the chat's graph %s was deleted", chat.GraphID)
	}
	if err != nil {
		return nil, err
	}
	g, err := loadGraph(grec)
	if err != nil {
		return nil, err
	}
	t := &turn{req: req, chat: chat, graph: g}
	now := time.Now().UTC()
	newAssistant := func(parent *chatstore.Message) {
		t.assistant = &chatstore.Message{ID: newID("m_"), ParentID: parent.ID, Role: chatstore.RoleAssistant,
			Status: chatstore.StatusPending, AgentNodeID: parent.AgentNodeID, CreatedAt: now}
		t.newAsst = true
	}
	newUserMsg := func(parentID, content, agent string, tools []string) {
		t.user = &chatstore.Message{ID: newID("m_"), ParentID: parentID, Role: chatstore.RoleUser, Content: content,
			Status: chatstore.StatusCompleted, AgentNodeID: agent, UserTools: tools, CreatedAt: now}
		t.newUser = true
		newAssistant(t.user)
	}
	var target *chatstore.Message
	if req.MessageID != "" {
		if target, err = s.chats.GetMessage(ctx, chat.ID, req.MessageID); err != nil {
			return nil, err
		}
	}
	switch req.Kind {
	case KindStreamChat, KindStreamAgentChat:
		parent := chat.ActiveLeafID
		if req.ParentID != nil && *req.ParentID != "" {
			if _, err := s.chats.GetMessage(ctx, chat.ID, *req.ParentID); err != nil {
				return nil, err
			}
			parent = *req.ParentID
		}
		if req.Kind == KindStreamAgentChat {
			n := findNode(g, req.AgentNodeID)
			if n == nil || n.Type != nodes.TypeAgent {
				return nil, badRequest("agentNodeId %q is not an agent node of graph %s", req.AgentNodeID, g.ID)
			}
			t.entries = []string{req.AgentNodeID}
		}
		newUserMsg(parent, req.Content, req.AgentNodeID, req.UserTools)
	case KindEditUserMessage:
		if target.Role != chatstore.RoleUser {
			return nil, badRequest("message %s is not a user message", target.ID)
		}
		tools := req.UserTools
		if tools == nil {
			tools = target.UserTools
		}
		newUserMsg(target.ParentID, req.Content, target.AgentNodeID, tools)
		if target.AgentNodeID != "" {
			t.entries = []string{target.AgentNodeID}
		}
	case KindRetryMessage:
		user := target
		if target.Role == chatstore.RoleAssistant {
			if user, err = s.chats.GetMessage(ctx, chat.ID, target.ParentID); err != nil {
				return nil, conflict("message %s has no user message to answer again", target.ID)
			}
		}
		if user.Role != chatstore.RoleUser {
			return nil, badRequest("message %s answers no user message", target.ID)
		}
		t.user = user
		newAssistant(user)
		if user.AgentNodeID != "" {
			t.entries = []string{user.AgentNodeID}
		}
	case KindContinueMessage:
		if target.Role != chatstore.RoleAssistant || target.RunID == "" {
			return nil, badRequest("message %s is not an assistant message written by a run", target.ID)
		}
		if target, err = s.settled(ctx, target); err != nil {
			return nil, err
		}
		if req.FromRunID != "" && req.FromRunID != target.RunID {
			return nil, conflict("run %s was already continued by run %s", req.FromRunID, target.RunID)
		}
		rec, err := s.store.GetRun(ctx, target.RunID)
		if errors.Is(err, runtime.ErrRunNotFound) {
			return nil, conflict("message %s is %s: its run %s has not started", target.ID, target.Status, target.RunID)
		}
		if err != nil {
			return nil, err
		}
		if !chatstore.Continuable(string(rec.Status)) {
			return nil, conflict("run %s is %s: only an interrupted, cancelled or failed run can be continued", rec.ID, rec.Status)
		}
		t.parentRun, t.assistant, t.entries = rec, target, rec.EntryNodeIDs
		if err := t.answers(req.Resume); err != nil {
			return nil, err
		}
	default:
		return nil, badRequest("unknown chat call %q", req.Kind)
	}
	if err := s.preflight(g, t.entries); err != nil {
		return nil, err
	}
	return t, nil
}

// settled waits (briefly) until the run behind an assistant message has
// written the message's final status: a client may continue right after
// it saw run_interrupted, possibly from another server process than the
// one finishing the run.
func (s *Server) settled(ctx context.Context, m *chatstore.Message) (*chatstore.Message, error) {
	if m.Status != chatstore.StatusPending && m.Status != chatstore.StatusRunning {
		return m, nil
	}
	if lr := s.liveRun(m.RunID); lr != nil {
		select {
		case <-lr.done:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return s.chats.GetMessage(ctx, m.ChatID, m.ID)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := s.store.GetRun(ctx, m.RunID)
		if err != nil || !rec.Status.Finished() || time.Now().After(deadline) {
			return m, nil // still running: the caller answers conflict
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return nil, ctx.Err()
		}
		if m, err = s.chats.GetMessage(ctx, m.ChatID, m.ID); err != nil {
			return nil, err
		}
		if m.Status != chatstore.StatusPending && m.Status != chatstore.StatusRunning {
			return m, nil
		}
	}
}

// answers maps a continue's resume value onto the parent run's pending
// interrupts: an object keyed by their ids answers several, anything else
// answers the only one.
func (t *turn) answers(v any) error {
	if v == nil {
		return nil
	}
	pending := t.parentRun.Interrupts
	if m, ok := v.(map[string]any); ok && len(pending) > 1 {
		vals := map[string]any{}
		for _, in := range pending {
			if x, ok := m[in.ID]; ok {
				vals[in.ID] = x
			}
		}
		if len(vals) == len(m) {
			t.values = vals
			return nil
		}
	}
	if len(pending) > 1 {
		ids := make([]string, len(pending))
		for i, in := range pending {
			ids[i] = in.ID
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidJSON,
			Message: "the run has several pending interrupts: resume with an object keyed by interrupt id", Details: map[string]any{"interruptIds": ids}}
	}
	if len(pending) == 1 {
		t.value = v
	}
	return nil
}

func findNode(g *runtime.Graph, id string) *runtime.Node {
	for i := range g.Nodes {
		if g.Nodes[i].ID == id {
			return &g.Nodes[i]
		}
	}
	return nil
}

// preflight compiles the graph and checks the part the run would touch, so
// a call that cannot start is answered 400 with the diagnostics instead of
// a run that fails at once: the nodes the entries reach by flow edges and
// the link producers they use must carry no diagnostics (warnings of a
// scratch area become errors for a run that enters it).
func (s *Server) preflight(g *runtime.Graph, entries []string) error {
	p, err := s.engine.Compile(g)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		for _, n := range g.Nodes {
			if t, ok := s.cfg.Registry.Lookup(n.Type); ok && t.Entry {
				entries = append(entries, n.ID)
			}
		}
		if len(entries) == 0 {
			return &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: "the graph has no chat_start node to run from",
				Details: runtime.Diagnostics{{Severity: runtime.SeverityError, Code: runtime.CodeUnknownEntry, Path: "nodes",
					Message: "add a chat_start node (or send stream_agent_chat to an agent)"}}}
		}
	}
	ds := p.Diagnostics()
	if len(ds) == 0 {
		return nil
	}
	flow, link := map[string][]string{}, map[string][]string{}
	for _, e := range g.Edges {
		switch e.Data.Channel {
		case runtime.ChannelFlow:
			flow[e.Source] = append(flow[e.Source], e.Target)
		case runtime.ChannelLink:
			link[e.Target] = append(link[e.Target], e.Source)
		}
	}
	touched := map[string]bool{}
	var walk func(id string, viaLink bool)
	walk = func(id string, viaLink bool) {
		if touched[id] {
			return
		}
		touched[id] = true
		if !viaLink {
			for _, n := range flow[id] {
				walk(n, false)
			}
		}
		for _, n := range link[id] {
			walk(n, true)
		}
	}
	for _, id := range entries {
		walk(id, false)
	}
	var bad runtime.Diagnostics
	for _, d := range ds {
		hit := touched[d.ID]
		for _, id := range d.NodeIDs {
			hit = hit || touched[id]
		}
		if hit {
			d.Severity = runtime.SeverityError
			bad = append(bad, d)
		}
	}
	if len(bad) > 0 {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph,
			Message: "the part of the graph this run needs is invalid", Details: bad}
	}
	return nil
}

// writeTurn persists the turn's messages (or claims the continued one)
// with the run id, before the id is revealed.
func (s *Server) writeTurn(ctx context.Context, t *turn, runID string) error {
	if t.req.Kind == KindContinueMessage {
		if err := s.chats.ClaimMessage(ctx, t.chat.ID, t.assistant.ID, t.assistant.RunID, runID); err != nil {
			return err
		}
		t.assistant.RunID, t.assistant.Status, t.assistant.Error = runID, chatstore.StatusPending, ""
		return nil
	}
	t.assistant.RunID, t.assistant.TurnRunID = runID, runID
	msgs := []*chatstore.Message{t.assistant}
	if t.newUser {
		t.user.RunID, t.user.TurnRunID = runID, runID
		msgs = []*chatstore.Message{t.user, t.assistant}
	}
	return s.chats.AddMessages(ctx, t.chat.ID, t.assistant.ID, msgs...)
}

// execute runs a started chat call to its end: it waits for the chat's
// turn, builds the input from the branch, executes (or resumes) the graph
// with the events going to the hub, and writes the final message.
func (s *Server) execute(bound context.Context, release func(), held *runcontrol.Turn, t *turn, lr *liveRun) {
	defer s.retire(lr)
	defer release()
	ctx := context.WithoutCancel(bound)
	if held == nil {
		var err error
		held, err = s.queue.Acquire(bound, t.chat.ID, lr.id, t.req.Strategy)
		if err != nil && bound.Err() == nil {
			// Not a cancel: the queue failed (a lost turn lease, say).
			s.failUnstarted(ctx, t, lr, err)
			return
		}
	}
	if held != nil {
		defer held.Release()
		if held.Strategy == runcontrol.Rollback && len(held.Superseded) > 0 {
			s.rollback(ctx, t, held.Superseded)
		}
	}
	if t.req.Kind != KindContinueMessage {
		t.assistant.Status = chatstore.StatusRunning
		_ = s.chats.UpdateMessage(ctx, t.assistant)
	}

	// The run's context follows the bound one, but only from run_started
	// on: a cancel that came first (a pending intent, a cancel while
	// queued) must still let the run record and run_started be written,
	// and then stops the run before any node starts.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	hold := &terminalHold{s: s, lr: lr}
	defer hold.flush()
	var (
		linkOnce sync.Once
		stop     = func() bool { return false }
		started  bool
	)
	sink := runtime.SinkFunc(func(ev runtime.Event) {
		if ev.Type == runtime.EventRunStarted {
			started = true
			linkOnce.Do(func() {
				if bound.Err() != nil {
					cancelRun(context.Cause(bound))
				} else {
					stop = context.AfterFunc(bound, func() { cancelRun(context.Cause(bound)) })
				}
			})
		}
		hold.emit(ev)
	})
	services := &nodes.Services{Scope: chatscope.New(t.graph, t.entries)}
	attrs := map[string]any{"messageId": t.assistant.ID}
	if t.req.ClientRequestID != "" {
		attrs["clientRequestId"] = t.req.ClientRequestID
	}
	var (
		res *runtime.RunResult
		err error
	)
	if t.req.Kind == KindContinueMessage {
		attrs["trigger"] = KindContinueMessage
		res, err = s.engine.Resume(runCtx, runtime.ResumeRequest{RunID: t.parentRun.ID, NewRunID: lr.id, Graph: t.graph, Kind: KindContinueMessage,
			Value: t.value, Values: t.values, Attrs: attrs, Services: services, Sink: sink})
	} else {
		attrs["userMessageId"] = t.user.ID
		in, ierr := s.turnInput(ctx, t)
		if ierr != nil {
			s.failUnstarted(ctx, t, lr, ierr)
			return
		}
		res, err = s.engine.Invoke(runCtx, runtime.RunRequest{RunID: lr.id, ChatID: t.chat.ID, Graph: t.graph,
			EntryNodeIDs: t.entries, Input: in, Kind: t.req.Kind, Attrs: attrs, Services: services, Sink: sink})
	}
	stop()
	// The run is over: a cancel from now on is for whatever runs next.
	release()
	if err != nil && !started {
		s.failUnstarted(ctx, t, lr, err)
		return
	}
	if err != nil {
		s.log.Error("run store failed", "run", lr.id, "err", err)
	}
	s.finishMessage(ctx, t, res, err)
	hold.flush()
}

// terminalHold publishes a run's events as they come but holds its
// terminal event back until flush: the assistant message is final before
// any client learns the run ended (so a continue or a GET right after
// run_interrupted sees the message interrupted).
type terminalHold struct {
	s  *Server
	lr *liveRun
	mu sync.Mutex
	ev *runtime.Event
}

func (h *terminalHold) emit(ev runtime.Event) {
	if ev.Type.Terminal() {
		h.mu.Lock()
		h.ev = &ev
		h.mu.Unlock()
		return
	}
	h.s.publish(h.lr, ev)
}

func (h *terminalHold) flush() {
	h.mu.Lock()
	ev := h.ev
	h.ev = nil
	h.mu.Unlock()
	if ev != nil {
		h.s.publish(h.lr, *ev)
	}
}

// turnInput builds the run input: the branch before the turn's user
// message (oldest first), its content and the user's tools.
func (s *Server) turnInput(ctx context.Context, t *turn) (any, error) {
	msgs, err := s.chats.Messages(ctx, t.chat.ID)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*chatstore.Message, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	var hist []nodes.Message
	for id, hops := t.user.ParentID, 0; id != "" && hops <= len(msgs); hops++ {
		m := byID[id]
		if m == nil {
			break
		}
		if m.Role == chatstore.RoleUser || (m.Role == chatstore.RoleAssistant && m.Content != "") {
			hist = append(hist, nodes.Message{Role: m.Role, Content: m.Content})
		}
		id = m.ParentID
	}
	slices.Reverse(hist)
	return nodes.ChatInput{History: hist, Content: t.user.Content, UserTools: t.user.UserTools}.Value(), nil
}

// rollback deletes the messages and runs of the turns a rollback undid,
// and re-parents this turn's user message onto what remains.
func (s *Server) rollback(ctx context.Context, t *turn, victims []string) {
	msgs, err := s.chats.Messages(ctx, t.chat.ID)
	if err != nil {
		s.log.Error("rollback: reading messages", "chat", t.chat.ID, "err", err)
		return
	}
	undo := map[string]bool{}
	for _, v := range victims {
		undo[v] = true
	}
	byID := map[string]*chatstore.Message{}
	var del []string
	gone := map[string]bool{}
	for _, m := range msgs {
		byID[m.ID] = m
		if m.TurnRunID != "" && undo[m.TurnRunID] {
			del = append(del, m.ID)
			gone[m.ID] = true
		}
	}
	if t.newUser {
		p := t.user.ParentID
		for hops := 0; gone[p] && hops <= len(msgs); hops++ {
			p = byID[p].ParentID
		}
		if p != t.user.ParentID {
			t.user.ParentID = p
			if err := s.chats.UpdateMessage(ctx, t.user); err != nil {
				s.log.Error("rollback: re-parenting", "message", t.user.ID, "err", err)
			}
		}
	}
	if err := s.chats.DeleteMessages(ctx, t.chat.ID, del, t.assistant.ID); err != nil {
		s.log.Error("rollback: deleting messages", "chat", t.chat.ID, "err", err)
	}
	if ins, ok := s.raw.(runtime.Inspector); ok {
		for _, v := range victims {
			if err := ins.DeleteRun(ctx, v); err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				s.log.Warn("rollback: deleting run", "run", v, "err", err)
			}
		}
	}
	s.log.Info("rolled back", "chat", t.chat.ID, "runs", victims, "messages", len(del))
}

// finishMessage writes the assistant message's final status and content.
func (s *Server) finishMessage(ctx context.Context, t *turn, res *runtime.RunResult, err error) {
	m := t.assistant
	switch {
	case res == nil:
		m.Status, m.Error = chatstore.StatusFailed, "the run's store failed"
	default:
		switch res.Status {
		case runtime.RunCompleted:
			m.Status, m.Error = chatstore.StatusCompleted, ""
		case runtime.RunFailed:
			m.Status, m.Error = chatstore.StatusFailed, errText(res.Err, "the run failed")
		case runtime.RunCancelled:
			code := runcontrol.Code(res.Err)
			if code == "" {
				code = "cancelled"
			}
			m.Status, m.Error = chatstore.StatusCancelled, code
		case runtime.RunInterrupted:
			m.Status, m.Error = chatstore.StatusInterrupted, ""
		default:
			m.Status = string(res.Status)
		}
		if text, ok := answer(res, t.graph, t.entries); ok {
			m.Content = text
		}
	}
	if err != nil && m.Error == "" {
		m.Error = "the run's store failed"
	}
	if uerr := s.chats.UpdateMessage(ctx, m); uerr != nil && !errors.Is(uerr, chatstore.ErrNotFound) {
		s.log.Error("writing the assistant message", "message", m.ID, "err", uerr)
	}
}

func errText(err error, def string) string {
	if err == nil {
		return def
	}
	var ne *runtime.NodeError
	if errors.As(err, &ne) {
		return fmt.Sprintf("node %s failed (%s): %v", ne.NodeID, ne.Code, ne.Err)
	}
	return err.Error()
}

// answer is the assistant text of a run: the chat_output nodes' messages
// (in graph order, joined by blank lines), else the entry agent's answer.
func answer(res *runtime.RunResult, g *runtime.Graph, entries []string) (string, bool) {
	var parts []string
	for _, n := range g.Nodes {
		if n.Type != nodes.TypeChatOutput {
			continue
		}
		if out, ok := res.Output(n.ID); ok {
			parts = append(parts, nodes.AsMessage(out).Content)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n\n"), true
	}
	for _, id := range entries {
		if n := findNode(g, id); n != nil && n.Type == nodes.TypeAgent {
			if out, ok := res.Output(id); ok {
				return nodes.AsMessage(out).Content, true
			}
		}
	}
	return "", false
}

// failUnstarted ends a run that could not start (the engine refused it, or
// the chat queue failed) the way every run ends: a run record and a log of
// run_started then run_failed, so its subscribers are never left waiting.
func (s *Server) failUnstarted(ctx context.Context, t *turn, lr *liveRun, cause error) {
	s.log.Warn("run could not start", "run", lr.id, "chat", t.chat.ID, "err", cause)
	now := time.Now().UTC()
	msg := apiError(cause).Message
	code := "start_failed"
	var ge *runtime.GraphError
	if errors.As(cause, &ge) {
		code, msg = CodeInvalidGraph, ge.Error()
	}
	rec := &runtime.RunRecord{ID: lr.id, RootID: lr.id, ChatID: t.chat.ID, GraphID: t.graph.ID, PlanVersion: t.graph.PlanVersion,
		Kind: t.req.Kind, Attrs: map[string]any{"messageId": t.assistant.ID}, EntryNodeIDs: t.entries,
		Status: runtime.RunFailed, Error: msg, LastSeq: 2, CreatedAt: now, UpdatedAt: now}
	if t.parentRun != nil {
		rec.ParentID, rec.RootID = t.parentRun.ID, t.parentRun.RootID
	}
	started := &runtime.RunStartedData{Kind: rec.Kind, GraphID: rec.GraphID, PlanVersion: rec.PlanVersion,
		EntryNodeIDs: orEmpty(t.entries), ActiveNodeIDs: []string{}, ParentRunID: rec.ParentID, Resumed: rec.ParentID != "",
		Attrs: map[string]any{"messageId": t.assistant.ID}}
	evs := []runtime.Event{
		{Seq: 1, RunID: lr.id, ChatID: t.chat.ID, Type: runtime.EventRunStarted, Time: now, Data: started},
		{Seq: 2, RunID: lr.id, ChatID: t.chat.ID, Type: runtime.EventRunFailed, Time: now,
			Data: &runtime.RunFailedData{Error: msg, Code: code}},
	}
	if err := s.store.CreateRun(ctx, rec); err == nil {
		if err := s.store.AppendEvents(ctx, lr.id, rec.Token, evs); err != nil {
			s.log.Error("logging a run that could not start", "run", lr.id, "err", err)
		}
	}
	t.assistant.Status, t.assistant.Error = chatstore.StatusFailed, msg
	_ = s.chats.UpdateMessage(ctx, t.assistant)
	for _, ev := range evs {
		s.publish(lr, ev)
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// publish hands one event of a local run to the hub and the metrics.
func (s *Server) publish(lr *liveRun, ev runtime.Event) {
	f, err := encodeEvent(ev)
	if err != nil {
		s.log.Error("encoding an event", "run", ev.RunID, "type", ev.Type, "err", err)
		f = frame{Seq: ev.Seq, Type: ev.Type, JSON: mustJSON(runtime.Event{Seq: ev.Seq, RunID: ev.RunID, ChatID: ev.ChatID,
			Type: ev.Type, NodeID: ev.NodeID, Attempt: ev.Attempt, Time: ev.Time})}
	}
	s.hub.publish(ev.RunID, f)
	if s.cfg.Relay != nil {
		s.cfg.Relay.Publish(ev.RunID, f.Seq, string(f.Type), f.JSON)
	}
	switch ev.Type {
	case runtime.EventNodeCompleted, runtime.EventNodeFailed:
		s.metrics.observeNode(lr.nodeTypes[ev.NodeID], ev)
		s.log.Debug("node ended", "run", ev.RunID, "node", ev.NodeID, "type", ev.Type)
	case runtime.EventRunStarted:
		s.log.Info("run started", "run", ev.RunID, "chat", ev.ChatID)
	case runtime.EventRunCompleted, runtime.EventRunFailed, runtime.EventRunCancelled, runtime.EventRunInterrupted:
		status := strings.TrimPrefix(string(ev.Type), "run_")
		s.metrics.runs.WithLabelValues(status).Inc()
		if ev.Type == runtime.EventRunCancelled {
			s.mu.Lock()
			at, ok := s.cancelAt[ev.RunID]
			s.mu.Unlock()
			if ok {
				s.metrics.cancelLatency.Observe(time.Since(at).Seconds())
			}
		}
		s.log.Info("run ended", "run", ev.RunID, "chat", ev.ChatID, "status", status, "lastSeq", ev.Seq)
	}
}

// noteCancel records when a cancel reached runs (cancel latency metric).
func (s *Server) noteCancel(ids []string) {
	now := time.Now()
	s.mu.Lock()
	for _, id := range ids {
		if _, ok := s.runs[id]; ok {
			if _, seen := s.cancelAt[id]; !seen {
				s.cancelAt[id] = now
			}
		}
	}
	s.mu.Unlock()
}
