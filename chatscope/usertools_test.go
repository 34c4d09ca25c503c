package chatscope_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
)

// Every chat_start reaching an entry agent with a userTools list must
// list a tool for the agent to get it; a chat_start without one restricts
// nothing; where none lists, only the tools registered safe are allowed
// (here calculator and current_time).
func TestUserToolAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		g     []string
		agent string
		allow map[string]bool
	}{
		{"no list: safe tools only", []string{"s" + cs, "a" + agent, "s->a"}, "a",
			map[string]bool{"calculator": true, "current_time": true, "http_request": false, "everything/echo": false}},
		{"a list allows what is not safe", []string{`s:chat_start:{"userTools":["http_request","calculator"]}`, "a" + agent, "s->a"}, "a",
			map[string]bool{"calculator": true, "http_request": true, "current_time": false}},
		{"one list", []string{`s:chat_start:{"userTools":["calculator"]}`, "a" + agent, "s->a"}, "a",
			map[string]bool{"calculator": true, "http_request": false}},
		{"empty list", []string{`s:chat_start:{"userTools":[]}`, "a" + agent, "s->a"}, "a", map[string]bool{"calculator": false}},
		{"two starts, one list", []string{"s1" + cs, `s2:chat_start:{"userTools":["calculator"]}`, "a" + agent, "s1->a", "s2->a"}, "a",
			map[string]bool{"calculator": true, "http_request": false}},
		{"two lists intersect", []string{`s1:chat_start:{"userTools":["calculator","current_time"]}`,
			`s2:chat_start:{"userTools":["calculator"]}`, "a" + agent, "s1->a", "s2->a"}, "a",
			map[string]bool{"calculator": true, "current_time": false}},
		{"user tools off", []string{`s:chat_start:{"includeUserTools":false,"userTools":["calculator"]}`, "a" + agent, "s->a"}, "a",
			map[string]bool{"calculator": false}},
		{"not an entry agent", []string{"s" + cs, "a" + agent, "b" + agent, "s->a", "a->b"}, "b", map[string]bool{"calculator": false}},
	} {
		sc := chatscope.New(compile(t, graph(tc.g...)), nil)
		for tool, want := range tc.allow {
			require.Equal(t, want, sc.UserToolAllowed(tc.agent, tool, safe(tool)), "%s: %s", tc.name, tool)
		}
	}
}

func safe(name string) bool { return name == "calculator" || name == "current_time" }

// A chat call's tools are refused when no agent of its run may use them,
// and are moot (nothing refused) when no agent of the run gets user tools.
func TestRefusedUserTools(t *testing.T) {
	t.Parallel()
	tools := []string{"calculator", "http_request", "current_time"}
	for _, tc := range []struct {
		name    string
		g       []string
		entries []string
		refused []string
	}{
		{"no list", []string{"s" + cs, "a" + agent, "s->a"}, nil, []string{"http_request"}},
		{"listed", []string{`s:chat_start:{"userTools":["http_request"]}`, "a" + agent, "s->a"}, nil,
			[]string{"calculator", "current_time"}},
		{"one of two agents allows it", []string{`s1:chat_start:{"userTools":["http_request"]}`, "s2" + cs, "a" + agent, "b" + agent,
			"s1->a", "s2->b"}, nil, nil},
		{"the entry of the call decides", []string{`s1:chat_start:{"userTools":["http_request"]}`, "s2" + cs, "a" + agent, "b" + agent,
			"s1->a", "s2->b"}, []string{"s2"}, []string{"http_request"}},
		{"no agent takes user tools", []string{`s:chat_start:{"includeUserTools":false}`, "a" + agent, "s->a"}, nil, nil},
	} {
		sc := chatscope.New(compile(t, graph(tc.g...)), tc.entries)
		require.Equal(t, tc.refused, sc.RefusedUserTools(tools, safe), tc.name)
	}
}
