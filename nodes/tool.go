package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

type toolData struct {
	Name            string `json:"name" validate:"required,max=200"`
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
		Description: "A registered tool (calculator, current_time, http_request...) or a tool of a configured MCP server " +
			"(server/tool) for the agents it is linked to. With requireApproval a person approves each call.",
		Ports:      []runtime.Port{{Name: PortTool, Direction: runtime.Out, Channel: runtime.ChannelLink, Many: true}},
		DataSchema: toolDataSchema(e.Tools.Names()),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d toolData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			if src, _, ok := strings.Cut(d.Name, "/"); ok {
				// A source's tools are found when an agent needs them: the
				// graph saves while the MCP server is down.
				if _, known := e.Tools.Source(src); !known {
					return nil, &runtime.FieldError{Field: "name", Message: fmt.Sprintf("no MCP server %q is configured (known: %v)", src, e.Tools.SourceNames())}
				}
				return &toolNode{e: e, name: d.Name, desc: d.Description, approve: d.RequireApproval}, nil
			}
			t, ok := e.Tools.Lookup(d.Name)
			if !ok {
				return nil, &runtime.FieldError{Field: "name", Message: fmt.Sprintf("no registered tool %q (known: %v)", d.Name, e.Tools.Names())}
			}
			return &toolNode{e: e, name: d.Name, tool: t, desc: d.Description, approve: d.RequireApproval}, nil
		},
	}
}

// toolDataSchema is the tool node's data schema with names as the
// choices for data.name.
func toolDataSchema(names []string) json.RawMessage {
	return schema(fmt.Sprintf(`{"type":"object","required":["name"],"properties":{
			"name":{"type":"string","description":"A registered tool, or server/tool for a tool of an MCP server.","enum":%s},
			"requireApproval":{"type":"boolean","default":false,"description":"Ask a person before each call."},
			"description":{"type":"string","maxLength":2000,"description":"Overrides the description the model sees."}}}`, jsonText(names)))
}

type toolNode struct {
	e       *env
	name    string
	tool    tools.Tool // nil: a source's tool, resolved when materialized
	desc    string
	approve bool
}

// Execute is never called by a valid graph (a tool node has no flow
// ports, so it is never scheduled); it fails to say so.
func (t *toolNode) Execute(context.Context, *runtime.Node, runtime.Inputs, *runtime.FlowContext) (runtime.Result, error) {
	return runtime.Result{}, runtime.Errorf(CodeToolConfig, "a tool node only runs when an agent calls it")
}

// Materialize implements runtime.Materializer: the *LinkedTool. A tool
// of an MCP server is looked up now (connecting if needed); when the
// server cannot be reached or has no such tool the linking agent fails
// with tool_unavailable (a node retry policy may try again).
func (t *toolNode) Materialize(ctx context.Context, n *runtime.Node, handle string, _ *runtime.FlowContext) (any, error) {
	if handle != PortTool {
		return nil, fmt.Errorf("tool node %s has no link port %q", n.ID, handle)
	}
	tool := t.tool
	if tool == nil {
		var err error
		if tool, err = t.e.Tools.Resolve(ctx, t.name); err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, runtime.Errorf(CodeToolUnavailable, "tool node %s: %v", n.ID, err)
		}
	}
	if t.desc != "" {
		tool = describedTool{Tool: tool, desc: t.desc}
	}
	return &LinkedTool{Tool: tool, NodeID: n.ID, RequireApproval: t.approve}, nil
}
