package nodes

import (
	"context"
	"fmt"
	"strings"

	"chatgraph/runtime"
)

type chatStartData struct {
	// IncludeUserTools (default true) gives the user's tools to every
	// entry agent downstream (the chat scope applies it).
	IncludeUserTools *bool `json:"includeUserTools"`
	// UserTools, when set, lists the tools a user may enable for this
	// graph's chats (registered tools, or "server/tool" of an MCP
	// server); absent: only the tools registered safe (tools.Registry.Safe).
	UserTools []string `json:"userTools" validate:"omitempty,max=64"`
}

func (e *env) chatStartType() runtime.NodeType {
	return runtime.NodeType{
		Name:        TypeChatStart,
		Entry:       true,
		Inline:      true, // a pure function of its inputs
		Label:       "Chat start",
		Description: "Starts a chat turn: emits the user's new message. Entry agents downstream also get the chat history.",
		Ports:       []runtime.Port{flowOut(PortMessage)},
		DataSchema: schema(`{"type":"object","properties":{
			"includeUserTools":{"type":"boolean","default":true,"description":"Give the user's tools to the entry agents downstream."},
			"userTools":{"type":"array","items":{"type":"string"},"maxItems":64,"description":"The tools a user may enable, with outside effects or not (absent: only tools with no outside effects, such as calculator and current_time)."}}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d chatStartData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			for _, name := range d.UserTools {
				if src, _, ok := strings.Cut(name, "/"); ok {
					if _, known := e.Tools.Source(src); !known {
						return nil, &runtime.FieldError{Field: FieldUserTools, Message: fmt.Sprintf("no tool source %q (in %q)", src, name)}
					}
				} else if _, known := e.Tools.Lookup(name); !known {
					return nil, &runtime.FieldError{Field: FieldUserTools, Message: fmt.Sprintf("no registered tool %q", name)}
				}
			}
			return runtime.ExecutorFunc(execChatStart), nil
		},
	}
}

// execChatStart emits the user's message from the run input (a ChatInput).
func execChatStart(_ context.Context, _ *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
	v := fc.RunInput()
	if len(in) > 0 {
		v = in[0].Value
	}
	ci := AsChatInput(v)
	return runtime.Result{Output: Message{Role: RoleUser, Content: ci.Content}.Value()}, nil
}
