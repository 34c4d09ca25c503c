package chatscope

import (
	"encoding/json"
	"sort"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// The node types and data field the policy reads are declared once, by
// package nodes.
const (
	AgentType             = nodes.TypeAgent
	ChatStartType         = nodes.TypeChatStart
	IncludeUserToolsField = nodes.FieldIncludeUserTools
)

// Input modes, as agents report them in node_started.
const (
	ModeChatHistory = nodes.InputChatHistory
	ModeFlowPayload = nodes.InputFlowPayload
)

// Scope is the policy of one run. It is immutable and safe for
// concurrent use; a nil *Scope answers false (no entry agents).
type Scope struct {
	active      map[string]bool
	agents      []string // active agents, sorted
	entryAgents map[string]bool
	userTools   map[string]bool
	// toolLists holds, per entry agent, the userTools allow-lists of the
	// chat_starts reaching it (see UserToolAllowed).
	toolLists map[string][][]string
}

// New computes the scope of a run of plan p started at entryIDs (none:
// the graph's entry nodes, every chat_start). The run's active subgraph
// is the kernel's (Plan.ActiveNodes); this package only reads, within it,
// which agents have an agent upstream and which chat_starts reach them.
// A plan's scopes are computed once per set of entries and kept with
// the plan (runtime.Plan.Memo).
func New(p *runtime.Plan, entryIDs []string) *Scope {
	if p == nil {
		return newScope(nil, nil)
	}
	return p.Memo(scopeKey(runtime.EntriesKey(entryIDs)), func() any { return newScope(p, entryIDs) }).(*Scope)
}

// scopeKey keys a plan's scope by its entries (Plan.Memo).
type scopeKey string

// newScope computes the scope of a run of p (nil: an empty scope)
// started at entryIDs.
func newScope(p *runtime.Plan, entryIDs []string) *Scope {
	s := &Scope{active: map[string]bool{}, entryAgents: map[string]bool{}, userTools: map[string]bool{}}
	if p == nil {
		return s
	}
	g := p.Graph()
	t := newTopo(g)
	for _, id := range p.ActiveNodes(entryIDs) {
		s.active[id] = true
	}
	for id := range s.active {
		if t.nodes[id].Type == AgentType {
			s.agents = append(s.agents, id)
		}
	}
	sort.Strings(s.agents)
	// Nodes strictly downstream of an active agent.
	below := map[string]bool{}
	for _, a := range s.agents {
		for _, next := range t.succ[a] {
			if s.active[next] {
				t.walk([]string{next}, s.active, func(id string) bool {
					if below[id] {
						return false
					}
					below[id] = true
					return true
				})
			}
		}
	}
	for _, a := range s.agents {
		if !below[a] {
			s.entryAgents[a] = true
		}
	}
	// Which chat_starts reach each entry agent without passing through
	// another agent: the active ones, or — in a run that starts at an
	// agent — those of the whole graph.
	var starts []string
	for id := range s.active {
		if t.nodes[id].Type == ChatStartType {
			starts = append(starts, id)
		}
	}
	within := s.active
	if len(starts) == 0 {
		within = nil
		for _, n := range g.Nodes {
			if n.Type == ChatStartType {
				starts = append(starts, n.ID)
			}
		}
	}
	sort.Strings(starts)
	reached := map[string]int{} // entry agent -> chat_starts reaching it
	denied := map[string]bool{} // entry agent -> reached by one that excludes user tools
	for _, st := range starts {
		allow := includeUserTools(t.nodes[st])
		seen := map[string]bool{}
		t.walk([]string{st}, within, func(id string) bool {
			if seen[id] {
				return false
			}
			seen[id] = true
			if t.nodes[id].Type != AgentType {
				return true
			}
			if s.entryAgents[id] {
				s.addToolList(id, t.nodes[st])
				reached[id]++
				if !allow {
					denied[id] = true
				}
			}
			return false // never through an agent
		})
	}
	for a := range s.entryAgents {
		s.userTools[a] = reached[a] > 0 && !denied[a]
	}
	return s
}

// IsEntryAgent reports whether id is an agent of the active subgraph with
// no active agent upstream: it gets the chat history.
func (s *Scope) IsEntryAgent(id string) bool { return s != nil && s.entryAgents[id] }

// IncludeUserTools reports whether agent id gets the user's tools: it is
// an entry agent, at least one chat_start reaches it through non-agent
// nodes, and every such chat_start has includeUserTools true (the
// default). Non-entry agents never get user tools.
func (s *Scope) IncludeUserTools(id string) bool { return s != nil && s.userTools[id] }

// InputMode returns ModeChatHistory for entry agents, ModeFlowPayload for
// other active agents and "" for nodes that are not active agents.
func (s *Scope) InputMode(id string) string {
	switch {
	case s == nil:
		return ""
	case s.entryAgents[id]:
		return ModeChatHistory
	case s.active[id] && contains(s.agents, id):
		return ModeFlowPayload
	}
	return ""
}

// Active reports whether the run's entries reach id by flow edges.
func (s *Scope) Active(id string) bool { return s != nil && s.active[id] }

// EntryAgents returns the entry agents, sorted.
func (s *Scope) EntryAgents() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.entryAgents))
	for id := range s.entryAgents {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Agents returns the active agents, sorted.
func (s *Scope) Agents() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.agents...)
}

func contains(xs []string, x string) bool {
	i := sort.SearchStrings(xs, x)
	return i < len(xs) && xs[i] == x
}

// includeUserTools reads a chat_start's setting (default true).
func includeUserTools(n *runtime.Node) bool {
	var d map[string]json.RawMessage
	if len(n.Data) == 0 || json.Unmarshal(n.Data, &d) != nil {
		return true
	}
	raw, ok := d[IncludeUserToolsField]
	if !ok {
		return true
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		return true
	}
	return b
}

// topo is the flow adjacency of a graph.
type topo struct {
	nodes map[string]*runtime.Node
	succ  map[string][]string
}

func newTopo(g *runtime.Graph) *topo {
	t := &topo{nodes: make(map[string]*runtime.Node, len(g.Nodes)), succ: map[string][]string{}}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if _, dup := t.nodes[n.ID]; !dup {
			t.nodes[n.ID] = n
		}
	}
	for _, e := range g.Edges {
		if e.Data.Channel != runtime.ChannelFlow {
			continue
		}
		if _, ok := t.nodes[e.Source]; !ok {
			continue
		}
		if _, ok := t.nodes[e.Target]; !ok {
			continue
		}
		t.succ[e.Source] = append(t.succ[e.Source], e.Target)
	}
	return t
}

// walk visits nodes depth-first from roots along flow edges, staying
// inside within when it is not nil. visit returns whether to expand the
// node; a node whose visit returned true is not visited again.
func (t *topo) walk(roots []string, within map[string]bool, visit func(id string) bool) {
	expanded := map[string]bool{}
	stack := append([]string(nil), roots...)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if expanded[id] || (within != nil && !within[id]) {
			continue
		}
		if !visit(id) {
			continue
		}
		expanded[id] = true
		stack = append(stack, t.succ[id]...)
	}
}
