package nodes_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/runtime"
)

// branchSource is a HistorySource over fixed branches, counting reads.
type branchSource struct {
	branches map[string][]nodes.Message
	reads    atomic.Int32
}

func (s *branchSource) History(_ context.Context, ref nodes.HistoryRef) ([]nodes.Message, error) {
	s.reads.Add(1)
	b, ok := s.branches[ref.ChatID+"/"+ref.MessageID]
	if !ok {
		return nil, context.DeadlineExceeded // any error: the branch is unreadable
	}
	return b, nil
}

// An entry agent reads a history the run input names by reference through
// the HistorySource in the run's services; inline history wins over a
// reference; without a source (or with an unreadable branch) the agent
// fails with history_unavailable instead of answering without history.
func TestAgentResolvesHistoryReference(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var got atomic.Pointer[[]llm.Message]
	h.script.set(func(req llm.Request) (llm.Response, error) {
		got.Store(&req.Messages)
		return llm.Response{Content: "ok"}, nil
	})
	g := newGraph("hist").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"script/x"}`).flow("s", "a").build()
	src := &branchSource{branches: map[string][]nodes.Message{"c1/m2": {{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "answer"}}}}
	run := func(in nodes.ChatInput, history nodes.HistorySource) (*runtime.RunResult, *sink) {
		s := &sink{}
		res, err := h.eng.Invoke(context.Background(), runtime.RunRequest{Graph: g, Input: in.Value(), Sink: s,
			Services: &nodes.Services{Scope: h.scope(t, g, nil), History: history}})
		require.NoError(t, err)
		checkLifecycle(t, s.events())
		return res, s
	}
	texts := func() []string {
		var out []string
		for _, m := range *got.Load() {
			out = append(out, m.Role+":"+m.Content)
		}
		return out
	}

	ref := &nodes.HistoryRef{ChatID: "c1", MessageID: "m2"}
	res, s := run(nodes.ChatInput{Content: "now", HistoryFrom: ref}, src)
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, []string{"user:earlier", "assistant:answer", "user:now"}, texts())
	started := s.of(runtime.EventNodeStarted, "a")[0].Data.(*runtime.NodeStartedData).Details
	require.EqualValues(t, 3, started["messageCount"])

	reads := src.reads.Load()
	require.Positive(t, reads)
	res, _ = run(nodes.ChatInput{Content: "now", History: []nodes.Message{{Role: "user", Content: "inline"}}, HistoryFrom: ref}, src)
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	require.Equal(t, []string{"user:inline", "user:now"}, texts(), "inline history wins")
	require.Equal(t, reads, src.reads.Load(), "the reference is not read")

	for name, c := range map[string]struct {
		in  nodes.ChatInput
		src nodes.HistorySource
	}{
		"no source":         {nodes.ChatInput{Content: "now", HistoryFrom: ref}, nil},
		"unreadable branch": {nodes.ChatInput{Content: "now", HistoryFrom: &nodes.HistoryRef{ChatID: "c1", MessageID: "gone"}}, src},
	} {
		res, s := run(c.in, c.src)
		require.Equal(t, runtime.RunFailed, res.Status, name)
		failed := s.of(runtime.EventNodeFailed, "a")
		require.Len(t, failed, 1, name)
		require.Equal(t, nodes.CodeHistory, failed[0].Data.(*runtime.NodeFailedData).Code, name)
	}
}
