package nodes

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// Node type names.
const (
	TypeChatStart  = "chat_start"
	TypeAgent      = "agent"
	TypeTool       = "tool"
	TypeRouter     = "router"
	TypeTemplate   = "template"
	TypeApproval   = "approval"
	TypeChatOutput = "chat_output"
	TypeDelay      = "delay"
	TypeFlaky      = "flaky"
)

// FieldIncludeUserTools is the chat_start data field that says whether
// the entry agents downstream get the user's tools (default true).
const FieldIncludeUserTools = "includeUserTools"

// FieldUserTools is the chat_start data field listing the user tools the
// graph allows (absent: any registered tool).
const FieldUserTools = "userTools"

// Port names.
const (
	PortMessage = "message"
	PortInput   = "input"
	PortOutput  = "output"
	PortTools   = "tools"
	PortSelf    = "self"
	PortTool    = "tool"
)

// Deps are the domain dependencies of the built-in node types. Zero
// fields take the documented defaults.
type Deps struct {
	// Models resolves agents' model names (default: llm.NewModels(), which
	// knows only the offline "echo" model).
	Models *llm.Models
	// Tools are the tools tool nodes and user tools name (default: a
	// registry with the built-ins; http_request then allows no host).
	Tools *tools.Registry
	// Ledger records completed tool calls and model steps of agents
	// (default: NewMemoryLedger(), lost on restart). A server with a
	// durable store passes NewStoreLedger(store), so a resume after a
	// restart, or in another process, does not repeat recorded calls.
	Ledger Ledger
	// Logger (default: discard).
	Logger *slog.Logger
	// DefaultMaxSteps bounds an agent's model calls when its data sets no
	// maxSteps (default 8).
	DefaultMaxSteps int
	// MaxToolResultBytes cuts tool results before the model sees them
	// (default 32 KiB).
	MaxToolResultBytes int
	// MaxParallelTools bounds the tool calls of one model step that run at
	// once (default 4).
	MaxParallelTools int
	// DeltaEventsPerRun is how many node_delta events a run sends one per
	// model chunk (chunks faster than their commit share one) before
	// agents coalesce their text (one delta per 100 ms or 8 KiB); default
	// 2000, negative: never coalesce, one delta per chunk.
	DeltaEventsPerRun int
}

// env is Deps with defaults applied, shared by the node types.
type env struct {
	Deps
	data *dataDecoder
	args *argumentSchemas
}

func newEnv(d Deps) (*env, error) {
	if d.Models == nil {
		d.Models = llm.NewModels()
	}
	if d.Tools == nil {
		d.Tools = tools.NewRegistry()
		if err := tools.RegisterBuiltins(d.Tools, tools.Config{}); err != nil {
			return nil, err
		}
	}
	if d.Ledger == nil {
		d.Ledger = NewMemoryLedger()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.DefaultMaxSteps <= 0 {
		d.DefaultMaxSteps = 8
	}
	if d.MaxToolResultBytes <= 0 {
		d.MaxToolResultBytes = 32 << 10
	}
	if d.DeltaEventsPerRun == 0 {
		d.DeltaEventsPerRun = 2000
	}
	if d.MaxParallelTools <= 0 {
		d.MaxParallelTools = 4
	}
	return &env{Deps: d, data: newDataDecoder(), args: newArgumentSchemas()}, nil
}

// Register adds the built-in node types to reg: chat_start, agent, tool,
// router, template, approval, chat_output, delay and flaky.
func Register(reg *runtime.Registry, deps Deps) error {
	e, err := newEnv(deps)
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	for _, t := range e.types() {
		if err := reg.Register(t); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	return nil
}

func (e *env) types() []runtime.NodeType {
	return []runtime.NodeType{
		e.chatStartType(), e.agentType(), e.toolType(), e.routerType(), e.templateType(),
		e.approvalType(), e.chatOutputType(), e.delayType(), e.flakyType(),
	}
}

// Port helpers.

func flowIn(required, many bool) runtime.Port {
	return runtime.Port{Name: PortInput, Direction: runtime.In, Channel: runtime.ChannelFlow, Required: required, Many: many}
}

func flowOut(name string) runtime.Port {
	return runtime.Port{Name: name, Direction: runtime.Out, Channel: runtime.ChannelFlow, Many: true}
}

func schema(s string) json.RawMessage {
	if !json.Valid([]byte(s)) {
		panic("nodes: invalid data schema: " + s)
	}
	return json.RawMessage(s)
}

// passThrough is the output of nodes that hand their input on: the
// single input's value in canonical JSON form.
func passThrough(in runtime.Inputs) any {
	if len(in) == 0 {
		return nil
	}
	return jsonValue(in[0].Value)
}
