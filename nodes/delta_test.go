package nodes_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A 200 KB message of one-letter words streams as a bounded number of
// node_delta events (not one per word), and the text they carry is the
// whole answer.
func TestHugeAnswerDeltasAreCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("huge").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"name":"Helper"}`).
		node("o", nodes.TypeChatOutput).flow("s", "a").flow("a", "o").build()
	content := strings.Repeat("a ", 100_000)
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: content})
	require.Equal(t, runtime.RunCompleted, res.Status)
	var text strings.Builder
	deltas := s.of(nodes.EventNodeDelta, "a")
	for _, e := range deltas {
		text.WriteString(e.Data.(*nodes.NodeDeltaData).Text)
	}
	t.Logf("%d node_delta events for %d words", len(deltas), 100_000)
	require.Equal(t, output(t, res, "o").Content, text.String(), "the deltas carry the whole answer")
	// 2000 one per word, then one per 8 KiB or 100 ms: far below 100k
	// even on a slow machine.
	require.Less(t, len(deltas), 5000)
}
