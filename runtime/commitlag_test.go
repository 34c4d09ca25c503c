package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// slowBatches is a memory store whose group commits take at least delay.
type slowBatches struct {
	*memory.Store
	delay time.Duration
}

func (s slowBatches) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	time.Sleep(s.delay)
	return s.Store.WriteBatches(ctx, batches)
}

// Engine.CommitLag reports how long the group commits took lately: at
// least a slow store's delay once a run has committed through it, and
// nothing for an engine that committed nothing.
func TestCommitLagSeesSlowCommits(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	const delay = 20 * time.Millisecond
	e := k.engine(t, slowBatches{memory.New(), delay})
	require.Zero(t, e.CommitLag(), "nothing committed yet")
	g := newGraph("lag").node("s", "start").node("a", "step").flow("s", "a").build()
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "r1"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	lag := e.CommitLag()
	require.GreaterOrEqual(t, lag, delay/2, "at most one halving since the run's last commit")
	require.Eventually(t, func() bool { return e.CommitLag() == 0 }, 10*time.Second, 50*time.Millisecond, "forgotten once commits stop")

	exit := k.engine(t, slowBatches{memory.New(), delay}, func(c *runtime.Config) { c.Durability = runtime.DurabilityExit })
	_, err = exit.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "r2"})
	require.NoError(t, err)
	require.Zero(t, exit.CommitLag(), "exit mode commits through no group commit")
}
