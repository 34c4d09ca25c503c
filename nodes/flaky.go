package nodes

import (
	"context"

	"chatgraph/runtime"
)

type flakyData struct {
	FailTimes int    `json:"failTimes" validate:"gte=0,lte=100"`
	ErrorCode string `json:"errorCode" validate:"max=64"`
}

// DefaultFlakyCode is the code flaky fails with when data sets none.
const DefaultFlakyCode = "flaky"

func (e *env) flakyType() runtime.NodeType {
	return runtime.NodeType{
		Name:        TypeFlaky,
		Label:       "Flaky",
		Description: "Fails the first failTimes attempts of a run with errorCode, then passes its input on. For trying retry policies and failure edges.",
		Ports:       []runtime.Port{flowIn(true, false), flowOut(PortOutput)},
		DataSchema: schema(`{"type":"object","properties":{
			"failTimes":{"type":"integer","minimum":0,"maximum":100,"default":0,"description":"How many attempts fail."},
			"errorCode":{"type":"string","maxLength":64,"default":"flaky","description":"The code of the failures (what retry.retryableErrors matches)."}}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d flakyData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			if d.ErrorCode == "" {
				d.ErrorCode = DefaultFlakyCode
			}
			return runtime.ExecutorFunc(func(_ context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				if a := fc.Attempt(); a <= d.FailTimes {
					return runtime.Result{}, runtime.Errorf(d.ErrorCode, "%s: attempt %d of the %d that fail", n.ID, a, d.FailTimes)
				}
				return runtime.Result{Output: passThrough(in)}, nil
			}), nil
		},
	}
}
