package chatscope

import (
	"encoding/json"
	"slices"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// UserToolsField is the chat_start data field listing the tools a user
// may enable for the chats of the graph.
const UserToolsField = nodes.FieldUserTools

// addToolList records the allow-list of chat_start st for entry agent a.
func (s *Scope) addToolList(a string, st *runtime.Node) {
	list, ok := userToolList(st)
	if !ok {
		return
	}
	if s.toolLists == nil {
		s.toolLists = map[string][][]string{}
	}
	s.toolLists[a] = append(s.toolLists[a], list)
}

// UserToolAllowed reports whether agent id may use the user's tool name:
// the agent gets user tools (IncludeUserTools), and every chat_start
// reaching it that lists userTools lists name; when none lists them (a
// chat_start without the field restricts nothing), only a tool
// registered safe may be used (safe: tools.Registry.Safe).
func (s *Scope) UserToolAllowed(id, name string, safe bool) bool {
	if !s.IncludeUserTools(id) {
		return false
	}
	lists := s.toolLists[id]
	if len(lists) == 0 {
		return safe
	}
	for _, list := range lists {
		if !slices.Contains(list, name) {
			return false
		}
	}
	return true
}

// RefusedUserTools returns the tools among names that no agent of the
// run may use (see UserToolAllowed; safe says which tools are registered
// safe), in order: a chat call enabling them is refused. It returns nil
// when no agent of the run gets user tools at all: they are moot then.
func (s *Scope) RefusedUserTools(names []string, safe func(string) bool) []string {
	var takers []string
	for _, a := range s.agents {
		if s.IncludeUserTools(a) {
			takers = append(takers, a)
		}
	}
	if len(takers) == 0 {
		return nil
	}
	var refused []string
	for _, name := range names {
		if !slices.ContainsFunc(takers, func(a string) bool { return s.UserToolAllowed(a, name, safe(name)) }) {
			refused = append(refused, name)
		}
	}
	return refused
}

// userToolList reads a chat_start's userTools (ok false when absent).
func userToolList(n *runtime.Node) ([]string, bool) {
	var d map[string]json.RawMessage
	if len(n.Data) == 0 || json.Unmarshal(n.Data, &d) != nil {
		return nil, false
	}
	raw, ok := d[UserToolsField]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		return []string{}, true // unreadable: allow nothing (validation reports it)
	}
	return list, true
}
