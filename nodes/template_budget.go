package nodes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

// maxTemplateSteps bounds one rendering: every range iteration and every
// call of a defined template is a step (recursion is refused at parse). With the output bound
// (maxTemplateOutput) it keeps a template's work proportional to its
// input, and each step checks the node's context, so a cancel or timeout
// stops the rendering at once instead of leaving it running.
const maxTemplateSteps = 100_000

// stepFunc is the function the parser plants at the top of every range
// body and every defined template. Its name cannot clash with the
// template functions users see.
const stepFunc = "chatgraphStep"

var errTemplateSteps = errors.New("template step budget exceeded")

// stepAction is a parsed {{chatgraphStep}} action, shared (read-only) by
// every instrumented tree.
var stepAction = func() parse.Node {
	t := template.Must(template.New("step").Funcs(template.FuncMap{stepFunc: func() string { return "" }}).Parse("{{" + stepFunc + "}}"))
	return t.Tree.Root.Nodes[0]
}()

// parseTemplate parses src, rejects ranges whose length is a number the
// template itself chooses (a literal, len, or a variable holding one),
// and instruments every range body and defined template with a step of
// the execution budget.
func parseTemplate(name, src string) (*template.Template, error) {
	funcs := template.FuncMap{stepFunc: func() string { return "" }}
	maps.Copy(funcs, templateFuncs)
	tpl, err := template.New(name).Funcs(funcs).Parse(src)
	if err != nil {
		return nil, err
	}
	calls := map[string][]string{}
	for _, t := range tpl.Templates() {
		if t.Tree == nil || t.Tree.Root == nil {
			continue
		}
		w := &rangeCheck{numeric: map[string]bool{}}
		if err := w.walk(t.Tree.Root); err != nil {
			return nil, err
		}
		calls[t.Name()] = w.calls
		t.Tree.Root.Nodes = append([]parse.Node{stepAction}, t.Tree.Root.Nodes...)
	}
	if cycle := callCycle(calls); cycle != nil {
		return nil, fmt.Errorf("template %q calls itself (%s): recursion is not allowed", cycle[0], strings.Join(cycle, " -> "))
	}
	return tpl, nil
}

// callCycle returns a cycle in the {{template}} call graph, or nil.
// Recursion is refused outright: the steps bound the work, but an
// erroring render unwinds every level of a deep recursion, at a cost that
// grows with the square of its depth.
func callCycle(calls map[string][]string) []string {
	const (
		unseen = iota
		open
		closed
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(name string) []string {
		switch state[name] {
		case open:
			for i, p := range path {
				if p == name {
					return append(append([]string(nil), path[i:]...), name)
				}
			}
		case closed:
			return nil
		}
		state[name] = open
		path = append(path, name)
		for _, c := range calls[name] {
			if cyc := visit(c); cyc != nil {
				return cyc
			}
		}
		path = path[:len(path)-1]
		state[name] = closed
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(calls)) {
		if cyc := visit(n); cyc != nil {
			return cyc
		}
	}
	return nil
}

// rangeCheck walks a template tree, refusing {{range N}} over numbers and
// collecting the templates it calls.
type rangeCheck struct {
	numeric map[string]bool // variables declared from a number
	calls   []string
}

func (w *rangeCheck) walk(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := w.walk(c); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		w.declare(n.Pipe)
	case *parse.TemplateNode:
		w.calls = append(w.calls, n.Name)
	case *parse.IfNode:
		return w.branch(&n.BranchNode)
	case *parse.WithNode:
		return w.branch(&n.BranchNode)
	case *parse.RangeNode:
		if w.isNumber(n.Pipe) {
			return fmt.Errorf("line %d: range over a number is not allowed (range over input data instead)", n.Line)
		}
		if err := w.branch(&n.BranchNode); err != nil {
			return err
		}
		n.List.Nodes = append([]parse.Node{stepAction}, n.List.Nodes...)
	}
	return nil
}

func (w *rangeCheck) branch(b *parse.BranchNode) error {
	w.declare(b.Pipe)
	if err := w.walk(b.List); err != nil {
		return err
	}
	if b.ElseList != nil {
		return w.walk(b.ElseList)
	}
	return nil
}

// declare records variables a pipeline declares or assigns from a number.
func (w *rangeCheck) declare(p *parse.PipeNode) {
	if p == nil || len(p.Decl) == 0 {
		return
	}
	num := w.isNumber(&parse.PipeNode{Cmds: p.Cmds})
	for _, v := range p.Decl {
		if len(v.Ident) > 0 {
			w.numeric[v.Ident[0]] = w.numeric[v.Ident[0]] || num
		}
	}
}

// isNumber reports whether a pipeline's value is a number the template
// makes up: a literal, a len call, or a variable declared from one.
func (w *rangeCheck) isNumber(p *parse.PipeNode) bool {
	if p == nil || len(p.Cmds) == 0 {
		return false
	}
	last := p.Cmds[len(p.Cmds)-1]
	if len(last.Args) == 0 {
		return false
	}
	switch a := last.Args[0].(type) {
	case *parse.NumberNode:
		return true
	case *parse.IdentifierNode:
		return a.Ident == "len"
	case *parse.VariableNode:
		return len(a.Ident) == 1 && w.numeric[a.Ident[0]]
	case *parse.PipeNode:
		return w.isNumber(a)
	}
	return false
}

// budget is one rendering's step counter.
type budget struct {
	ctx     context.Context
	steps   int
	stopped error // the context's cause, once it ended the rendering
}

func (b *budget) step() (string, error) {
	b.steps++
	if b.steps > maxTemplateSteps {
		return "", errTemplateSteps
	}
	if b.ctx.Err() != nil {
		b.stopped = context.Cause(b.ctx)
		return "", b.stopped
	}
	return "", nil
}

// withBudget returns a copy of tpl (sharing its trees) whose step function
// counts against a fresh budget bound to ctx.
func withBudget(ctx context.Context, tpl *template.Template) (*template.Template, *budget) {
	b := &budget{ctx: ctx}
	t := template.Must(tpl.Clone())
	t.Funcs(template.FuncMap{stepFunc: b.step})
	return t, b
}
