package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// Nodes running at once that each load-or-store the same cache key all
// get the one value the first stored: a run-wide counter or resource is
// never split between nodes.
func TestCacheLoadOrStoreSharesOneValue(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	var mu sync.Mutex
	got := map[*int]int{}
	var loaded int
	ready := make(chan struct{})
	const n = 32
	var arrived sync.WaitGroup
	arrived.Add(n)
	go func() { arrived.Wait(); close(ready) }()
	require.NoError(t, k.reg.Register(runtime.NodeType{Name: "racer",
		Ports: []runtime.Port{{Name: "in", Direction: runtime.In, Channel: runtime.ChannelFlow, Many: true}},
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				arrived.Done()
				<-ready // every racer asks at the same moment
				v, ok := fc.CacheLoadOrStore("shared", new(int))
				mu.Lock()
				got[v.(*int)]++
				if ok {
					loaded++
				}
				mu.Unlock()
				return runtime.Result{}, nil
			}), nil
		}}))
	gb := newGraph("g").node("s", "start")
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		gb = gb.node(id, "racer").flow("s", id)
	}
	e := k.engine(t, nil, func(c *runtime.Config) { c.MaxParallel, c.GlobalMaxParallel = n, n })
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: gb.build(), Input: "x"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Len(t, got, 1, "every node got the same value")
	require.Equal(t, n-1, loaded, "one node stored, the others loaded")
}
