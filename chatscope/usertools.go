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
// reaching it that lists userTools lists name. A chat_start without the
// field restricts nothing.
func (s *Scope) UserToolAllowed(id, name string) bool {
	if !s.IncludeUserTools(id) {
		return false
	}
	for _, list := range s.toolLists[id] {
		if !slices.Contains(list, name) {
			return false
		}
	}
	return true
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
