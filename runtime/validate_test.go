package runtime_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

func TestValidateDiagnostics(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	flow := runtime.EdgeData{Channel: runtime.ChannelFlow}
	edge := func(id, s, sh, d, dh string, data runtime.EdgeData) runtime.Edge {
		return runtime.Edge{ID: id, Source: s, SourceHandle: sh, Target: d, TargetHandle: dh, Data: data}
	}
	base := func() *runtime.Graph {
		return newGraph("g").node("s", "start").node("a", "step").flow("s", "a").build()
	}
	cases := []struct {
		name   string
		mutate func(g *runtime.Graph)
		code   string
		path   string
		id     string
		sev    runtime.Severity
	}{
		{"missing channel", func(g *runtime.Graph) { g.Edges[0].Data.Channel = "" }, runtime.CodeChannelMissing, "edges[0].data.channel", "e1", runtime.SeverityError},
		{"other channel", func(g *runtime.Graph) { g.Edges[0].Data.Channel = "Flow" }, runtime.CodeChannelInvalid, "edges[0].data.channel", "e1", runtime.SeverityError},
		{"link on flow ports", func(g *runtime.Graph) { g.Edges[0].Data.Channel = runtime.ChannelLink }, runtime.CodeChannelMismatch, "edges[0].sourceHandle", "e1", runtime.SeverityError},
		{"duplicate node", func(g *runtime.Graph) { g.Nodes[1].ID = "s" }, runtime.CodeDuplicateID, "nodes[1].id", "s", runtime.SeverityError},
		{"duplicate edge", func(g *runtime.Graph) { g.Edges = append(g.Edges, g.Edges[0]) }, runtime.CodeDuplicateID, "edges[1].id", "e1", runtime.SeverityError},
		{"empty node id", func(g *runtime.Graph) { g.Nodes = append(g.Nodes, runtime.Node{Type: "step"}) }, runtime.CodeInvalidID, "nodes[2].id", "", runtime.SeverityError},
		{"long id", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: strings.Repeat("x", 200), Type: "step"})
		}, runtime.CodeInvalidID, "nodes[2].id", strings.Repeat("x", 128), runtime.SeverityError},
		{"unknown type", func(g *runtime.Graph) { g.Nodes[1].Type = "nope" }, runtime.CodeUnknownType, "nodes[1].type", "a", runtime.SeverityError},
		{"dangling target", func(g *runtime.Graph) { g.Edges[0].Target = "ghost" }, runtime.CodeDanglingEdge, "edges[0].target", "e1", runtime.SeverityError},
		{"dangling source", func(g *runtime.Graph) { g.Edges[0].Source = "" }, runtime.CodeDanglingEdge, "edges[0].source", "e1", runtime.SeverityError},
		{"unknown handle", func(g *runtime.Graph) { g.Edges[0].TargetHandle = "nope" }, runtime.CodeUnknownHandle, "edges[0].targetHandle", "e1", runtime.SeverityError},
		{"handle direction", func(g *runtime.Graph) {
			g.Edges[0].SourceHandle = "in"
			g.Edges[0].Source = "a"
			g.Edges[0].Target = "s"
		}, runtime.CodeHandleDirection, "edges[0].sourceHandle", "e1", runtime.SeverityError},
		{"bad when", func(g *runtime.Graph) { g.Edges[0].Data.When = "sometimes" }, runtime.CodeInvalidWhen, "edges[0].data.when", "e1", runtime.SeverityError},
		{"bad condition", func(g *runtime.Graph) { g.Edges[0].Data.Condition = "output ==" }, runtime.CodeInvalidCondition, "edges[0].data.condition", "e1", runtime.SeverityError},
		{"non-bool condition", func(g *runtime.Graph) { g.Edges[0].Data.Condition = "1 + 2" }, runtime.CodeInvalidCondition, "edges[0].data.condition", "e1", runtime.SeverityError},
		{"costly condition", func(g *runtime.Graph) {
			g.Edges[0].Data.Condition = "output.a.all(x, output.b.all(y, output.c.all(z, x + y + z > 0)))"
		}, runtime.CodeConditionCost, "edges[0].data.condition", "e1", runtime.SeverityError},
		{"long condition", func(g *runtime.Graph) {
			g.Edges[0].Data.Condition = "true || " + strings.Repeat("true || ", 300) + "true"
		}, runtime.CodeLimit, "edges[0].data.condition", "e1", runtime.SeverityError},
		{"single port twice", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: "q", Type: "strict"})
			g.Edges = append(g.Edges, edge("x1", "s", "out", "q", "in", flow), edge("x2", "a", "out", "q", "in", flow))
		}, runtime.CodePortMany, "edges[2].targetHandle", "x2", runtime.SeverityError},
		{"required port", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: "q", Type: "strict"})
			g.Edges = append(g.Edges, edge("x1", "q", "out", "a", "in", flow))
		}, runtime.CodePortRequired, "nodes[2]", "q", runtime.SeverityWarning}, // q is not reachable from the entry
		{"bad retry option", func(g *runtime.Graph) { g.Nodes[1].Data = []byte(`{"retry":{"maxAttempts":-1,"backoff":"weird"}}`) }, runtime.CodeInvalidOption, "nodes[1].data.retry.maxAttempts", "a", runtime.SeverityError},
		{"option of wrong type", func(g *runtime.Graph) { g.Nodes[1].Data = []byte(`{"timeoutMs":"soon"}`) }, runtime.CodeInvalidOption, "nodes[1].data.timeoutMs", "a", runtime.SeverityError},
		{"factory field error", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: "q", Type: "strict", Data: []byte(`{"level":-1}`)})
			g.Edges = append(g.Edges, edge("x1", "s", "out", "q", "in", flow))
		}, runtime.CodeInvalidData, "nodes[2].data.level", "q", runtime.SeverityError},
		{"flow cycle reachable", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: "b", Type: "step"})
			g.Edges = append(g.Edges, edge("x1", "a", "out", "b", "in", flow), edge("x2", "b", "out", "a", "in", flow))
		}, runtime.CodeFlowCycle, "", "", runtime.SeverityError},
		{"flow cycle unreachable", func(g *runtime.Graph) {
			g.Nodes = append(g.Nodes, runtime.Node{ID: "c1", Type: "step"}, runtime.Node{ID: "c2", Type: "step"})
			g.Edges = append(g.Edges, edge("x1", "c1", "out", "c2", "in", flow), edge("x2", "c2", "out", "c1", "in", flow))
		}, runtime.CodeFlowCycle, "", "", runtime.SeverityWarning},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := base()
			g.ID = tc.name // the plan cache is keyed by (id, planVersion)
			tc.mutate(g)
			ds := e.Validate(g)
			var found *runtime.Diagnostic
			for i := range ds {
				if ds[i].Code == tc.code {
					found = &ds[i]
					break
				}
			}
			require.NotNil(t, found, "want %s in %+v", tc.code, ds)
			require.Equal(t, tc.sev, found.Severity)
			if tc.path != "" {
				require.Equal(t, tc.path, found.Path)
			}
			if tc.id != "" {
				require.Equal(t, tc.id, found.ID)
			}
			require.NotEmpty(t, found.Message)
			_, err := e.Compile(g)
			if tc.sev == runtime.SeverityError {
				var ge *runtime.GraphError
				require.ErrorAs(t, err, &ge)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestValidateReportsEverythingAtOnce(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("a", "nope").node("a", "step").flow("s", "zz").flow("s", "a").build()
	g.Edges[1].Data.Channel = ""
	ds := e.Validate(g)
	codes := map[string]bool{}
	for _, d := range ds {
		codes[d.Code] = true
	}
	require.True(t, codes[runtime.CodeUnknownType] && codes[runtime.CodeDuplicateID] && codes[runtime.CodeDanglingEdge] && codes[runtime.CodeChannelMissing], "%+v", ds)
}

func TestStrictChannelNeverPatched(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	for _, ch := range []string{"", "FLOW", "flow ", "links", "data", "null"} {
		g := newGraph("g-"+ch).node("s", "start").node("a", "step").flow("s", "a").build()
		g.Edges[0].Data.Channel = runtime.Channel(ch)
		_, err := e.Compile(g)
		var ge *runtime.GraphError
		require.ErrorAs(t, err, &ge, "channel %q must be rejected", ch)
		require.Equal(t, "edges[0].data.channel", ge.Diagnostics[0].Path)
		require.Equal(t, "e1", ge.Diagnostics[0].ID)
	}
	// And the JSON decoder keeps a missing channel missing.
	g, ds := runtime.DecodeGraph([]byte(`{"id":"g","nodes":[{"id":"s","type":"start"},{"id":"a","type":"step"}],
		"edges":[{"id":"e1","source":"s","sourceHandle":"out","target":"a","targetHandle":"in","data":{}}]}`))
	require.Empty(t, ds)
	vd := e.Validate(g)
	require.Equal(t, runtime.CodeChannelMissing, vd[0].Code)
}

func TestLinkCycleNamesPath(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("c", "consumer").node("p1", "producer").node("p2", "producer").node("p3", "producer").
		flow("s", "c").link("p1", "c").link("p2", "p1").link("p3", "p2").link("p1", "p3").build()
	// producer's link port feeds the "deps" port of producers and consumers.
	ds := e.Validate(g)
	var cyc *runtime.Diagnostic
	for i := range ds {
		if ds[i].Code == runtime.CodeLinkCycle {
			cyc = &ds[i]
		}
	}
	require.NotNil(t, cyc, "%+v", ds)
	require.Equal(t, runtime.SeverityError, cyc.Severity)
	require.Len(t, cyc.NodeIDs, 4)
	require.Equal(t, cyc.NodeIDs[0], cyc.NodeIDs[3])
	require.ElementsMatch(t, []string{"p1", "p2", "p3"}, cyc.NodeIDs[:3])
	require.Contains(t, cyc.Message, " -> ")
}

func TestFlowCyclePath(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	g := newGraph("g").node("s", "start").node("a", "step").node("b", "step").node("c", "step").node("d", "step").
		flow("s", "a").flow("a", "b").flow("b", "c").flow("c", "a").flow("c", "d").build()
	ds := e.Validate(g)
	require.Len(t, ds.Errors(), 1, "%+v", ds)
	d := ds[0]
	require.Equal(t, runtime.CodeFlowCycle, d.Code)
	// The path follows edge direction and closes on its first node.
	require.Len(t, d.NodeIDs, 4)
	idx := map[string]int{"a": 0, "b": 1, "c": 2}
	for i := 0; i < 3; i++ {
		require.Equal(t, (idx[d.NodeIDs[i]]+1)%3, idx[d.NodeIDs[i+1]], "path %v", d.NodeIDs)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil, func(c *runtime.Config) { c.Limits = runtime.Limits{MaxNodes: 3, MaxEdges: 2} })
	b := newGraph("g").node("s", "start")
	for i := 0; i < 4; i++ {
		b.node(string(rune('a'+i)), "step")
	}
	ds := e.Validate(b.build())
	require.Equal(t, runtime.CodeLimit, ds[0].Code)
	require.Equal(t, "nodes", ds[0].Path)
}

func TestDecodeGraphErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `[]`, `{"nodes":{}}`, `{"nodes":[{"id":5}]}`, `{} {}`, `{"edges":[{"data":{"channel":1}}]}`} {
		g, ds := runtime.DecodeGraph([]byte(in))
		require.Nil(t, g, in)
		require.Len(t, ds, 1, in)
		require.Equal(t, runtime.CodeInvalidJSON, ds[0].Code)
	}
}

func TestRegistryRejectsBadTypes(t *testing.T) {
	t.Parallel()
	r := runtime.NewRegistry()
	ok := func(*runtime.Node) (runtime.Executor, error) { return nil, nil }
	require.Error(t, r.Register(runtime.NodeType{Name: "", New: ok}))
	require.Error(t, r.Register(runtime.NodeType{Name: "x"}))
	require.Error(t, r.Register(runtime.NodeType{Name: "x", New: ok, Ports: []runtime.Port{{Name: "p", Direction: runtime.In, Channel: "wire"}}}))
	require.Error(t, r.Register(runtime.NodeType{Name: "x", New: ok, Ports: []runtime.Port{{Name: "p", Direction: runtime.In, Channel: runtime.ChannelFlow}, {Name: "p", Direction: runtime.In, Channel: runtime.ChannelFlow}}}))
	require.NoError(t, r.Register(runtime.NodeType{Name: "x", New: ok}))
	require.Error(t, r.Register(runtime.NodeType{Name: "x", New: ok}))
}
