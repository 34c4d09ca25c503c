package runcontrol

import (
	"fmt"
	"strings"
)

// Scope kinds. A cancel names a scope; a run is bound to one or more.
const (
	// KindChat is a chat id: every run of the chat, or the next one to start.
	KindChat = "chat"
	// KindRequest is a client request id (clientRequestId / WebSocket frame id):
	// the run started for that request, before or after it exists.
	KindRequest = "request"
	// KindRun is a run id. A run is always bound to its own run scope.
	KindRun = "run"
)

// MaxScopeIDLength bounds a scope id (bytes): ids become Redis keys.
const MaxScopeIDLength = 512

// Scope names what a cancel targets: a chat, a client request or a run.
// The zero Scope is invalid.
type Scope struct {
	Kind string
	ID   string
}

// ChatScope is the scope of every run of chat id.
func ChatScope(id string) Scope { return Scope{Kind: KindChat, ID: id} }

// RequestScope is the scope of the run started for client request id.
func RequestScope(id string) Scope { return Scope{Kind: KindRequest, ID: id} }

// RunScope is the scope of run id itself.
func RunScope(id string) Scope { return Scope{Kind: KindRun, ID: id} }

// String renders the scope as "kind:id"; it is also the storage form, so
// it is unambiguous (kinds contain no colon).
func (s Scope) String() string { return s.Kind + ":" + s.ID }

// Validate reports ErrInvalidScope unless the kind is one of the three
// known kinds and the id is non-empty, at most MaxScopeIDLength bytes and
// free of control characters.
func (s Scope) Validate() error {
	switch s.Kind {
	case KindChat, KindRequest, KindRun:
	default:
		return fmt.Errorf("%w: unknown kind %q", ErrInvalidScope, s.Kind)
	}
	if s.ID == "" {
		return fmt.Errorf("%w: empty %s id", ErrInvalidScope, s.Kind)
	}
	if len(s.ID) > MaxScopeIDLength {
		return fmt.Errorf("%w: %s id longer than %d bytes", ErrInvalidScope, s.Kind, MaxScopeIDLength)
	}
	if strings.ContainsFunc(s.ID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: %s id contains a control character", ErrInvalidScope, s.Kind)
	}
	return nil
}

// ParseScope is the inverse of Scope.String; the result is validated.
func ParseScope(s string) (Scope, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok {
		return Scope{}, fmt.Errorf("%w: %q has no kind", ErrInvalidScope, s)
	}
	sc := Scope{Kind: kind, ID: id}
	return sc, sc.Validate()
}

// BindScopes validates runID and scopes and returns the set a run binds
// to: RunScope(runID) first, then scopes in order without duplicates.
// Implementations of Controller call it so they agree on what Bind accepts.
func BindScopes(runID string, scopes []Scope) ([]Scope, error) {
	own := RunScope(runID)
	if err := own.Validate(); err != nil {
		return nil, fmt.Errorf("run id: %w", err)
	}
	out := make([]Scope, 1, len(scopes)+1)
	out[0] = own
	for _, s := range scopes {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		dup := false
		for _, o := range out {
			if o == s {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out, nil
}
