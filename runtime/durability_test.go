package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// Every mode ends with the same log in the store as the live stream.
func TestDurabilityModesKeepTheLog(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Durability{runtime.DurabilitySync, runtime.DurabilityBatched, runtime.DurabilityExit} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem, func(c *runtime.Config) { c.Durability = mode })
			g := newGraph("d").node("s", "start").node("a", "step").node("b", "step", `{"fail":1,"retry":{"maxAttempts":2}}`).
				node("c", "step").flow("s", "a").flow("s", "b").flow("a", "c").flow("b", "c").build()
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var c collect
					id := fmt.Sprintf("%s-%d", mode, i)
					res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: id, Sink: &c})
					require.NoError(t, err)
					require.Equal(t, runtime.RunCompleted, res.Status)
					stored, err := mem.Events(context.Background(), id, 0, 0)
					require.NoError(t, err)
					require.Equal(t, c.events(), stored)
					cps, err := mem.Checkpoints(context.Background(), id)
					require.NoError(t, err)
					require.Len(t, cps, 4)
					for _, cp := range cps {
						require.Equal(t, runtime.NodeSucceeded, cp.Status, cp.NodeID)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// exit mode writes nothing while the run is in flight; sync mode has the
// running checkpoint of a node on disk before its handler runs.
func TestDurabilityFlushPoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       runtime.Durability
		wantDuring bool
	}{{runtime.DurabilitySync, true}, {runtime.DurabilityExit, false}, {runtime.DurabilityBatched, true}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			k := newKit(t)
			mem := newMem()
			e := k.engine(t, mem)
			g := newGraph("fp").node("s", "start").node("a", "step", `{"effect":"external"}`).flow("s", "a").build()
			started, release := k.hold("a")
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "x", Options: runtime.RunOptions{Durability: tc.mode}})
				require.NoError(t, err)
				require.Equal(t, runtime.RunCompleted, res.Status)
			}()
			<-started
			cps, err := mem.Checkpoints(context.Background(), "x")
			require.NoError(t, err)
			evs, err := mem.Events(context.Background(), "x", 0, 0)
			require.NoError(t, err)
			if tc.wantDuring {
				// The external node's running checkpoint and started event are durable before it runs.
				var running bool
				for _, cp := range cps {
					running = running || (cp.NodeID == "a" && cp.Status == runtime.NodeRunning)
				}
				require.True(t, running, "%+v", cps)
				require.Equal(t, runtime.EventNodeStarted, evs[len(evs)-1].Type)
			} else {
				require.Empty(t, cps)
				require.Empty(t, evs)
			}
			release()
			<-done
			evs, err = mem.Events(context.Background(), "x", 0, 0)
			require.NoError(t, err)
			checkLifecycle(t, evs)
		})
	}
}

func TestUnknownDurability(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	_, err := runtime.NewEngine(runtime.Config{Registry: k.reg, Durability: "eventually"})
	require.Error(t, err)
	e := k.engine(t, newMem())
	_, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: newGraph("u").node("s", "start").build(),
		Options: runtime.RunOptions{Durability: "whenever"}})
	require.Error(t, err)
}
