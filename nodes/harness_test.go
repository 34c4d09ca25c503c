package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is an engine with the built-in node types, a memory store, a
// memory ledger, the built-in tools plus counting test tools, and a
// scripted model ("script/...").
type harness struct {
	eng    *runtime.Engine
	store  *memory.Store
	ledger *nodes.MemoryLedger
	tools  *tools.Registry
	models *llm.Models
	script *scripted

	mu    sync.Mutex
	calls map[string][]tools.Call // tool name -> calls received
}

// newHarness builds a harness whose built-in tools have builtins[0] as
// config (default: none, so http_request allows no host).
func newHarness(t *testing.T, builtins ...tools.Config) *harness {
	t.Helper()
	h := &harness{store: memory.New(), ledger: nodes.NewMemoryLedger(), tools: tools.NewRegistry(),
		models: llm.NewModels(), script: &scripted{}, calls: map[string][]tools.Call{}}
	var cfg tools.Config
	if len(builtins) > 0 {
		cfg = builtins[0]
	}
	require.NoError(t, tools.RegisterBuiltins(h.tools, cfg))
	for _, name := range []string{"sibling", "guarded", "other"} {
		require.NoError(t, h.tools.Register(tools.New(tools.Spec{Name: name, Description: "counts its calls",
			Parameters: json.RawMessage(`{"type":"object"}`)}, func(_ context.Context, c tools.Call) (string, error) {
			h.mu.Lock()
			h.calls[name] = append(h.calls[name], c)
			h.mu.Unlock()
			return name + " ok", nil
		})))
	}
	require.NoError(t, h.models.Register("script", h.script))
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{Models: h.models, Tools: h.tools, Ledger: h.ledger}))
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: h.store, CancelGrace: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	h.eng = eng
	return h
}

func (h *harness) toolCalls(name string) []tools.Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]tools.Call(nil), h.calls[name]...)
}

// scripted is a model whose answers a test sets: step is called with
// each request.
type scripted struct {
	n    atomic.Int32
	step atomic.Pointer[func(req llm.Request) (llm.Response, error)]
}

func (s *scripted) set(f func(req llm.Request) (llm.Response, error)) { s.step.Store(&f) }

func (s *scripted) Stream(ctx context.Context, req llm.Request, onText func(string)) (llm.Response, error) {
	s.n.Add(1)
	resp, err := (*s.step.Load())(req)
	if err != nil {
		return resp, err
	}
	if onText != nil && resp.Content != "" {
		for w := range llm.Words(resp.Content) {
			onText(w)
		}
	}
	return resp, nil
}

// gb builds graphs; edge handles follow the node types.
type gb struct {
	g     runtime.Graph
	types map[string]string
}

func newGraph(id string) *gb {
	return &gb{g: runtime.Graph{ID: id, PlanVersion: 1}, types: map[string]string{}}
}

func (b *gb) node(id, typ string, data ...any) *gb {
	n := runtime.Node{ID: id, Type: typ}
	if len(data) > 0 {
		switch d := data[0].(type) {
		case string:
			n.Data = json.RawMessage(d)
		default:
			raw, err := json.Marshal(d)
			if err != nil {
				panic(err)
			}
			n.Data = raw
		}
	}
	b.g.Nodes = append(b.g.Nodes, n)
	b.types[id] = typ
	return b
}

// flow adds a flow edge; opts are a when ("on_failure", "always") or a condition.
func (b *gb) flow(src, dst string, opts ...string) *gb {
	h := nodes.PortOutput
	if b.types[src] == nodes.TypeChatStart {
		h = nodes.PortMessage
	}
	e := runtime.Edge{ID: fmt.Sprintf("e%d", len(b.g.Edges)+1), Source: src, SourceHandle: h, Target: dst,
		TargetHandle: nodes.PortInput, Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}
	for _, o := range opts {
		switch o {
		case "on_failure", "always", "on_success":
			e.Data.When = runtime.When(o)
		default:
			e.Data.Condition = o
		}
	}
	b.g.Edges = append(b.g.Edges, e)
	return b
}

// link wires a tool node or an agent's self port into an agent's tools.
func (b *gb) link(src, dst string) *gb {
	h := nodes.PortSelf
	if b.types[src] == nodes.TypeTool {
		h = nodes.PortTool
	}
	b.g.Edges = append(b.g.Edges, runtime.Edge{ID: fmt.Sprintf("e%d", len(b.g.Edges)+1), Source: src, SourceHandle: h,
		Target: dst, TargetHandle: nodes.PortTools, Data: runtime.EdgeData{Channel: runtime.ChannelLink}})
	return b
}

func (b *gb) build() *runtime.Graph { g := b.g; return &g }

// sink records a run's events.
type sink struct {
	mu  sync.Mutex
	evs []runtime.Event
}

func (s *sink) Emit(e runtime.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

func (s *sink) events() []runtime.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]runtime.Event(nil), s.evs...)
}

// of returns the events of one type (and node, when not empty).
func (s *sink) of(typ runtime.EventType, node string) []runtime.Event {
	var out []runtime.Event
	for _, e := range s.events() {
		if e.Type == typ && (node == "" || e.NodeID == node) {
			out = append(out, e)
		}
	}
	return out
}

// data returns an event's payload as JSON values.
func data(t *testing.T, e runtime.Event) map[string]any {
	t.Helper()
	b, err := json.Marshal(e.Data)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func (s *sink) texts(node string) string {
	var out string
	for _, e := range s.of(nodes.EventNodeDelta, node) {
		out += e.Data.(*nodes.NodeDeltaData).Text
	}
	return out
}

type runOpt func(*runtime.RunRequest)

func entries(ids ...string) runOpt { return func(r *runtime.RunRequest) { r.EntryNodeIDs = ids } }

// run invokes g with a chat input, the chat scope of the run and a sink,
// and checks the lifecycle contract of its events.
func (h *harness) run(t *testing.T, ctx context.Context, g *runtime.Graph, in nodes.ChatInput, opts ...runOpt) (*runtime.RunResult, *sink) {
	t.Helper()
	s := &sink{}
	req := runtime.RunRequest{Graph: g, Input: in.Value(), Sink: s}
	for _, o := range opts {
		o(&req)
	}
	req.Services = &nodes.Services{Scope: h.scope(t, g, req.EntryNodeIDs)}
	res, err := h.eng.Invoke(ctx, req)
	require.NoError(t, err)
	checkLifecycle(t, s.events())
	return res, s
}

// scope is the chat scope of a run of g started at entries.
func (h *harness) scope(t *testing.T, g *runtime.Graph, entries []string) *chatscope.Scope {
	t.Helper()
	p, err := h.eng.Compile(g)
	require.NoError(t, err)
	return chatscope.New(p, entries)
}

func (h *harness) resume(t *testing.T, g *runtime.Graph, runID string, value any) (*runtime.RunResult, *sink) {
	t.Helper()
	s := &sink{}
	parent, err := h.store.GetRun(context.Background(), runID)
	require.NoError(t, err)
	res, err := h.eng.Resume(context.Background(), runtime.ResumeRequest{RunID: runID, Graph: g, Value: value, Sink: s,
		Services: &nodes.Services{Scope: h.scope(t, g, parent.EntryNodeIDs)}})
	require.NoError(t, err)
	checkLifecycle(t, s.events())
	return res, s
}

func output(t *testing.T, res *runtime.RunResult, node string) nodes.Message {
	t.Helper()
	v, ok := res.Output(node)
	require.True(t, ok, "node %s has no output (status %s)", node, res.NodeStatus(node))
	return nodes.AsMessage(v)
}

// checkLifecycle asserts the event contract nodes rely on: seq without
// gaps, one node_started and one terminal per executed node, domain
// events only in between.
func checkLifecycle(t *testing.T, evs []runtime.Event) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, runtime.EventRunStarted, evs[0].Type)
	require.True(t, evs[len(evs)-1].Type.Terminal())
	started, ended := map[string]bool{}, map[string]bool{}
	for i, e := range evs {
		require.Equal(t, int64(i+1), e.Seq)
		switch e.Type {
		case runtime.EventNodeStarted:
			require.False(t, started[e.NodeID], "%s started twice", e.NodeID)
			started[e.NodeID] = true
		case runtime.EventNodeCompleted, runtime.EventNodeFailed, runtime.EventNodeCancelled, runtime.EventNodeInterrupted:
			require.True(t, started[e.NodeID] && !ended[e.NodeID], "%s terminal out of order", e.NodeID)
			ended[e.NodeID] = true
		case nodes.EventNodeDelta, nodes.EventToolCall, nodes.EventToolResult, nodes.EventApprovalRequired:
			require.True(t, started[e.NodeID] && !ended[e.NodeID], "%s outside %s's lifetime", e.Type, e.NodeID)
		}
	}
	for id := range started {
		require.True(t, ended[id], "%s never ended", id)
	}
}
