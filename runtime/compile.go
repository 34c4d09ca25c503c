package runtime

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
)

// Limits bound what a graph may contain. Zero fields take the defaults.
type Limits struct {
	MaxNodes           int    // default 500
	MaxEdges           int    // default 2000
	MaxIDLength        int    // default 128
	MaxConditionLength int    // bytes, default 2048
	MaxConditionCost   uint64 // CEL cost units, estimated and at run time; default 100000
}

func (l Limits) withDefaults() Limits {
	if l.MaxNodes <= 0 {
		l.MaxNodes = 500
	}
	if l.MaxEdges <= 0 {
		l.MaxEdges = 2000
	}
	if l.MaxIDLength <= 0 {
		l.MaxIDLength = 128
	}
	if l.MaxConditionLength <= 0 {
		l.MaxConditionLength = 2048
	}
	if l.MaxConditionCost == 0 {
		l.MaxConditionCost = 100000
	}
	return l
}

// Plan is a compiled graph: immutable, safe for concurrent use by any
// number of runs, cached per (graph id, planVersion).
type Plan struct {
	GraphID     string
	PlanVersion int64
	graph       *Graph
	nodes       []pnode
	edges       []pedge
	index       map[string]int32
	byRank      []int32 // node indexes in priority order
	diags       Diagnostics
	actives     activeCache
	memo        planMemo
	// dispatches keeps the dispatcher state of ended runs for the next
	// ones (see dispatch).
	dispatches sync.Pool
	// workerSets keeps the worker queues of ended runs (see
	// workers.recycle).
	workerSets sync.Pool
}

type pnode struct {
	node     *Node
	typ      *NodeType
	exec     Executor
	mat      Materializer
	desc     Describer
	opts     NodeOptions
	flowIn   []int32 // edge indexes, in graph order
	flowOut  []int32
	linkIn   []int32
	rank     int32
	dataHash [sha256.Size]byte
	// problem is set when the node is in a part with warnings (a cycle,
	// invalid data): a run whose active part contains it cannot start.
	problem bool
}

type pedge struct {
	edge     *Edge
	src, dst int32
	when     When
	cond     cel.Program
	taken    *EdgeTakenData // shared, immutable payload of edge_taken
}

// Diagnostics returns the warnings the plan was compiled with.
func (p *Plan) Diagnostics() Diagnostics { return p.diags }

// Graph returns the graph the plan was compiled from. Callers must not modify it.
func (p *Plan) Graph() *Graph { return p.graph }

// maxMemos bounds the values a plan memoizes (Plan.Memo).
const maxMemos = 64

// planMemo holds the values derived from a plan (Plan.Memo).
type planMemo struct {
	m sync.Map // key -> value
	n atomic.Int32
}

// Memo returns the value derived from the plan under key, made by derive
// the first time: what a layer above the kernel derives from a plan
// alone, immutable as the plan is, is then derived once and lives as
// long as the plan. Keys of a package's own type cannot meet another's.
// A plan keeps at most maxMemos values; past that, derive's value is
// returned and not kept.
func (p *Plan) Memo(key any, derive func() any) any {
	if v, ok := p.memo.m.Load(key); ok {
		return v
	}
	v := derive()
	if p.memo.n.Add(1) > maxMemos {
		p.memo.n.Add(-1)
		return v
	}
	if prev, loaded := p.memo.m.LoadOrStore(key, v); loaded {
		p.memo.n.Add(-1)
		return prev
	}
	return v
}

// Node returns the node with id.
func (p *Plan) Node(id string) (*Node, bool) {
	i, ok := p.index[id]
	if !ok {
		return nil, false
	}
	return p.nodes[i].node, true
}

// NodeOptions returns the parsed generic options of node id.
func (p *Plan) NodeOptions(id string) (NodeOptions, bool) {
	i, ok := p.index[id]
	if !ok {
		return NodeOptions{}, false
	}
	return p.nodes[i].opts, true
}

// compiler holds the state of one Validate/Compile pass.
type compiler struct {
	g      *Graph
	reg    *Registry
	lim    Limits
	conds  *conditions
	diags  Diagnostics
	nodes  []pnode
	edges  []pedge
	index  map[string]int32
	types  []*NodeType
	okEdge []bool
	// deferred are problems whose severity depends on reachability.
	deferred []deferredDiag
}

type deferredDiag struct {
	d     Diagnostic
	nodes []int32
}

func (c *compiler) errorf(code, path, id, format string, args ...any) {
	c.diags = append(c.diags, Diagnostic{Severity: SeverityError, Code: code, Path: path, ID: id, Message: fmt.Sprintf(format, args...)})
}

func (c *compiler) deferf(nodes []int32, code, path, id, format string, args ...any) {
	c.deferred = append(c.deferred, deferredDiag{
		d:     Diagnostic{Code: code, Path: path, ID: id, Message: fmt.Sprintf(format, args...)},
		nodes: nodes,
	})
}

// compile validates g and, when it has no errors, builds the plan. It runs
// in time linear in nodes + edges (plus sorting for priorities) and never
// panics.
func compile(g *Graph, reg *Registry, lim Limits, conds *conditions) (*Plan, Diagnostics) {
	if g == nil {
		return nil, Diagnostics{{Severity: SeverityError, Code: CodeInvalidJSON, Message: "graph is missing"}}
	}
	c := &compiler{g: g, reg: reg, lim: lim, conds: conds}
	if len(g.Nodes) > lim.MaxNodes {
		c.errorf(CodeLimit, "nodes", "", "graph has %d nodes, the limit is %d", len(g.Nodes), lim.MaxNodes)
	}
	if len(g.Edges) > lim.MaxEdges {
		c.errorf(CodeLimit, "edges", "", "graph has %d edges, the limit is %d", len(g.Edges), lim.MaxEdges)
	}
	if len(c.diags) > 0 {
		return nil, c.diags
	}
	c.checkNodes()
	c.checkEdges()
	c.checkPorts()
	reach := c.reachable()
	rank := c.flowOrder()
	c.linkCycles()
	c.settleDeferred(reach)
	if c.diags.HasErrors() {
		return nil, sortDiagnostics(c.diags)
	}
	p := c.plan(rank)
	p.diags = sortDiagnostics(c.diags)
	return p, p.diags
}

func nodePath(i int) string { return "nodes[" + strconv.Itoa(i) + "]" }
func edgePath(i int) string { return "edges[" + strconv.Itoa(i) + "]" }

func (c *compiler) checkID(id string, i int, path func(int) string) bool {
	switch {
	case id == "":
		c.errorf(CodeInvalidID, path(i)+".id", "", "id is empty")
	case len(id) > c.lim.MaxIDLength:
		c.errorf(CodeInvalidID, path(i)+".id", id[:c.lim.MaxIDLength], "id is %d bytes long, the limit is %d", len(id), c.lim.MaxIDLength)
	default:
		return true
	}
	return false
}

func (c *compiler) checkNodes() {
	g := c.g
	c.nodes = make([]pnode, len(g.Nodes))
	c.types = make([]*NodeType, len(g.Nodes))
	c.index = make(map[string]int32, len(g.Nodes))
	for i := range g.Nodes {
		n := &g.Nodes[i]
		c.nodes[i].node = n
		if c.checkID(n.ID, i, nodePath) {
			if j, dup := c.index[n.ID]; dup {
				c.errorf(CodeDuplicateID, nodePath(i)+".id", n.ID, "node id %q is also used by nodes[%d]", n.ID, j)
			} else {
				c.index[n.ID] = int32(i)
			}
		}
		t, ok := c.reg.Lookup(n.Type)
		if !ok {
			c.errorf(CodeUnknownType, nodePath(i)+".type", n.ID, "unknown node type %q", truncate(n.Type, 64))
			continue
		}
		c.types[i] = t
		c.nodes[i].typ = t
		def := t.DefaultEffect
		if def == "" {
			def = EffectPure
		}
		opts, ferrs := parseNodeOptions(n.Data, def)
		c.nodes[i].opts = opts
		for _, fe := range ferrs {
			c.deferf([]int32{int32(i)}, CodeInvalidOption, dataPath(nodePath(i), fe.Field), n.ID, "%s", fe.Message)
		}
		if len(ferrs) > 0 {
			continue
		}
		exec, err := c.buildExecutor(t, n)
		if err != nil {
			field := ""
			var fe *FieldError
			if errors.As(err, &fe) {
				field = fe.Field
				err = fmt.Errorf("%s", fe.Message)
			}
			c.deferf([]int32{int32(i)}, CodeInvalidData, dataPath(nodePath(i), field), n.ID, "%v", err)
			continue
		}
		c.nodes[i].exec = exec
	}
}

// buildExecutor calls the type's factory, turning a panic into an error.
func (c *compiler) buildExecutor(t *NodeType, n *Node) (exec Executor, err error) {
	defer func() {
		if r := recover(); r != nil {
			exec, err = nil, fmt.Errorf("node type %q factory panicked: %v", t.Name, r)
		}
	}()
	exec, err = t.New(n)
	if err == nil && exec == nil {
		err = fmt.Errorf("node type %q factory returned no executor", t.Name)
	}
	return exec, err
}

func dataPath(nodePath, field string) string {
	if field == "" {
		return nodePath + ".data"
	}
	return nodePath + ".data." + field
}

func (c *compiler) checkEdges() {
	g := c.g
	c.edges = make([]pedge, len(g.Edges))
	c.okEdge = make([]bool, len(g.Edges))
	taken := make([]EdgeTakenData, len(g.Edges))
	ids := make(map[string]int, len(g.Edges))
	for i := range g.Edges {
		e := &g.Edges[i]
		pe := &c.edges[i]
		pe.edge, pe.src, pe.dst = e, -1, -1
		ok := true
		if c.checkID(e.ID, i, edgePath) {
			if j, dup := ids[e.ID]; dup {
				c.errorf(CodeDuplicateID, edgePath(i)+".id", e.ID, "edge id %q is also used by edges[%d]", e.ID, j)
				ok = false
			} else {
				ids[e.ID] = i
			}
		} else {
			ok = false
		}
		switch e.Data.Channel {
		case ChannelFlow, ChannelLink:
		case "":
			c.errorf(CodeChannelMissing, edgePath(i)+".data.channel", e.ID, "data.channel is required: \"flow\" or \"link\"")
			ok = false
		default:
			c.errorf(CodeChannelInvalid, edgePath(i)+".data.channel", e.ID, "data.channel must be exactly \"flow\" or \"link\", not %q", truncate(string(e.Data.Channel), 40))
			ok = false
		}
		switch e.Data.When {
		case "", WhenOnSuccess, WhenOnFailure, WhenAlways:
			if e.Data.When != "" && e.Data.Channel == ChannelLink {
				c.errorf(CodeInvalidWhen, edgePath(i)+".data.when", e.ID, "when applies to flow edges only")
				ok = false
			}
		default:
			c.errorf(CodeInvalidWhen, edgePath(i)+".data.when", e.ID, "when must be on_success, on_failure or always, not %q", truncate(string(e.Data.When), 40))
			ok = false
		}
		pe.when = e.Data.When
		if pe.when == "" {
			pe.when = WhenOnSuccess
		}
		if e.Data.Condition != "" {
			switch {
			case e.Data.Channel == ChannelLink:
				c.errorf(CodeConditionOnLink, edgePath(i)+".data.condition", e.ID, "conditions apply to flow edges only")
				ok = false
			case len(e.Data.Condition) > c.lim.MaxConditionLength:
				c.errorf(CodeLimit, edgePath(i)+".data.condition", e.ID, "condition is %d bytes long, the limit is %d", len(e.Data.Condition), c.lim.MaxConditionLength)
				ok = false
			default:
				prg, code, err := c.conds.compile(e.Data.Condition)
				if err != nil {
					c.errorf(code, edgePath(i)+".data.condition", e.ID, "%v", err)
					ok = false
				}
				pe.cond = prg
			}
		}
		src, sok := c.endpoint(e.Source, i, ".source", e.ID)
		dst, dok := c.endpoint(e.Target, i, ".target", e.ID)
		pe.src, pe.dst = src, dst
		if sok {
			ok = c.checkHandle(src, e.SourceHandle, Out, e.Data.Channel, i, ".sourceHandle", e.ID) && ok
		}
		if dok {
			ok = c.checkHandle(dst, e.TargetHandle, In, e.Data.Channel, i, ".targetHandle", e.ID) && ok
		}
		c.okEdge[i] = ok && sok && dok
		if c.okEdge[i] {
			taken[i] = EdgeTakenData{EdgeID: e.ID, Source: e.Source, Target: e.Target}
			pe.taken = &taken[i]
		}
	}
	c.adjacency()
}

// adjacency fills each node's flowIn, flowOut and linkIn (in graph edge
// order) from one backing array sized by a counting pass.
func (c *compiler) adjacency() {
	n := len(c.nodes)
	counts := make([]int32, 3*n)
	total := 0
	for i := range c.edges {
		if !c.okEdge[i] {
			continue
		}
		pe := &c.edges[i]
		if pe.edge.Data.Channel == ChannelFlow {
			counts[3*pe.src+1]++
			counts[3*pe.dst]++
			total += 2
		} else {
			counts[3*pe.dst+2]++
			total++
		}
	}
	backing := make([]int32, total)
	for i := range c.nodes {
		pn := &c.nodes[i]
		pn.flowIn, backing = backing[:0:counts[3*i]], backing[counts[3*i]:]
		pn.flowOut, backing = backing[:0:counts[3*i+1]], backing[counts[3*i+1]:]
		pn.linkIn, backing = backing[:0:counts[3*i+2]], backing[counts[3*i+2]:]
	}
	for i := range c.edges {
		if !c.okEdge[i] {
			continue
		}
		pe := &c.edges[i]
		if pe.edge.Data.Channel == ChannelFlow {
			c.nodes[pe.src].flowOut = append(c.nodes[pe.src].flowOut, int32(i))
			c.nodes[pe.dst].flowIn = append(c.nodes[pe.dst].flowIn, int32(i))
		} else {
			c.nodes[pe.dst].linkIn = append(c.nodes[pe.dst].linkIn, int32(i))
		}
	}
}

// endpoint resolves an edge end to a node index with a known type.
func (c *compiler) endpoint(id string, edge int, field, edgeID string) (int32, bool) {
	if id == "" {
		c.errorf(CodeDanglingEdge, edgePath(edge)+field, edgeID, "edge end is empty")
		return -1, false
	}
	i, ok := c.index[id]
	if !ok {
		c.errorf(CodeDanglingEdge, edgePath(edge)+field, edgeID, "no node with id %q", truncate(id, c.lim.MaxIDLength))
		return -1, false
	}
	return i, c.types[i] != nil
}

func (c *compiler) checkHandle(n int32, handle string, dir Direction, ch Channel, edge int, field, edgeID string) bool {
	t := c.types[n]
	port, ok := t.Port(handle, dir)
	if !ok {
		path := edgePath(edge) + field
		if _, other := t.Port(handle, opposite(dir)); other {
			c.errorf(CodeHandleDirection, path, edgeID, "port %q of node %q (%s) is an %s-port", handle, c.g.Nodes[n].ID, t.Name, opposite(dir))
		} else {
			c.errorf(CodeUnknownHandle, path, edgeID, "node %q (%s) has no %s-port %q", c.g.Nodes[n].ID, t.Name, dir, truncate(handle, 64))
		}
		return false
	}
	if (ch == ChannelFlow || ch == ChannelLink) && port.Channel != ch {
		c.errorf(CodeChannelMismatch, edgePath(edge)+field, edgeID, "port %q of node %q is a %s port, the edge is %s", handle, c.g.Nodes[n].ID, port.Channel, ch)
		return false
	}
	return true
}

func opposite(d Direction) Direction {
	if d == In {
		return Out
	}
	return In
}

// checkPorts enforces single-edge ports and required in-ports, counting
// edges per declared port in one flat array.
func (c *compiler) checkPorts() {
	offset := make([]int32, len(c.nodes)+1)
	for i, t := range c.types {
		offset[i+1] = offset[i]
		if t != nil {
			offset[i+1] += int32(len(t.Ports))
		}
	}
	count := make([]int32, offset[len(c.nodes)])
	for i := range c.edges {
		if !c.okEdge[i] {
			continue
		}
		pe := &c.edges[i]
		e := pe.edge
		sp := c.types[pe.src].portIndex(e.SourceHandle, Out)
		k := offset[pe.src] + int32(sp)
		if count[k]++; count[k] == 2 {
			if p := c.types[pe.src].Ports[sp]; !p.Many && p.Channel == ChannelLink {
				c.errorf(CodePortMany, edgePath(i)+".sourceHandle", e.ID, "out-port %q of node %q takes one edge", e.SourceHandle, e.Source)
			}
		}
		dp := c.types[pe.dst].portIndex(e.TargetHandle, In)
		k = offset[pe.dst] + int32(dp)
		if count[k]++; count[k] == 2 {
			if !c.types[pe.dst].Ports[dp].Many {
				c.errorf(CodePortMany, edgePath(i)+".targetHandle", e.ID, "port %q of node %q takes one edge", e.TargetHandle, e.Target)
			}
		}
	}
	for i, t := range c.types {
		if t == nil {
			continue
		}
		for j, p := range t.Ports {
			if p.Direction == In && p.Required && count[offset[i]+int32(j)] == 0 {
				c.deferf([]int32{int32(i)}, CodePortRequired, nodePath(i), c.g.Nodes[i].ID, "required port %q of node %q has no edge", p.Name, c.g.Nodes[i].ID)
			}
		}
	}
}

// reachable marks the nodes reachable by flow edges from nodes of Entry
// types, plus (transitively) the link producers those nodes use. A graph
// with no entry-type node counts as reachable everywhere.
func (c *compiler) reachable() []bool {
	reach := make([]bool, len(c.nodes))
	var stack []int32
	for i, t := range c.types {
		if t != nil && t.Entry {
			reach[i] = true
			stack = append(stack, int32(i))
		}
	}
	if len(stack) == 0 {
		for i := range reach {
			reach[i] = true
		}
		return reach
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, ei := range c.nodes[n].flowOut {
			if d := c.edges[ei].dst; !reach[d] {
				reach[d] = true
				stack = append(stack, d)
			}
		}
		for _, ei := range c.nodes[n].linkIn {
			if s := c.edges[ei].src; !reach[s] {
				reach[s] = true
				stack = append(stack, s)
			}
		}
	}
	return reach
}

// flowOrder runs Kahn's algorithm over flow edges. It reports every flow
// cycle with its node path and returns each node's depth (-1 for nodes in
// or behind a cycle).
func (c *compiler) flowOrder() []int32 {
	n := len(c.nodes)
	indeg := make([]int32, n)
	depth := make([]int32, n)
	for i := range c.nodes {
		indeg[i] = int32(len(c.nodes[i].flowIn))
	}
	queue := make([]int32, 0, n)
	for i := range indeg {
		if indeg[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for h := 0; h < len(queue); h++ {
		u := queue[h]
		for _, ei := range c.nodes[u].flowOut {
			v := c.edges[ei].dst
			if depth[u]+1 > depth[v] {
				depth[v] = depth[u] + 1
			}
			if indeg[v]--; indeg[v] == 0 {
				queue = append(queue, v)
			}
		}
	}
	if len(queue) == n {
		return depth
	}
	c.cycles(indeg, ChannelFlow, CodeFlowCycle)
	for i := range indeg {
		if indeg[i] > 0 {
			depth[i] = -1
			c.nodes[i].problem = true
		}
	}
	return depth
}

// cycles reports one diagnostic per distinct cycle among the nodes left
// with a positive in-degree: walking back over predecessors that are also
// left always ends in a cycle. Every node is visited at most once overall.
func (c *compiler) cycles(left []int32, ch Channel, code string) {
	walk := make([]int32, len(left)) // 0 unvisited, else walk number
	var path []int32
	pos := map[int32]int{}
	for start := range left {
		if left[start] <= 0 || walk[start] != 0 {
			continue
		}
		id := int32(start + 1)
		path, u := path[:0], int32(start)
		clear(pos)
		for walk[u] == 0 {
			walk[u] = id
			pos[u] = len(path)
			path = append(path, u)
			u = c.leftPred(u, left, ch)
		}
		if walk[u] != id {
			continue // joined an earlier walk: that cycle is reported
		}
		cyc := append([]int32(nil), path[pos[u]:]...)
		// path follows predecessors; reverse it to read in edge direction.
		for i, j := 0, len(cyc)-1; i < j; i, j = i+1, j-1 {
			cyc[i], cyc[j] = cyc[j], cyc[i]
		}
		ids := make([]string, 0, len(cyc)+1)
		for _, v := range cyc {
			ids = append(ids, c.g.Nodes[v].ID)
			c.nodes[v].problem = true
		}
		ids = append(ids, ids[0])
		c.deferred = append(c.deferred, deferredDiag{
			d: Diagnostic{Code: code, Path: nodePath(int(cyc[0])), ID: ids[0], NodeIDs: ids,
				Message: fmt.Sprintf("%s cycle: %s", ch, joinArrow(ids))},
			nodes: cyc,
		})
	}
}

func (c *compiler) leftPred(u int32, left []int32, ch Channel) int32 {
	in := c.nodes[u].flowIn
	if ch == ChannelLink {
		in = c.nodes[u].linkIn
	}
	for _, ei := range in {
		if s := c.edges[ei].src; left[s] > 0 {
			return s
		}
	}
	return u // unreachable for a node with positive in-degree
}

// linkCycles reports cycles of link dependencies (producer -> consumer).
func (c *compiler) linkCycles() {
	n := len(c.nodes)
	indeg := make([]int32, n)
	out := make([][]int32, n)
	for i := range c.nodes {
		indeg[i] = int32(len(c.nodes[i].linkIn))
		for _, ei := range c.nodes[i].linkIn {
			s := c.edges[ei].src
			out[s] = append(out[s], int32(i))
		}
	}
	queue := make([]int32, 0, n)
	for i := range indeg {
		if indeg[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for h := 0; h < len(queue); h++ {
		for _, v := range out[queue[h]] {
			if indeg[v]--; indeg[v] == 0 {
				queue = append(queue, v)
			}
		}
	}
	if len(queue) < n {
		c.cycles(indeg, ChannelLink, CodeLinkCycle)
	}
}

// settleDeferred grades reachability-dependent problems: errors when any
// node involved is reachable from an entry, warnings otherwise (and the
// nodes are marked so no run may include them).
func (c *compiler) settleDeferred(reach []bool) {
	for _, dd := range c.deferred {
		d := dd.d
		d.Severity = SeverityWarning
		for _, n := range dd.nodes {
			c.nodes[n].problem = true
			if reach[n] {
				d.Severity = SeverityError
			}
		}
		if d.Severity == SeverityWarning {
			d.Message += " (not reachable from an entry node: runs will not use it)"
		}
		c.diags = append(c.diags, d)
	}
}

func (c *compiler) plan(depth []int32) *Plan {
	p := &Plan{GraphID: c.g.ID, PlanVersion: c.g.PlanVersion, graph: c.g, nodes: c.nodes, edges: c.edges, index: c.index}
	p.byRank = make([]int32, len(c.nodes))
	for i := range p.byRank {
		p.byRank[i] = int32(i)
		pn := &p.nodes[i]
		pn.mat, _ = pn.exec.(Materializer)
		pn.desc, _ = pn.exec.(Describer)
		pn.dataHash = sha256.Sum256(pn.node.Data)
	}
	sort.Slice(p.byRank, func(a, b int) bool {
		x, y := &p.nodes[p.byRank[a]], &p.nodes[p.byRank[b]]
		if x.opts.Priority != y.opts.Priority {
			return x.opts.Priority > y.opts.Priority
		}
		if depth[p.byRank[a]] != depth[p.byRank[b]] {
			return depth[p.byRank[a]] < depth[p.byRank[b]]
		}
		return x.node.ID < y.node.ID
	})
	for r, i := range p.byRank {
		p.nodes[i].rank = int32(r)
	}
	return p
}

func sortDiagnostics(ds Diagnostics) Diagnostics {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].Severity != ds[j].Severity {
			return ds[i].Severity == SeverityError
		}
		return false
	})
	return ds
}

func joinArrow(ids []string) string {
	n := 0
	for _, s := range ids {
		n += len(s) + 4
	}
	b := make([]byte, 0, n)
	for i, s := range ids {
		if i > 0 {
			b = append(b, " -> "...)
		}
		b = append(b, s...)
	}
	return string(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ActiveNodes returns the ids of the nodes a run started at entryIDs
// executes (what the entries reach by flow edges), in rank order. Empty
// entryIDs mean the default entries (every node of an Entry type). Nil
// when an entry is unknown.
func (p *Plan) ActiveNodes(entryIDs []string) []string {
	as := p.activeFrom(entryIDs)
	if len(as.entries) == 0 {
		return nil
	}
	return slices.Clone(as.ids)
}

// CheckEntries says why a run started at entryIDs could not run: an
// unknown entry (or none at all), or the diagnostics of the part of the
// graph the run would touch (its active nodes and the link producers they
// use), raised to errors. Empty entryIDs mean the default entries. Nil
// when the run can start.
func (p *Plan) CheckEntries(entryIDs []string) Diagnostics {
	as := p.activeFrom(entryIDs)
	var ge *GraphError
	switch {
	case as.err == nil:
		return nil
	case errors.As(as.err, &ge):
		return ge.Diagnostics
	}
	return Diagnostics{{Severity: SeverityError, Code: CodeUnknownEntry, Path: "nodes", Message: as.err.Error()}}
}
