package chatscope_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runtime"
)

// types are chatgraph's node types, whose ports the test graphs use.
var types = func() *runtime.Registry {
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		panic(err)
	}
	return reg
}()

// port is the name of node type typ's first port of direction d on
// channel ch.
func port(typ string, d runtime.Direction, ch runtime.Channel) string {
	if nt, ok := types.Lookup(typ); ok {
		for _, p := range nt.Ports {
			if p.Direction == d && p.Channel == ch {
				return p.Name
			}
		}
	}
	return "none"
}

// graph builds a graph from specs: nodes "id:type" or "id:type:{json}",
// flow edges "a->b", link edges "a=>b" (edges after their nodes).
func graph(specs ...string) *runtime.Graph {
	g := &runtime.Graph{ID: "g", PlanVersion: 1}
	typeOf := map[string]string{}
	for _, s := range specs {
		switch {
		case strings.Contains(s, "->"), strings.Contains(s, "=>"):
			ch, sep := runtime.ChannelFlow, "->"
			if strings.Contains(s, "=>") {
				ch, sep = runtime.ChannelLink, "=>"
			}
			a, b, _ := strings.Cut(s, sep)
			g.Edges = append(g.Edges, runtime.Edge{ID: fmt.Sprintf("e%d", len(g.Edges)), Source: a, Target: b,
				SourceHandle: port(typeOf[a], runtime.Out, ch), TargetHandle: port(typeOf[b], runtime.In, ch), Data: runtime.EdgeData{Channel: ch}})
		default:
			parts := strings.SplitN(s, ":", 3)
			n := runtime.Node{ID: parts[0], Type: parts[1]}
			if len(parts) == 3 {
				n.Data = []byte(parts[2])
			}
			typeOf[n.ID] = n.Type
			g.Nodes = append(g.Nodes, n)
		}
	}
	return g
}

const (
	cs      = ":chat_start"
	csOff   = `:chat_start:{"includeUserTools":false}`
	csOn    = `:chat_start:{"includeUserTools":true}`
	agent   = ":agent"
	tpl     = `:template:{"template":"{{.input}}"}`
	router  = ":router"
	delay   = ":delay"
	chatOut = ":chat_output"
)

func TestScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		g         *runtime.Graph
		entries   []string
		entry     []string // entry agents
		userTools []string // agents with user tools
		modes     map[string]string
	}{
		{
			name:      "pipeline: only the first agent is an entry",
			g:         graph("s"+cs, "a"+agent, "b"+agent, "o"+chatOut, "s->a", "a->b", "b->o"),
			entry:     []string{"a"},
			userTools: []string{"a"},
			modes:     map[string]string{"a": chatscope.ModeChatHistory, "b": chatscope.ModeFlowPayload, "o": ""},
		},
		{
			name:  "includeUserTools=false through a template",
			g:     graph("s"+csOff, "t"+tpl, "a"+agent, "s->t", "t->a"),
			entry: []string{"a"},
		},
		{
			name:      "includeUserTools=true through template, router and delay",
			g:         graph("s"+csOn, "t"+tpl, "r"+router, "d"+delay, "a"+agent, "b"+agent, "s->t", "t->r", "r->d", "d->a", "a->b"),
			entry:     []string{"a"},
			userTools: []string{"a"},
		},
		{
			name:      "diamond with an agent on one side",
			g:         graph("s"+cs, "a"+agent, "r"+router, "b"+agent, "s->a", "s->r", "r->b", "a->b"),
			entry:     []string{"a"},
			userTools: []string{"a"},
			modes:     map[string]string{"b": chatscope.ModeFlowPayload},
		},
		{
			name:      "diamond of plain nodes into one agent",
			g:         graph("s"+cs, "r1"+router, "r2"+tpl, "a"+agent, "s->r1", "s->r2", "r1->a", "r2->a"),
			entry:     []string{"a"},
			userTools: []string{"a"},
		},
		{
			name:      "agents behind a router, one per branch",
			g:         graph("s"+cs, "r"+router, "a"+agent, "b"+agent, "c"+agent, "s->r", "r->a", "r->b", "a->c", "b->c"),
			entry:     []string{"a", "b"},
			userTools: []string{"a", "b"},
		},
		{
			name:      "two chat_starts: each governs its own agents; a shared agent needs both to allow",
			g:         graph("s1"+csOff, "s2"+csOn, "a"+agent, "b"+agent, "c"+agent, "s1->a", "s2->b", "s1->c", "s2->c"),
			entry:     []string{"a", "b", "c"},
			userTools: []string{"b"},
		},
		{
			name:      "two chat_starts, a run from one of them",
			g:         graph("s1"+csOff, "s2"+csOn, "a"+agent, "b"+agent, "s1->a", "s2->b"),
			entries:   []string{"s2"},
			entry:     []string{"b"},
			userTools: []string{"b"},
			modes:     map[string]string{"a": ""},
		},
		{
			name:      "disconnected and link-only agents are not entries",
			g:         graph("s"+cs, "a"+agent, "lonely"+agent, "member"+agent, "s->a", "member=>a"),
			entry:     []string{"a"},
			userTools: []string{"a"},
			modes:     map[string]string{"lonely": "", "member": ""},
		},
		{
			name:    "an agent downstream of an agent through other nodes is not an entry",
			g:       graph("s"+csOff, "a"+agent, "t"+tpl, "d"+delay, "b"+agent, "s->a", "a->t", "t->d", "d->b"),
			entry:   []string{"a"},
			entries: []string{"s"},
		},
		{
			name:      "stream_agent_chat: the entry agent, user tools from the chat_start in front of it",
			g:         graph("s"+cs, "t"+tpl, "a"+agent, "b"+agent, "s->t", "t->a", "a->b"),
			entries:   []string{"a"},
			entry:     []string{"a"},
			userTools: []string{"a"},
		},
		{
			name:    "stream_agent_chat at a downstream agent: entry, but no user tools",
			g:       graph("s"+cs, "a"+agent, "b"+agent, "s->a", "a->b"),
			entries: []string{"b"},
			entry:   []string{"b"},
			modes:   map[string]string{"a": "", "b": chatscope.ModeChatHistory},
		},
		{
			name:    "stream_agent_chat behind includeUserTools=false",
			g:       graph("s"+csOff, "a"+agent, "s->a"),
			entries: []string{"a"},
			entry:   []string{"a"},
		},
		{
			name:    "stream_agent_chat at an agent no chat_start reaches",
			g:       graph("s"+cs, "x"+agent, "a"+agent, "s->x"),
			entries: []string{"a"},
			entry:   []string{"a"},
		},
		{
			name:      "a cycle in an unreached scratch part is harmless",
			g:         graph("s"+cs, "a"+agent, "x"+agent, "y"+router, "s->a", "x->y", "y->x"),
			entry:     []string{"a"},
			userTools: []string{"a"},
		},
		{
			name:  "link edges are not flow",
			g:     graph("s"+cs, "a"+agent, "b"+agent, "s->a", "b=>a"),
			entry: []string{"a"}, userTools: []string{"a"},
		},
		{
			name:    "unknown entry ids are ignored",
			g:       graph("s"+cs, "a"+agent, "s->a"),
			entries: []string{"nope"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := chatscope.New(compile(t, tc.g), tc.entries)
			require.Equal(t, sorted(tc.entry), s.EntryAgents())
			var withTools []string
			for _, n := range tc.g.Nodes {
				require.Equal(t, contains(tc.entry, n.ID), s.IsEntryAgent(n.ID), "IsEntryAgent(%s)", n.ID)
				if s.IncludeUserTools(n.ID) {
					withTools = append(withTools, n.ID)
					require.True(t, s.IsEntryAgent(n.ID), "only entry agents get user tools")
				}
			}
			require.Equal(t, sorted(tc.userTools), sorted(withTools))
			for id, mode := range tc.modes {
				require.Equal(t, mode, s.InputMode(id), "InputMode(%s)", id)
			}
		})
	}
}

// A plan's scope is computed once per set of entries: runs of the same
// plan and entries share it, and other entries have their own.
func TestScopeKeptWithThePlan(t *testing.T) {
	t.Parallel()
	p := compile(t, graph("s"+cs, "a"+agent, "b"+agent, "s->a", "a->b"))
	all := chatscope.New(p, nil)
	require.Same(t, all, chatscope.New(p, nil))
	require.Same(t, all, chatscope.New(p, []string{}), "no entries are the graph's entry nodes")
	atB := chatscope.New(p, []string{"b"})
	require.NotSame(t, all, atB)
	require.Same(t, atB, chatscope.New(p, []string{"b"}))
	require.Equal(t, []string{"a"}, all.EntryAgents())
	require.Equal(t, []string{"b"}, atB.EntryAgents())
	// Entries joined the same way are still different sets.
	require.NotSame(t, chatscope.New(p, []string{"a", "b"}), chatscope.New(p, []string{"a\x00b"}))
}

func TestScopeNilGraph(t *testing.T) {
	t.Parallel()
	s := chatscope.New(nil, nil)
	require.False(t, s.IsEntryAgent("a"))
	require.Empty(t, s.EntryAgents())
	var none *chatscope.Scope
	require.False(t, none.IsEntryAgent("a"))
	require.False(t, none.IncludeUserTools("a"))
	require.Empty(t, none.EntryAgents())
	require.Empty(t, none.Agents())
	require.Equal(t, "", none.InputMode("a"))
}

// compile compiles g with chatgraph's node types, as a chat run's plan.
func compile(t *testing.T, g *runtime.Graph) *runtime.Plan {
	t.Helper()
	eng, err := runtime.NewEngine(runtime.Config{Registry: types})
	require.NoError(t, err)
	p, err := eng.Compile(g)
	require.NoError(t, err)
	return p
}

func sorted(xs []string) []string {
	out := append([]string{}, xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
