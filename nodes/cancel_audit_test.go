package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// Every built-in executor that can take long stops when its run is
// cancelled (the template's loops have their own test:
// template_security_test.go): the run ends run_cancelled with the executor returned (none
// abandoned after the cancel grace), not merely reported cancelled while
// it keeps working.
func TestCancelStopsEveryLongExecutor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, node string
		g          *runtime.Graph
	}{
		{"agent streaming slowly", "a", newGraph("agent").node("s", nodes.TypeChatStart).
			node("a", nodes.TypeAgent, `{"tokenDelayMs":10000}`).node("o", nodes.TypeChatOutput).
			flow("s", "a").flow("a", "o").build()},
		{"delay of an hour", "d", newGraph("delay").node("s", nodes.TypeChatStart).
			node("d", nodes.TypeDelay, `{"ms":3600000}`).node("o", nodes.TypeChatOutput).
			flow("s", "d").flow("d", "o").build()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var (
				once      sync.Once
				mu        sync.Mutex
				cancelled time.Time
			)
			watch := func(r *runtime.RunRequest) {
				inner := r.Sink
				r.Sink = runtime.SinkFunc(func(ev runtime.Event) {
					inner.Emit(ev)
					if ev.Type == runtime.EventNodeStarted && ev.NodeID == tc.node {
						once.Do(func() {
							// Long enough for the executor to be under way.
							time.AfterFunc(50*time.Millisecond, func() {
								mu.Lock()
								cancelled = time.Now()
								mu.Unlock()
								cancel(errors.New("stop pressed"))
							})
						})
					}
				})
			}
			res, s := h.run(t, ctx, tc.g, nodes.ChatInput{Content: strings.Repeat("w ", 2000)}, watch)
			mu.Lock()
			took := time.Since(cancelled)
			mu.Unlock()
			require.Equal(t, runtime.RunCancelled, res.Status)
			for _, ev := range s.of(runtime.EventNodeCancelled, tc.node) {
				b, err := json.Marshal(ev.Data)
				require.NoError(t, err)
				require.NotContains(t, string(b), "did not stop", "the executor was abandoned")
			}
			require.Zero(t, h.eng.AbandonedExecutors(), "an executor still running after its run ended")
			t.Logf("run ended %v after the cancel", took)
		})
	}
}
