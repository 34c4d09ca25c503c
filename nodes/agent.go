package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// Agent input modes (node_started data.inputMode).
const (
	InputChatHistory = "chat_history"
	InputFlowPayload = "flow_payload"
)

type agentData struct {
	// Name is shown in the chat and, sanitised, is the tool name when the
	// agent is linked into another agent's tools (default: the node id).
	Name string `json:"name" validate:"max=64"`
	// Description tells a calling agent what this one is for.
	Description  string   `json:"description" validate:"max=2000"`
	Model        string   `json:"model" validate:"max=200"`
	SystemPrompt string   `json:"systemPrompt" validate:"max=200000"`
	Temperature  *float64 `json:"temperature" validate:"omitempty,gte=0,lte=2"`
	MaxTokens    int      `json:"maxTokens" validate:"gte=0,lte=1000000"`
	MaxSteps     int      `json:"maxSteps" validate:"gte=0,lte=100"`
	TokenDelayMs int      `json:"tokenDelayMs" validate:"gte=0,lte=10000"`
}

func (e *env) agentType() runtime.NodeType {
	return runtime.NodeType{
		Name:          TypeAgent,
		DefaultEffect: runtime.EffectExternal,
		Label:         "Agent",
		Description: "Answers with a language model in a tool-calling loop, streaming tokens. Tools come from links into its tools port " +
			"(tool nodes, or other agents' self port: composition). Entry agents get the chat history, downstream agents their upstream payload.",
		Ports: []runtime.Port{
			flowIn(false, true),
			{Name: PortTools, Direction: runtime.In, Channel: runtime.ChannelLink, Many: true},
			flowOut(PortOutput),
			{Name: PortSelf, Direction: runtime.Out, Channel: runtime.ChannelLink, Many: true},
		},
		DataSchema: schema(`{"type":"object","properties":{
			"name":{"type":"string","maxLength":64,"description":"Display name; its tool name when linked into another agent."},
			"description":{"type":"string","maxLength":2000,"description":"What this agent does, for agents that call it."},
			"model":{"type":"string","maxLength":200,"default":"echo","description":"Model: echo, provider/model (GET /api/v1/models lists the configured ones), or a name the default provider knows."},
			"systemPrompt":{"type":"string","maxLength":200000},
			"temperature":{"type":"number","minimum":0,"maximum":2},
			"maxTokens":{"type":"integer","minimum":0,"maximum":1000000,"description":"0: the model's default."},
			"maxSteps":{"type":"integer","minimum":0,"maximum":100,"description":"Model calls per run of the agent (0: the deployment default, 8)."},
			"tokenDelayMs":{"type":"integer","minimum":0,"maximum":10000,"default":0,"description":"Slows the echo model's streaming."}}}`),
		New: e.newAgent,
	}
}

type agentNode struct {
	e        *env
	id       string
	cfg      agentData
	provider llm.Provider
	model    string
	maxSteps int
}

func (e *env) newAgent(n *runtime.Node) (runtime.Executor, error) {
	var d agentData
	if err := e.data.decode(n, &d); err != nil {
		return nil, err
	}
	p, model, err := e.Models.Resolve(d.Model)
	if err != nil {
		return nil, &runtime.FieldError{Field: "model", Message: err.Error()}
	}
	if d.Model == "" {
		d.Model = llm.EchoModel
	}
	a := &agentNode{e: e, id: n.ID, cfg: d, provider: p, model: model, maxSteps: d.MaxSteps}
	if a.maxSteps == 0 {
		a.maxSteps = e.DefaultMaxSteps
	}
	return a, nil
}

func (a *agentNode) displayName() string {
	if a.cfg.Name != "" {
		return a.cfg.Name
	}
	return a.id
}

// toolName is the agent's name as a tool: its name (or node id) with
// characters models reject replaced by '_'.
func (a *agentNode) toolName() string {
	src := a.cfg.Name
	if src == "" {
		src = a.id
	}
	return tools.SanitizeName(src, "agent")
}

// agentInput is what an agent was given, per the chat scope.
type agentInput struct {
	mode        string
	history     []Message
	payloads    []Message
	userTools   []string // names; nil unless the scope includes user tools
	clientTools []ClientTool
}

func (ai *agentInput) count() int { return len(ai.history) + len(ai.payloads) }

// prepare applies the input policy: entry agents get the chat history of
// the run input (inline, or resolved through the run's HistorySource)
// plus their flow payloads (the run input itself counts as the user's new
// message); downstream agents get only their payloads. An error is a
// history that could not be read; ai is then complete but for it.
func (a *agentNode) prepare(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (agentInput, error) {
	scope := scopeOf(fc)
	var entry, userTools bool
	if scope != nil {
		entry, userTools = scope.IsEntryAgent(n.ID), scope.IncludeUserTools(n.ID)
	} else {
		entry = fallbackEntry(in, fc)
	}
	ai := agentInput{mode: InputFlowPayload}
	var ci ChatInput
	if entry || userTools {
		ci = AsChatInput(fc.RunInput())
	}
	var herr error
	if entry {
		ai.mode = InputChatHistory
		ai.history, herr = ci.history(ctx, fc)
	}
	if userTools && entry {
		ai.clientTools = ci.ClientTools
		pol, _ := scope.(UserToolPolicy)
		ai.userTools = slices.DeleteFunc(slices.Clone(ci.UserTools), func(name string) bool {
			safe := a.e.Tools.Safe(name)
			if pol != nil && pol.UserToolAllowed(n.ID, name, safe) || pol == nil && safe {
				return false
			}
			a.e.Logger.Warn("user tool not allowed by the graph ignored", "agent", n.ID, "tool", name)
			return true
		})
	}
	for _, x := range in {
		var m Message
		if x.Source == "" {
			m = Message{Role: RoleUser, Content: AsChatInput(x.Value).Content}
		} else {
			m = AsMessage(x.Value)
		}
		ai.payloads = append(ai.payloads, m)
	}
	if herr != nil {
		return ai, runtime.Errorf(CodeHistory, "agent %s: chat history: %v", n.ID, herr)
	}
	return ai, nil
}

// fallbackEntry decides entry-ness without a chat scope (runs started
// without one): a run entry, or an agent fed only by chat_start nodes.
func fallbackEntry(in runtime.Inputs, fc *runtime.FlowContext) bool {
	if fc.IsEntry() {
		return true
	}
	for _, x := range in {
		if n, ok := fc.Node(x.Source); !ok || n.Type != TypeChatStart {
			return false
		}
	}
	return len(in) > 0
}

// messages builds the model conversation: system prompt, history, then
// every payload as a user turn.
func (a *agentNode) messages(ai agentInput) []llm.Message {
	out := make([]llm.Message, 0, ai.count()+1)
	if a.cfg.SystemPrompt != "" {
		out = append(out, llm.Message{Role: llm.RoleSystem, Content: a.cfg.SystemPrompt})
	}
	for _, m := range ai.history {
		role := m.Role
		switch role {
		case RoleUser, RoleAssistant, RoleSystem:
		default:
			role = RoleUser
		}
		out = append(out, llm.Message{Role: role, Content: m.Content})
	}
	for _, m := range ai.payloads {
		out = append(out, llm.Message{Role: llm.RoleUser, Content: m.Content})
	}
	return out
}

// toolset resolves the agent's tools: linked tools in edge order, then the
// user's tools the scope allows, then the client's tools (an earlier one
// wins a name clash).
func (a *agentNode) toolset(ctx context.Context, fc *runtime.FlowContext, ai agentInput) ([]*LinkedTool, error) {
	links, err := fc.ResolveLinks(ctx, PortTools)
	if err != nil {
		return nil, err
	}
	seen := map[string]string{}
	var out []*LinkedTool
	for _, l := range links {
		lt, ok := l.Artifact.(*LinkedTool)
		if !ok {
			return nil, runtime.Errorf(CodeToolConfig, "agent %s: the link from %s (%s) is not a tool", a.id, l.NodeID, l.Handle)
		}
		name := lt.Spec().Name
		if prev, dup := seen[name]; dup {
			return nil, runtime.Errorf(CodeToolConfig, "agent %s: tools from %s and %s are both named %q", a.id, prev, l.NodeID, name)
		}
		seen[name] = l.NodeID
		out = append(out, lt)
	}
	for _, name := range ai.userTools {
		if _, dup := seen[name]; dup {
			continue
		}
		t, err := a.e.Tools.Resolve(ctx, name) // a built-in, or server/tool of an MCP server
		if err != nil {
			a.e.Logger.Warn("user tool unavailable, ignored", "agent", a.id, "tool", name, "err", err)
			continue
		}
		if _, dup := seen[t.Spec().Name]; dup {
			continue // "server/tool" whose model-facing name a linked tool has
		}
		seen[name], seen[t.Spec().Name] = "user", "user"
		out = append(out, &LinkedTool{Tool: t})
	}
	for _, ct := range ai.clientTools {
		if _, dup := seen[ct.Name]; dup || ct.Name == "" {
			continue
		}
		seen[ct.Name] = "client"
		out = append(out, &LinkedTool{Tool: clientTool{ct}, Client: true})
	}
	return out, nil
}

func toolNames(ts []*LinkedTool) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Spec().Name
	}
	return names
}

// Describe implements runtime.Describer: node_started carries inputMode,
// messageCount (history + payloads, the system prompt not counted),
// tools and model.
func (a *agentNode) Describe(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) map[string]any {
	ai, _ := a.prepare(ctx, n, in, fc) // Execute fails with the error
	d := map[string]any{"inputMode": ai.mode, "messageCount": ai.count(), "model": a.cfg.Model}
	ts, err := a.toolset(ctx, fc, ai)
	if err != nil {
		d["tools"] = []string{}
		d["toolsError"] = err.Error()
	} else {
		d["tools"] = toolNames(ts)
	}
	return d
}

// Execute implements runtime.Executor.
func (a *agentNode) Execute(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
	ai, err := a.prepare(ctx, n, in, fc)
	if err != nil {
		return runtime.Result{}, err
	}
	ts, err := a.toolset(ctx, fc, ai)
	if err != nil {
		return runtime.Result{}, err
	}
	root := fc.RootRunID()
	scope := IdempotencyKey(root, n.ID)
	rs, err := a.resumeState(ctx, fc, scope)
	if err != nil {
		return runtime.Result{}, err
	}
	ds := newDeltaStream(fc, a.e.DeltaEventsPerRun)
	inv := a.invocation(root, scope, ts, ds.event, rs, "")
	inv.delta = ds.delta
	inv.usage = &usageTotal{}
	text, err := inv.run(ctx, a.messages(ai))
	ds.flush()
	var na *needApproval
	if errors.As(err, &na) {
		// Remember which call this interrupt asks about, so the resume
		// value goes to that call.
		val, _ := json.Marshal(na.key)
		if perr := a.e.Ledger.Put(ctx, LedgerRecord{Key: pendingKey(scope, fc.RunID()), RootRunID: root, NodeID: n.ID,
			Kind: LedgerApprovalPending, Value: val}); perr != nil {
			return runtime.Result{}, runtime.Errorf(CodeLedger, "record pending approval: %v", perr)
		}
		if na.call.ClientTool {
			return runtime.Result{}, runtime.Interrupt(ReasonClientTool, &ApprovalRequiredData{Kind: KindClientTool, ToolCall: na.call})
		}
		req := &ApprovalRequiredData{Kind: ApprovalKindToolCall, ToolCall: na.call,
			Prompt: fmt.Sprintf("Allow %s to call %s?", a.displayName(), na.call.Name)}
		_ = fc.Emit(EventApprovalRequired, req)
		return runtime.Result{}, runtime.Interrupt(ReasonToolApproval, req)
	}
	if err != nil {
		return runtime.Result{}, err
	}
	out := Message{Role: RoleAssistant, Content: text, Name: a.displayName(),
		Metadata: map[string]any{"nodeId": n.ID, "model": a.cfg.Model}}
	if u := inv.usage.value(); u != nil {
		out.Metadata["usage"] = u
	}
	return runtime.Result{Output: out.Value(), Summary: summary(text)}, nil
}

// pendingKey names the record of which call an interrupt raised in run
// runID asked about. A resume value always answers an interrupt of the
// run it continues (its parent), so the resumed execution finds the
// record under its ParentRunID.
func pendingKey(scope, runID string) string {
	return IdempotencyKey(scope, "pending", runID)
}

// resumeState returns the resume value of this execution and the key of
// the call it answers (recorded when the interrupt was raised).
func (a *agentNode) resumeState(ctx context.Context, fc *runtime.FlowContext, scope string) (*resumeState, error) {
	v, ok := fc.ResumeValue()
	if !ok {
		return nil, nil
	}
	rs := &resumeState{value: v}
	if parent := fc.ParentRunID(); parent != "" {
		rec, found, err := a.e.Ledger.Get(ctx, pendingKey(scope, parent))
		if err != nil {
			return nil, runtime.Errorf(CodeLedger, "read pending approval: %v", err)
		}
		if found {
			_ = json.Unmarshal(rec.Value, &rs.key)
		}
	}
	return rs, nil
}

func (a *agentNode) invocation(root, scope string, ts []*LinkedTool, emit func(runtime.EventType, any) error, rs *resumeState, member string) *invocation {
	inv := &invocation{a: a, root: root, scope: scope, tools: map[string]*LinkedTool{}, emit: emit, resume: rs, member: member}
	for _, t := range ts {
		s := t.Spec()
		inv.tools[s.Name] = t
		inv.specs = append(inv.specs, llm.ToolSpec{Name: s.Name, Description: s.Description, Parameters: s.Parameters})
	}
	if inv.emit == nil {
		inv.emit = func(runtime.EventType, any) error { return nil }
	}
	return inv
}

// Materialize implements runtime.Materializer: the agent as a tool for
// the agents its self port is linked to (composition).
func (a *agentNode) Materialize(ctx context.Context, n *runtime.Node, handle string, fc *runtime.FlowContext) (any, error) {
	if handle != PortSelf {
		return nil, fmt.Errorf("agent %s has no link port %q", n.ID, handle)
	}
	ts, err := a.toolset(ctx, fc, agentInput{})
	if err != nil {
		return nil, err
	}
	return &LinkedTool{Tool: &memberTool{a: a, tools: ts, root: fc.RootRunID()}, NodeID: n.ID}, nil
}

var memberSchema = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"The request for this agent."}},"required":["input"]}`)

// memberTool runs an agent as a tool call of another agent: its own loop
// over [system prompt, the input], with its own linked tools. Its tool
// calls are reported through the calling agent's events (agentNodeId);
// its text is not streamed.
type memberTool struct {
	a     *agentNode
	tools []*LinkedTool
	root  string
}

func (m *memberTool) Spec() tools.Spec {
	desc := m.a.cfg.Description
	if desc == "" {
		desc = "Ask the agent " + m.a.displayName() + "; it answers in text."
	}
	return tools.Spec{Name: m.a.toolName(), Description: desc, Parameters: memberSchema}
}

func (m *memberTool) Invoke(ctx context.Context, c tools.Call) (string, error) {
	var args struct {
		Input string `json:"input"`
	}
	if err := tools.DecodeArgs(c, &args); err != nil {
		return "", err
	}
	ce := callEnvFrom(ctx)
	key := c.IdempotencyKey
	if key == "" {
		key = IdempotencyKey(m.root, c.ID)
	}
	inv := m.a.invocation(m.root, IdempotencyKey(key, m.a.id), m.tools, ce.emit, ce.resume, m.a.id)
	inv.usage = ce.usage
	msgs := m.a.messages(agentInput{payloads: []Message{{Role: RoleUser, Content: args.Input}}})
	return inv.run(ctx, msgs)
}

// callEnv is what a calling agent passes down to member agents through
// the context of a tool call.
type callEnv struct {
	emit   func(runtime.EventType, any) error
	resume *resumeState
	usage  *usageTotal
}

type callEnvKey struct{}

func withCallEnv(ctx context.Context, ce *callEnv) context.Context {
	return context.WithValue(ctx, callEnvKey{}, ce)
}

func callEnvFrom(ctx context.Context) *callEnv {
	if ce, ok := ctx.Value(callEnvKey{}).(*callEnv); ok {
		return ce
	}
	return &callEnv{}
}
