package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// The test node types are generic on purpose: the kernel knows no domain.
//
//	start  (entry)  >out flow
//	step            <in flow(many)  >out flow
//	sink            <in flow(many)
//	producer        >link link(many)
//	consumer        <deps link(many) <in flow(many) >out flow
//
// step data: {"fail": N, "code": "c", "sleepMs": n, "panic": true,
// "interrupt": "reason", "output": any, "hang": true}

type stepCfg struct {
	Fail      int             `json:"fail"`
	Code      string          `json:"code"`
	SleepMs   int             `json:"sleepMs"`
	Panic     bool            `json:"panic"`
	Interrupt string          `json:"interrupt"`
	Output    json.RawMessage `json:"output"`
	Hang      bool            `json:"hang"`
	Label     string          `json:"label"`
	Deltas    int             `json:"deltas"` // node_delta events to emit before finishing
}

// kit counts executions per node across runs and builds engines.
type kit struct {
	mu       sync.Mutex
	execs    map[string]int
	attempts map[string]int
	order    []string
	gate     map[string]chan struct{}
	started  map[string]chan struct{}
	reg      *runtime.Registry
	total    atomic.Int64
}

func newKit(t testing.TB) *kit {
	k := &kit{execs: map[string]int{}, attempts: map[string]int{}, gate: map[string]chan struct{}{}, started: map[string]chan struct{}{}}
	k.reg = runtime.NewRegistry()
	flowOut := runtime.Port{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}
	flowIn := runtime.Port{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "start", Entry: true, Ports: []runtime.Port{flowOut},
		New: func(n *runtime.Node) (runtime.Executor, error) { return k.stepExec(n, false) }}))
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "step", Ports: []runtime.Port{flowIn, flowOut},
		New: func(n *runtime.Node) (runtime.Executor, error) { return k.stepExec(n, true) }}))
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "sink", Ports: []runtime.Port{flowIn},
		New: func(n *runtime.Node) (runtime.Executor, error) { return k.stepExec(n, true) }}))
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "producer",
		Ports: []runtime.Port{{Name: "link", Direction: runtime.Out, Channel: runtime.ChannelLink, Many: true},
			{Name: "deps", Direction: runtime.In, Channel: runtime.ChannelLink, Many: true}},
		New: func(n *runtime.Node) (runtime.Executor, error) { return &producer{k: k}, nil }}))
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "consumer",
		Ports: []runtime.Port{{Name: "deps", Direction: runtime.In, Channel: runtime.ChannelLink, Many: true}, flowIn, flowOut},
		New:   func(n *runtime.Node) (runtime.Executor, error) { return &consumer{k: k}, nil }}))
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "strict", Ports: []runtime.Port{
		{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Required: true}, flowOut},
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var c struct {
				Level *int `json:"level"`
			}
			_ = json.Unmarshal(n.Data, &c)
			if c.Level != nil && *c.Level < 0 {
				return nil, &runtime.FieldError{Field: "level", Message: "must not be negative"}
			}
			return k.stepExec(n, true)
		}}))
	return k
}

func (k *kit) engine(t testing.TB, store runtime.Store, mod ...func(*runtime.Config)) *runtime.Engine {
	cfg := runtime.Config{Registry: k.reg, Store: store, CancelGrace: 2 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	e, err := runtime.NewEngine(cfg)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

func (k *kit) execCount(id string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.execs[id]
}

// hold makes node id block until release is called; started is closed when it begins.
func (k *kit) hold(id string) (started <-chan struct{}, release func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, s := make(chan struct{}), make(chan struct{})
	k.gate[id], k.started[id] = g, s
	return s, func() { close(g) }
}

func (k *kit) stepExec(n *runtime.Node, _ bool) (runtime.Executor, error) {
	var c stepCfg
	if len(n.Data) > 0 {
		if err := json.Unmarshal(n.Data, &c); err != nil {
			return nil, err
		}
	}
	return runtime.ExecutorFunc(func(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
		k.total.Add(1)
		k.mu.Lock()
		k.attempts[n.ID]++
		att := k.attempts[n.ID]
		k.execs[n.ID]++
		k.order = append(k.order, n.ID)
		gate, started := k.gate[n.ID], k.started[n.ID]
		delete(k.gate, n.ID) // a hold applies to one execution
		k.mu.Unlock()
		if started != nil {
			close(started)
			k.mu.Lock()
			delete(k.started, n.ID)
			k.mu.Unlock()
		}
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return runtime.Result{}, context.Cause(ctx)
			}
		}
		if c.Hang {
			<-ctx.Done()
			return runtime.Result{}, context.Cause(ctx)
		}
		if c.SleepMs > 0 {
			select {
			case <-time.After(time.Duration(c.SleepMs) * time.Millisecond):
			case <-ctx.Done():
				return runtime.Result{}, context.Cause(ctx)
			}
		}
		if c.Panic {
			panic("boom in " + n.ID)
		}
		for i := range c.Deltas {
			if err := fc.Emit("node_delta", map[string]any{"text": fmt.Sprintf("%s%d ", n.ID, i)}); err != nil {
				return runtime.Result{}, err
			}
		}
		if c.Fail > 0 && att <= c.Fail {
			code := c.Code
			if code == "" {
				code = "flaky"
			}
			return runtime.Result{}, runtime.Errorf(code, "%s failed attempt %d", n.ID, att)
		}
		if c.Interrupt != "" {
			if v, ok := fc.ResumeValue(); ok {
				return runtime.Result{Output: map[string]any{"answer": v}}, nil
			}
			return runtime.Result{}, runtime.Interrupt(c.Interrupt, map[string]any{"node": n.ID})
		}
		if len(c.Output) > 0 {
			var v any
			_ = json.Unmarshal(c.Output, &v)
			return runtime.Result{Output: v}, nil
		}
		// Default output: this node's id joined to its inputs, so results
		// show the path values took.
		s := n.ID
		for _, i := range in {
			s += fmt.Sprintf("(%v)", i.Value)
		}
		return runtime.Result{Output: s}, nil
	}), nil
}

type producer struct{ k *kit }

func (p *producer) Execute(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
	return runtime.Result{}, errors.New("producers are not executed")
}

func (p *producer) Materialize(ctx context.Context, n *runtime.Node, handle string, fc *runtime.FlowContext) (any, error) {
	p.k.mu.Lock()
	p.k.execs["mat:"+n.ID]++
	p.k.mu.Unlock()
	deps, err := fc.ResolveLinks(ctx, "deps")
	if err != nil {
		return nil, err
	}
	s := "art:" + n.ID
	for _, d := range deps {
		s += "[" + d.Artifact.(string) + "]"
	}
	return s, nil
}

type consumer struct{ k *kit }

func (c *consumer) Execute(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
	links, err := fc.ResolveLinks(ctx, "deps")
	if err != nil {
		return runtime.Result{}, err
	}
	var arts []any
	for _, l := range links {
		arts = append(arts, l.Artifact)
	}
	c.k.mu.Lock()
	c.k.execs[n.ID]++
	c.k.mu.Unlock()
	return runtime.Result{Output: arts}, nil
}

// graph builds a graph from compact specs: nodes "id:type" and edges
// "src->dst" (flow, out->in), "src=>dst" (link, link->deps); an edge spec
// may end with " when" and " if <cel>".
type gb struct{ g runtime.Graph }

func newGraph(id string) *gb { return &gb{g: runtime.Graph{ID: id, PlanVersion: 1}} }

func (b *gb) node(id, typ string, data ...string) *gb {
	n := runtime.Node{ID: id, Type: typ}
	if len(data) > 0 {
		n.Data = json.RawMessage(data[0])
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return b
}

func (b *gb) flow(src, dst string, opts ...string) *gb {
	e := runtime.Edge{ID: fmt.Sprintf("e%d", len(b.g.Edges)+1), Source: src, SourceHandle: "out", Target: dst, TargetHandle: "in",
		Data: runtime.EdgeData{Channel: runtime.ChannelFlow}}
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

func (b *gb) link(src, dst string) *gb {
	b.g.Edges = append(b.g.Edges, runtime.Edge{ID: fmt.Sprintf("e%d", len(b.g.Edges)+1), Source: src, SourceHandle: "link",
		Target: dst, TargetHandle: "deps", Data: runtime.EdgeData{Channel: runtime.ChannelLink}})
	return b
}

func (b *gb) build() *runtime.Graph { g := b.g; return &g }

// collect is an event sink that records everything.
type collect struct {
	mu  sync.Mutex
	evs []runtime.Event
}

func (c *collect) Emit(e runtime.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
}

func (c *collect) events() []runtime.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]runtime.Event(nil), c.evs...)
}

func (c *collect) types(node string) []runtime.EventType {
	var out []runtime.EventType
	for _, e := range c.events() {
		if e.NodeID == node {
			out = append(out, e.Type)
		}
	}
	return out
}

// checkLifecycle asserts the kernel's event contract over one run's log.
func checkLifecycle(t testing.TB, evs []runtime.Event) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, runtime.EventRunStarted, evs[0].Type, "first event")
	require.True(t, evs[len(evs)-1].Type.Terminal(), "last event is terminal: %s", evs[len(evs)-1].Type)
	started := map[string]bool{}
	ended := map[string]bool{}
	skipped := map[string]bool{}
	for i, e := range evs {
		require.Equal(t, int64(i+1), e.Seq, "seq has no gaps")
		if i > 0 {
			require.False(t, e.Time.Before(evs[i-1].Time), "the time of seq %d goes back", e.Seq)
		}
		if i > 0 && i < len(evs)-1 {
			require.NotEqual(t, runtime.EventRunStarted, e.Type)
			require.False(t, e.Type.Terminal(), "terminal run event in the middle at seq %d", e.Seq)
		}
		switch e.Type {
		case runtime.EventNodeStarted:
			require.False(t, started[e.NodeID], "node %s started twice", e.NodeID)
			require.False(t, skipped[e.NodeID])
			started[e.NodeID] = true
		case runtime.EventNodeCompleted, runtime.EventNodeFailed, runtime.EventNodeCancelled, runtime.EventNodeInterrupted:
			require.True(t, started[e.NodeID], "node %s ended before it started", e.NodeID)
			require.False(t, ended[e.NodeID], "node %s ended twice", e.NodeID)
			ended[e.NodeID] = true
		case runtime.EventNodeSkipped:
			require.False(t, started[e.NodeID] || skipped[e.NodeID], "node %s skipped after start or twice", e.NodeID)
			skipped[e.NodeID] = true
		case runtime.EventEdgeTaken:
			d := e.Data.(*runtime.EdgeTakenData)
			require.True(t, ended[d.Source], "edge %s taken before its source ended", d.EdgeID)
			require.False(t, started[d.Target], "edge %s taken after its target started", d.EdgeID)
		default:
			if e.NodeID != "" {
				require.True(t, started[e.NodeID] && !ended[e.NodeID], "%s for %s outside its started/terminal", e.Type, e.NodeID)
			}
		}
	}
	for id := range started {
		require.True(t, ended[id], "node %s has no terminal event", id)
	}
}

func newMem() *memory.Store { return memory.New() }
