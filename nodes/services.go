package nodes

import (
	"context"
	"errors"

	"chatgraph/runtime"
)

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

// HistorySource resolves the history a ChatInput names by reference
// (HistoryFrom) into its messages, oldest first. Package chat provides
// one for its runs; nodes never reads a chat store itself.
// Implementations are safe for concurrent use.
type HistorySource interface {
	History(ctx context.Context, ref HistoryRef) ([]Message, error)
}

// HistorySourcer is what agents look for in FlowContext.Services to
// resolve ChatInput.HistoryFrom. A Services value that is a HistorySource
// itself works too. Without one, only inline ChatInput.History is read.
type HistorySourcer interface {
	HistorySource() HistorySource
}

// ErrNoHistorySource: a run input names its history by reference but the
// run's services have no HistorySource to read it.
var ErrNoHistorySource = errors.New("the run input names its history in a chat, but the run has no history source")

// Services is a ready-made run services value for RunRequest.Services.
type Services struct {
	Scope ChatScope
	// History resolves ChatInput.HistoryFrom (nil: inline history only).
	History HistorySource
}

// HistorySource implements HistorySourcer.
func (s *Services) HistorySource() HistorySource {
	if s == nil {
		return nil
	}
	return s.History
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

// historySourceOf finds the history source in a run's services (nil when
// none).
func historySourceOf(fc *runtime.FlowContext) HistorySource {
	switch s := fc.Services().(type) {
	case HistorySourcer:
		return s.HistorySource()
	case HistorySource:
		return s
	}
	return nil
}

// history is a chat input's history: inline, else resolved by reference.
func (ci ChatInput) history(ctx context.Context, fc *runtime.FlowContext) ([]Message, error) {
	if len(ci.History) > 0 || ci.HistoryFrom == nil {
		return ci.History, nil
	}
	src := historySourceOf(fc)
	if src == nil {
		return nil, ErrNoHistorySource
	}
	return src.History(ctx, *ci.HistoryFrom)
}
