package nodes

import "chatgraph/runtime"

// ChatScope is the chat-scope policy of one run (package chatscope builds
// it from the graph's flow topology): which agents are entry agents (they
// get the chat history) and which get the user's tools.
type ChatScope interface {
	IsEntryAgent(nodeID string) bool
	IncludeUserTools(nodeID string) bool
}

// UserToolPolicy is an optional ChatScope capability: whether an agent
// may use one of the user's tools. safe says whether the tool is
// registered safe (tools.Registry.Safe): what decides where the graph
// lists no user tools. A scope without it allows safe tools only.
type UserToolPolicy interface {
	UserToolAllowed(nodeID, tool string, safe bool) bool
}

// ChatScoper is what agents look for in FlowContext.Services: a services
// value that hands out the run's chat scope. A Services value that is a
// ChatScope itself works too.
type ChatScoper interface {
	ChatScope() ChatScope
}

// Services is a ready-made run services value for RunRequest.Services.
type Services struct {
	Scope ChatScope
}

// ChatScope implements ChatScoper.
func (s *Services) ChatScope() ChatScope {
	if s == nil {
		return nil
	}
	return s.Scope
}

// scopeOf finds the chat scope in a run's services (nil when none).
func scopeOf(fc *runtime.FlowContext) ChatScope {
	switch s := fc.Services().(type) {
	case ChatScoper:
		return s.ChatScope()
	case ChatScope:
		return s
	}
	return nil
}
