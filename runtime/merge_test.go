package runtime_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// holdCommits is a memory store whose group commits wait, once a commit
// holding an event with data held has begun, until release is closed: the
// run's next buffer stays untaken meanwhile.
type holdCommits struct {
	*memory.Store
	held    any
	entered chan struct{} // closed when the held commit begins
	release chan struct{}
	once    sync.Once
}

func (s *holdCommits) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	for _, b := range bs {
		for _, ev := range b.Events {
			if ev.Data == s.held {
				s.once.Do(func() { close(s.entered) })
				<-s.release
			}
		}
	}
	return s.Store.WriteBatches(ctx, bs)
}

// joinText merges text data while it stays under 4 bytes.
func joinText(next string) func(prev any) (any, bool) {
	return func(prev any) (any, bool) {
		p, ok := prev.(string)
		if !ok || len(p)+len(next) > 4 {
			return nil, false
		}
		return p + next, true
	}
}

// EmitOrMerge folds an event into the node's previous one only while that
// one waits in the run's buffer, untaken by the committer: never into an
// event that is being (or was) committed, never across another event,
// and not when merge refuses. The log and the live subscriber see the
// same merged events, with gap-free seqs; a Joined.Tap sees each part as
// emitted, under the seq of the event it is folded into, in seq order.
func TestEmitOrMergeFoldsOnlyUncommittedEvents(t *testing.T) {
	t.Parallel()
	st := &holdCommits{Store: memory.New(), held: "a", entered: make(chan struct{}), release: make(chan struct{})}
	type emitted struct {
		data   string
		merged bool
	}
	var got []emitted
	reg := runtime.NewRegistry()
	require.NoError(t, reg.Register(runtime.NodeType{Name: "chunks",
		Ports: []runtime.Port{{Name: "out", Direction: runtime.Out, Channel: runtime.ChannelFlow}}, Entry: true,
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				emit := func(t runtime.EventType, s string) error {
					m, err := fc.EmitOrMerge(t, s, joinText(s))
					got = append(got, emitted{s, m})
					return err
				}
				// "a" is taken by the committer, which then waits: "b"
				// starts the next buffer, "c" joins it, "d" would pass 4
				// bytes, "x" is another type, "e" follows "x".
				if err := emit("text", "a"); err != nil {
					return runtime.Result{}, err
				}
				<-st.entered
				for _, e := range []struct {
					t runtime.EventType
					s string
				}{{"text", "b"}, {"text", "c"}, {"text", "dddd"}, {"other", "x"}, {"text", "e"}, {"text", "f"}} {
					if err := emit(e.t, e.s); err != nil {
						return runtime.Result{}, err
					}
				}
				close(st.release)
				return runtime.Result{Output: "done"}, nil
			}), nil
		}}))
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: st, CancelGrace: time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	g := &runtime.Graph{ID: "merge", PlanVersion: 1, Nodes: []runtime.Node{{ID: "n", Type: "chunks"}}}
	var sink collect
	var tapped []runtime.Event // under the run's emit lock
	tap := func(ev runtime.Event) { tapped = append(tapped, ev) }
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "m1", Sink: &sink,
		Joined: runtime.Joined{Tap: tap}})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)

	require.Equal(t, []emitted{{"a", false}, {"b", false}, {"c", true}, {"dddd", false}, {"x", false}, {"e", false}, {"f", true}}, got)
	logged, err := st.Events(context.Background(), "m1", 0, 0)
	require.NoError(t, err)
	var domain []string
	for _, ev := range logged {
		if s, ok := ev.Data.(string); ok {
			domain = append(domain, string(ev.Type)+":"+s)
		}
	}
	require.Equal(t, []string{"text:a", "text:bc", "text:dddd", "other:x", "text:ef"}, domain)
	live := sink.events()
	require.Len(t, live, len(logged), "the subscriber sees the log")
	for i := range logged {
		require.Equal(t, int64(i+1), logged[i].Seq)
		require.Equal(t, logged[i].Seq, live[i].Seq)
		require.Equal(t, logged[i].Type, live[i].Type)
		require.Equal(t, logged[i].Data, live[i].Data)
	}
	checkLifecycle(t, logged)

	// The tap: every event once, a merged one as its parts.
	parts := map[int64]string{}
	var seqs []int64
	for i, ev := range tapped {
		if i > 0 {
			require.GreaterOrEqual(t, ev.Seq, tapped[i-1].Seq, "in seq order")
		}
		if len(seqs) == 0 || seqs[len(seqs)-1] != ev.Seq {
			seqs = append(seqs, ev.Seq)
		}
		if s, ok := ev.Data.(string); ok {
			parts[ev.Seq] += s
		}
	}
	require.Len(t, seqs, len(logged), "each event of the log tapped")
	for i, ev := range logged {
		require.Equal(t, ev.Seq, seqs[i])
		if s, ok := ev.Data.(string); ok {
			require.Equal(t, s, parts[ev.Seq], "seq %d: its parts make the merged event", ev.Seq)
		}
	}
	require.Equal(t, []string{"a", "b", "c", "dddd", "x", "e", "f"}, func() []string {
		var out []string
		for _, ev := range tapped {
			if s, ok := ev.Data.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}(), "each part as emitted")
}

// Without a store a run publishes each event as it is emitted: nothing
// waits, so nothing merges.
func TestEmitOrMergeWithoutStoreEmits(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	var merged []bool
	require.NoError(t, reg.Register(runtime.NodeType{Name: "chunks", Entry: true,
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				for _, s := range []string{"a", "b"} {
					m, err := fc.EmitOrMerge("text", s, joinText(s))
					if err != nil {
						return runtime.Result{}, err
					}
					merged = append(merged, m)
				}
				return runtime.Result{}, nil
			}), nil
		}}))
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, CancelGrace: time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	g := &runtime.Graph{ID: "merge", PlanVersion: 1, Nodes: []runtime.Node{{ID: "n", Type: "chunks"}}}
	var sink collect
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, Sink: &sink})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []bool{false, false}, merged)
	require.Equal(t, []runtime.EventType{runtime.EventNodeStarted, "text", "text", runtime.EventNodeCompleted}, sink.types("n"))
}

// encodeCounted is event data that counts its JSON encodings.
type encodeCounted struct {
	s string
	n *atomic.Int64
}

func (c encodeCounted) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return json.Marshal(c.s)
}

// jsonHoldCommits is holdCommits keeping event data as JSON, as the SQLite
// and Postgres stores do: it reads every event's DataJSON, and closes took
// when a commit holds an event with data last.
type jsonHoldCommits struct {
	*holdCommits
	last any
	took chan struct{}
}

func (jsonHoldCommits) KeepsEventJSON() {}

func (s jsonHoldCommits) WriteBatches(ctx context.Context, bs []runtime.WriteBatch) error {
	for _, b := range bs {
		for i := range b.Events {
			if _, err := b.Events[i].DataJSON(); err != nil {
				return err
			}
			if b.Events[i].Data == s.last {
				close(s.took)
			}
		}
	}
	return s.holdCommits.WriteBatches(ctx, bs)
}

// For a store that keeps JSON, an event's data is encoded when it is
// emitted, and a merged event once more when it can take no more merges
// (another event follows it, or the committer takes it) — not at every
// merge. The store and the subscriber read those bytes without encoding
// again.
func TestMergedEventEncodedOnce(t *testing.T) {
	t.Parallel()
	var encodes atomic.Int64
	first, last := encodeCounted{"a", &encodes}, encodeCounted{"bcde", &encodes}
	st := jsonHoldCommits{&holdCommits{Store: memory.New(), held: first, entered: make(chan struct{}), release: make(chan struct{})},
		last, make(chan struct{})}
	reg := runtime.NewRegistry()
	require.NoError(t, reg.Register(runtime.NodeType{Name: "chunks", Entry: true,
		New: func(*runtime.Node) (runtime.Executor, error) {
			return runtime.ExecutorFunc(func(ctx context.Context, n *runtime.Node, in runtime.Inputs, fc *runtime.FlowContext) (runtime.Result, error) {
				join := func(next string) func(prev any) (any, bool) {
					return func(prev any) (any, bool) { return encodeCounted{prev.(encodeCounted).s + next, &encodes}, true }
				}
				// "a" is taken and its commit held: "b" to "e" merge
				// into one event meanwhile, which the committer takes
				// while it is still the run's last.
				if _, err := fc.EmitOrMerge("text", first, join("a")); err != nil {
					return runtime.Result{}, err
				}
				<-st.entered
				for _, s := range []string{"b", "c", "d", "e"} {
					if _, err := fc.EmitOrMerge("text", encodeCounted{s, &encodes}, join(s)); err != nil {
						return runtime.Result{}, err
					}
				}
				close(st.release)
				<-st.took
				return runtime.Result{}, nil
			}), nil
		}}))
	e, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: st, CancelGrace: time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	g := &runtime.Graph{ID: "merge", PlanVersion: 1, Nodes: []runtime.Node{{ID: "n", Type: "chunks"}}}
	var texts []string
	sink := runtime.SinkFunc(func(ev runtime.Event) {
		b, err := ev.DataJSON()
		require.NoError(t, err)
		if ev.Type == "text" {
			texts = append(texts, string(b))
		}
	})
	res, err := e.Invoke(context.Background(), runtime.RunRequest{Graph: g, RunID: "m1", Sink: sink})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []string{`"a"`, `"bcde"`}, texts)
	// "a" and "b" at their emits, "bcde" when the committer took it.
	require.Equal(t, int64(3), encodes.Load())
}
