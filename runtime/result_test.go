package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/sqlite"
)

// Result rebuilds from the store what Invoke returned: outputs, node
// statuses, the failure and the interrupts.
func TestResultRebuildsFinishedRuns(t *testing.T) {
	k := newKit(t)
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: t.TempDir() + "/runs.db"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e := k.engine(t, st)
	graphs := map[string]*runtime.Graph{
		"completed":   newGraph("ok").node("s", "start").node("a", "step", `{"output":{"text":"hi","n":[1,2]}}`).node("b", "sink").flow("s", "a").flow("a", "b").build(),
		"failed":      newGraph("bad").node("s", "start").node("a", "step", `{"fail":9,"code":"boom"}`).node("b", "sink").flow("s", "a").flow("a", "b").build(),
		"interrupted": newGraph("ask").node("s", "start").node("a", "step", `{"interrupt":"approve"}`).node("b", "sink").flow("s", "a").flow("a", "b").build(),
	}
	for want, g := range graphs {
		live, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, Input: "x"})
		require.NoError(t, err)
		require.Equal(t, runtime.RunStatus(want), live.Status)
		rec, err := st.GetRun(context.Background(), live.RunID)
		require.NoError(t, err)
		got, err := e.Result(context.Background(), rec, g)
		require.NoError(t, err)
		require.Equal(t, live.Status, got.Status, want)
		require.Equal(t, live.LastSeq, got.LastSeq, want)
		require.Equal(t, live.NodeStatuses(), got.NodeStatuses(), want)
		require.Equal(t, len(live.Interrupts), len(got.Interrupts), want)
		require.Equal(t, jsonOf(t, live.Outputs()), jsonOf(t, got.Outputs()), want)
		if live.Err == nil {
			require.NoError(t, got.Err, want)
		} else {
			require.EqualError(t, got.Err, live.Err.Error(), want)
			var ne *runtime.NodeError
			require.ErrorAs(t, got.Err, &ne)
			require.Equal(t, "boom", ne.Code)
		}
	}

	bare := k.engine(t, nil)
	_, err = bare.Result(context.Background(), &runtime.RunRecord{ID: "r", Status: runtime.RunCompleted}, graphs["completed"])
	require.Error(t, err, "without a store there is nothing to rebuild from")

	rec := &runtime.RunRecord{ID: "r_live", Status: runtime.RunRunning}
	_, err = e.Result(context.Background(), rec, graphs["completed"])
	require.ErrorIs(t, err, runtime.ErrRunNotFinished)
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
