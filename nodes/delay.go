package nodes

import (
	"context"
	"time"

	"chatgraph/runtime"
)

type delayData struct {
	Ms int64 `json:"ms" validate:"gte=0,lte=3600000"`
}

func (e *env) delayType() runtime.NodeType {
	return runtime.NodeType{
		Name:        TypeDelay,
		Label:       "Delay",
		Description: "Waits ms milliseconds (a cancel ends the wait), then passes its input on.",
		Ports:       []runtime.Port{flowIn(true, false), flowOut(PortOutput)},
		DataSchema: schema(`{"type":"object","properties":{
			"ms":{"type":"integer","minimum":0,"maximum":3600000,"default":0,"description":"Milliseconds to wait."}}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d delayData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			wait := time.Duration(d.Ms) * time.Millisecond
			return runtime.ExecutorFunc(func(ctx context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
				t := time.NewTimer(wait)
				defer t.Stop()
				select {
				case <-t.C:
					return runtime.Result{Output: passThrough(in)}, nil
				case <-ctx.Done():
					return runtime.Result{}, context.Cause(ctx)
				}
			}), nil
		},
	}
}
