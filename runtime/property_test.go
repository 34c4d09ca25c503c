package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// TestRandomDAGs runs thousands of seeded random graphs: every active node
// runs exactly once and after its predecessors, inactive nodes never run,
// the event contract holds, and outputs are the same at MaxParallel 1 and 8.
func TestRandomDAGs(t *testing.T) {
	t.Parallel()
	graphs := 2000
	if testing.Short() {
		graphs = 200
	}
	k := newKit(t)
	engines := map[int]*runtime.Engine{
		1: k.engine(t, nil, func(c *runtime.Config) { c.MaxParallel = 1 }),
		8: k.engine(t, newMem(), func(c *runtime.Config) { c.MaxParallel = 8 }),
	}
	for seed := 0; seed < graphs; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		g, preds, active := randomDAG(rng, seed)
		var outputs [2]map[string]any
		for pi, par := range []int{1, 8} {
			var c collect
			res, err := engines[par].Invoke(context.Background(), runtime.RunRequest{Graph: g, Input: seed, Sink: &c})
			require.NoError(t, err, "seed %d", seed)
			require.Equal(t, runtime.RunCompleted, res.Status, "seed %d", seed)
			evs := c.events()
			checkLifecycle(t, evs)
			startedAt := map[string]int64{}
			completedAt := map[string]int64{}
			for _, ev := range evs {
				switch ev.Type {
				case runtime.EventNodeStarted:
					startedAt[ev.NodeID] = ev.Seq
				case runtime.EventNodeCompleted:
					completedAt[ev.NodeID] = ev.Seq
				}
			}
			for id := range startedAt {
				require.True(t, active[id], "seed %d: inactive node %s ran", seed, id)
			}
			for id := range active {
				require.Contains(t, completedAt, id, "seed %d: active node %s did not run", seed, id)
				for _, p := range preds[id] {
					require.Less(t, completedAt[p], startedAt[id], "seed %d: %s started before its predecessor %s ended", seed, id, p)
				}
			}
			outputs[pi] = res.Outputs()
		}
		require.Equal(t, outputs[0], outputs[1], "seed %d: outputs depend on parallelism", seed)
	}
}

// randomDAG builds a graph of start + up to 30 steps with forward flow
// edges only, plus a few disconnected nodes. It returns the flow
// predecessors of each node and the set reachable from the start.
func randomDAG(rng *rand.Rand, seed int) (*runtime.Graph, map[string][]string, map[string]bool) {
	n := 2 + rng.IntN(30)
	b := newGraph(fmt.Sprintf("dag-%d", seed)).node("n0", "start")
	for i := 1; i < n; i++ {
		b.node(fmt.Sprintf("n%d", i), "step")
	}
	preds := map[string][]string{}
	for j := 1; j < n; j++ {
		for i := 0; i < j; i++ {
			if rng.Float64() < 2.5/float64(j+1) {
				src, dst := fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", j)
				b.flow(src, dst)
				preds[dst] = append(preds[dst], src)
			}
		}
	}
	// Nodes without any predecessor other than the start stay disconnected
	// unless an edge from an active node reaches them.
	active := map[string]bool{"n0": true}
	for i := 1; i < n; i++ {
		id := fmt.Sprintf("n%d", i)
		for _, p := range preds[id] {
			if active[p] {
				active[id] = true
			}
		}
	}
	// Active predecessors only matter for ordering.
	for id, ps := range preds {
		var keep []string
		for _, p := range ps {
			if active[p] {
				keep = append(keep, p)
			}
		}
		preds[id] = keep
	}
	return b.build(), preds, active
}
