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

// mergedReference is how run_started and node_started payloads were
// encoded before they were written by hand: the declared fields through
// encoding/json, decoded into a map, the extra members whose keys the
// declared fields left free added, and the map encoded.
func mergedReference(t *testing.T, declared any, extra map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(declared)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for k, x := range extra {
		if _, taken := m[k]; !taken {
			m[k] = x
		}
	}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	m = nil
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// The payloads that merge caller members into their own encode as the
// old three-pass merge did: every declared member that is set, the
// caller's members whose keys they leave free (declared ones win), and
// strings escaped as encoding/json escapes them.
func TestMergedPayloadsEncodeAsTheMerge(t *testing.T) {
	t.Parallel()
	// The payloads' types without their MarshalJSON: what encoding/json
	// gives for the declared fields.
	type plainRun runtime.RunStartedData
	type plainNode runtime.NodeStartedData
	attrs := []map[string]any{
		nil,
		{},
		{"messageId": "m_1", "userMessageId": "m_0"},
		{"kind": "shadowed?", "graphId": "never", "resumed": "free unless resumed", "parentRunId": 7},
		{"text": "<b>&\"quoted\"\n\u00e9\xff</b>", "n": 2.5, "list": []any{"a", 1.0, nil}, "obj": map[string]any{"z": true, "a": "x"}},
	}
	runs := []runtime.RunStartedData{
		{GraphID: "g", PlanVersion: 3, EntryNodeIDs: []string{"start"}, ActiveNodeIDs: []string{"start", "a", "out"}},
		{Kind: "stream_chat", GraphID: "g<&>", PlanVersion: 1 << 40, ActiveNodeIDs: []string{}, ParentRunID: "r_1", Resumed: true},
		{Kind: "é", EntryNodeIDs: []string{"\"q\""}},
	}
	for i, d := range runs {
		for j, a := range attrs {
			d.Attrs = a
			b, err := json.Marshal(d)
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(b, &got), "%s", b)
			require.Equal(t, mergedReference(t, plainRun(d), a),
				got, "run %d, attrs %d: %s", i, j, b)
			require.True(t, json.Valid(b))
		}
	}
	for _, replayed := range []bool{false, true} {
		for j, a := range attrs {
			d := runtime.NodeStartedData{Replayed: replayed, Details: a}
			b, err := json.Marshal(d)
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(b, &got), "%s", b)
			require.Equal(t, mergedReference(t, plainNode(d), a), got, "replayed %v, details %d: %s", replayed, j, b)
		}
	}
	// A member that cannot be encoded fails the payload, as before.
	_, err := json.Marshal(runtime.RunStartedData{GraphID: "g", Attrs: map[string]any{"bad": make(chan int)}})
	require.Error(t, err)
}
