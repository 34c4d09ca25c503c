package runtime_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// counted counts its encodings.
type counted struct {
	n    *atomic.Int64
	Text string
}

func (c counted) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return json.Marshal(map[string]string{"text": c.Text})
}

// jsonMemory is the memory store declared a JSONEventStore.
type jsonMemory struct{ *memory.Store }

func (jsonMemory) KeepsEventJSON() {}

// With a store that keeps event data as JSON, the engine encodes each
// event's data once, when it is emitted: DataJSON hands the sink (and the
// store) those bytes, however often it is called, and data changed after
// the emit does not change them. Without one, DataJSON encodes on demand.
func TestEventDataEncodedOnceAtEmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store runtime.Store
		calls int64 // encodings of the emitted data: one per DataJSON call without caching
	}{
		{"json store", jsonMemory{memory.New()}, 1},
		{"other store", memory.New(), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cached := tc.calls == 1
			var n atomic.Int64
			reg := runtime.NewRegistry()
			require.NoError(t, reg.Register(runtime.NodeType{Name: "talk", Entry: true,
				New: func(*runtime.Node) (runtime.Executor, error) {
					return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
						data := &counted{n: &n, Text: "at emit"}
						if err := fc.Emit("said", data); err != nil {
							return runtime.Result{}, err
						}
						if cached {
							// Encoded at emit: a later change is not seen. (Without
							// the cache the sink encodes the value later, so it
							// must not change: that would be a data race.)
							data.Text = "changed after the emit"
						}
						return runtime.Result{}, nil
					}), nil
				}}))
			e, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: tc.store})
			require.NoError(t, err)
			t.Cleanup(e.Close)
			var mu sync.Mutex
			var got [][]byte
			sink := runtime.SinkFunc(func(ev runtime.Event) {
				if ev.Type != "said" {
					return
				}
				for range 2 {
					b, err := ev.DataJSON()
					require.NoError(t, err)
					mu.Lock()
					got = append(got, b)
					mu.Unlock()
				}
			})
			g := &runtime.Graph{ID: "g", PlanVersion: 1, Nodes: []runtime.Node{{ID: "a", Type: "talk"}}}
			res, err := e.Invoke(t.Context(), runtime.RunRequest{Graph: g, Sink: sink})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			require.Len(t, got, 2)
			require.Equal(t, tc.calls, n.Load())
			if tc.calls == 1 {
				require.JSONEq(t, `{"text":"at emit"}`, string(got[0]))
				require.Equal(t, got[0], got[1])
			}
		})
	}
}

// appending encodes itself as its Bytes, which need not be what
// json.Marshal would give for it: that tells the two encodings apart.
type appending struct{ Bytes string }

func (a appending) AppendJSON(b []byte) []byte { return append(b, a.Bytes...) }

// An event's payload that encodes itself (DataAppender) is encoded
// through AppendJSON, not encoding/json, both at emit for a store that
// keeps event data as JSON and on demand for one that does not.
func TestEventDataAppendsItself(t *testing.T) {
	t.Parallel()
	for _, store := range []runtime.Store{jsonMemory{memory.New()}, memory.New()} {
		reg := runtime.NewRegistry()
		require.NoError(t, reg.Register(runtime.NodeType{Name: "talk", Entry: true,
			New: func(*runtime.Node) (runtime.Executor, error) {
				return runtime.ExecutorFunc(func(_ context.Context, _ *runtime.Node, _ runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
					return runtime.Result{}, fc.Emit("said", appending{`{"appended":true}`})
				}), nil
			}}))
		e, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: store})
		require.NoError(t, err)
		t.Cleanup(e.Close)
		var (
			mu     sync.Mutex
			got    []byte
			encErr error
		)
		sink := runtime.SinkFunc(func(ev runtime.Event) {
			if ev.Type == "said" {
				b, err := ev.DataJSON()
				mu.Lock()
				got, encErr = b, err
				mu.Unlock()
			}
		})
		g := &runtime.Graph{ID: "g", PlanVersion: 1, Nodes: []runtime.Node{{ID: "a", Type: "talk"}}}
		res, err := e.Invoke(t.Context(), runtime.RunRequest{Graph: g, Sink: sink})
		require.NoError(t, err)
		require.Equal(t, runtime.RunCompleted, res.Status)
		mu.Lock()
		b, err := got, encErr
		mu.Unlock()
		require.NoError(t, err)
		require.Equal(t, `{"appended":true}`, string(b))
	}
}
