package nodes

import (
	"context"

	"chatgraph/runtime"
)

func (e *env) routerType() runtime.NodeType {
	return runtime.NodeType{
		Name:   TypeRouter,
		Inline: true, // a pure function of its inputs
		Label:  "Router",
		Description: "Passes its input on unchanged; the conditions on its outgoing edges choose where it goes " +
			"(e.g. output.content.contains(\"weather\")).",
		Ports:      []runtime.Port{flowIn(true, false), flowOut(PortOutput)},
		DataSchema: schema(`{"type":"object","properties":{}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d struct{}
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
				return runtime.Result{Output: passThrough(in)}, nil
			}), nil
		},
	}
}
