package nodes

import (
	"context"
	"encoding/json"
	"fmt"

	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

type toolData struct {
	Name            string `json:"name" validate:"required,max=64"`
	RequireApproval bool   `json:"requireApproval"`
	// Description overrides the tool's own description for the model.
	Description string `json:"description" validate:"max=2000"`
}

// LinkedTool is the artifact of a link into an agent's tools port: a tool
// node's registered tool, or a member agent exposed as a tool.
type LinkedTool struct {
	tools.Tool
	// NodeID is the node that produced it ("" for a user tool).
	NodeID string
	// RequireApproval makes the agent ask a person before each call.
	RequireApproval bool
	// Client marks a client tool: never invoked here; a call interrupts
	// the run until the client resumes it with the result.
	Client bool
}

// clientTool is a ClientTool as a tools.Tool (its Invoke is never called
// by the agent loop).
type clientTool struct{ ClientTool }

func (t clientTool) Spec() tools.Spec {
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return tools.Spec{Name: t.Name, Description: t.Description, Parameters: params}
}

func (t clientTool) Invoke(context.Context, tools.Call) (string, error) {
	return "", fmt.Errorf("tool %s runs in the client", t.Name)
}

type describedTool struct {
	tools.Tool
	desc string
}

func (t describedTool) Spec() tools.Spec {
	s := t.Tool.Spec()
	s.Description = t.desc
	return s
}

func (e *env) toolType() runtime.NodeType {
	return runtime.NodeType{
		Name:  TypeTool,
		Label: "Tool",
		Description: "A registered tool (calculator, current_time, http_request...) for the agents it is linked to. " +
			"With requireApproval a person approves each call.",
		Ports: []runtime.Port{{Name: PortTool, Direction: runtime.Out, Channel: runtime.ChannelLink, Many: true}},
		DataSchema: schema(fmt.Sprintf(`{"type":"object","required":["name"],"properties":{
			"name":{"type":"string","description":"A registered tool.","enum":%s},
			"requireApproval":{"type":"boolean","default":false,"description":"Ask a person before each call."},
			"description":{"type":"string","maxLength":2000,"description":"Overrides the description the model sees."}}}`, jsonText(e.Tools.Names()))),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d toolData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			t, ok := e.Tools.Lookup(d.Name)
			if !ok {
				return nil, &runtime.FieldError{Field: "name", Message: fmt.Sprintf("no registered tool %q (known: %v)", d.Name, e.Tools.Names())}
			}
			if d.Description != "" {
				t = describedTool{Tool: t, desc: d.Description}
			}
			return &toolNode{tool: t, approve: d.RequireApproval}, nil
		},
	}
}

type toolNode struct {
	tool    tools.Tool
	approve bool
}

// Execute is never called by a valid graph (a tool node has no flow
// ports, so it is never scheduled); it fails to say so.
func (t *toolNode) Execute(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
	return runtime.Result{}, runtime.Errorf(CodeToolConfig, "a tool node only runs when an agent calls it")
}

// Materialize implements runtime.Materializer: the *LinkedTool.
func (t *toolNode) Materialize(_ context.Context, n *runtime.Node, handle string, _ *runtime.FlowContext) (any, error) {
	if handle != PortTool {
		return nil, fmt.Errorf("tool node %s has no link port %q", n.ID, handle)
	}
	return &LinkedTool{Tool: t.tool, NodeID: n.ID, RequireApproval: t.approve}, nil
}
