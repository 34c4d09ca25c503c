package runtime_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

func TestChainRuns(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	for _, st := range []runtime.Store{nil, newMem()} {
		e := k.engine(t, st)
		g := newGraph("g1").node("s", "start").node("a", "step").node("b", "step").node("x", "step").flow("s", "a").flow("a", "b").build()
		var c collect
		res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, Input: "hi", Sink: &c})
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, res.Status)
		out, ok := res.Output("b")
		require.True(t, ok)
		require.Equal(t, "b(a(s(hi)))", out)
		checkLifecycle(t, c.events())
		require.Equal(t, 0, k.execCount("x"))
	}
}
