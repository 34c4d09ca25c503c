package nodes

import (
	"context"
	"strings"

	"chatgraph/runtime"
)

func (e *env) chatOutputType() runtime.NodeType {
	return runtime.NodeType{
		Name:   TypeChatOutput,
		Inline: true, // a pure function of its inputs
		Label:  "Chat output",
		Description: "Writes the assistant message: its output is the message the chat keeps " +
			"(several inputs are joined by blank lines, in edge order).",
		Ports:      []runtime.Port{flowIn(true, true)},
		DataSchema: schema(`{"type":"object","properties":{}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d struct{}
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			return runtime.ExecutorFunc(execChatOutput), nil
		},
	}
}

func execChatOutput(_ context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
	out := Message{Role: RoleAssistant}
	parts := make([]string, 0, len(in))
	for i, x := range in {
		m := AsMessage(x.Value)
		if i == 0 {
			out.Name, out.Metadata = m.Name, m.Metadata
		}
		parts = append(parts, m.Content)
	}
	out.Content = strings.Join(parts, "\n\n")
	return runtime.Result{Output: out.Value(), Summary: summary(out.Content)}, nil
}

func summary(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	r := []rune(s)
	if len(r) > max {
		r = r[:max]
	}
	return string(r) + "…"
}
