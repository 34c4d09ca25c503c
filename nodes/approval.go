package nodes

import (
	"context"

	"chatgraph/runtime"
)

type approvalData struct {
	Prompt string `json:"prompt" validate:"max=10000"`
}

func (e *env) approvalType() runtime.NodeType {
	return runtime.NodeType{
		Name:          TypeApproval,
		DefaultEffect: runtime.EffectHuman,
		Label:         "Approval",
		Description: "Pauses the run until a person decides. Resume with {\"approved\":true} to pass the input on; " +
			"{\"approved\":false,\"reason\":\"...\"} fails the node with code approval_denied (route it with an on_failure edge).",
		Ports: []runtime.Port{flowIn(true, false), flowOut(PortOutput)},
		DataSchema: schema(`{"type":"object","properties":{
			"prompt":{"type":"string","maxLength":10000,"description":"What the person is asked."}}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d approvalData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			return runtime.ExecutorFunc(func(_ context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				if v, ok := fc.ResumeValue(); ok {
					dec, err := ParseApproval(v)
					if err != nil {
						return runtime.Result{}, runtime.Errorf(CodeInvalidResume, "%s: %v", n.ID, err)
					}
					if !dec.Approved {
						if dec.Reason != "" {
							return runtime.Result{}, runtime.Errorf(CodeApprovalDenied, "%s: rejected: %s", n.ID, dec.Reason)
						}
						return runtime.Result{}, runtime.Errorf(CodeApprovalDenied, "%s: rejected", n.ID)
					}
					return runtime.Result{Output: passThrough(in)}, nil
				}
				req := &ApprovalRequiredData{Kind: ApprovalKindNode, Prompt: d.Prompt, Input: passThrough(in)}
				_ = fc.Emit(EventApprovalRequired, req)
				return runtime.Result{}, runtime.Interrupt(ReasonApproval, req)
			}), nil
		},
	}
}
