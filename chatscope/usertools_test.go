package chatscope_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
)

// Every chat_start reaching an entry agent with a userTools list must
// list a tool for the agent to get it; a chat_start without one restricts
// nothing.
func TestUserToolAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		g     []string
		agent string
		allow map[string]bool
	}{
		{"no list", []string{"s" + cs, "a" + agent, "s->a"}, "a", map[string]bool{"calculator": true, "http_request": true}},
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
			require.Equal(t, want, sc.UserToolAllowed(tc.agent, tool), "%s: %s", tc.name, tool)
		}
	}
}
