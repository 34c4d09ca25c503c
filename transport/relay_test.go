package transport_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
	"chatgraph/transport"
)

// gappyRelay is a Relay whose subscribers get the events a test hands it,
// as another process's relay would deliver them.
type gappyRelay struct {
	subs chan chan transport.RelayEvent
}

func (*gappyRelay) Publish(string, int64, string, []byte) {}

func (r *gappyRelay) Subscribe(ctx context.Context, runID string) (<-chan transport.RelayEvent, func(), error) {
	ch := make(chan transport.RelayEvent, 1<<15)
	r.subs <- ch
	return ch, func() {}, nil
}

// A follower of a run that another process executes gets the run's
// events in order, each once, when the relay skips one and then delivers
// far more than a follower holds back for it: the held-back events that
// do not fit are read from the log with the missing one.
func TestRelayFollowerCatchesUpPastWhatItHoldsBack(t *testing.T) {
	t.Parallel()
	relay := &gappyRelay{subs: make(chan chan transport.RelayEvent, 1)}
	e := newEnv(t, func(c *transportConfig) { c.Relay = relay })
	ctx := t.Context()
	const runID, n = "run-elsewhere", 20000 // n: well over what a follower holds back
	now := time.Now()
	require.NoError(t, e.store.CreateRun(ctx, &runtime.RunRecord{ID: runID, RootID: runID, GraphID: "g",
		Status: runtime.RunRunning, CreatedAt: now, UpdatedAt: now}))
	event := func(seq int64) runtime.Event {
		typ := runtime.EventType("node_delta")
		if seq == n {
			typ = runtime.EventRunCompleted
		}
		return runtime.Event{Seq: seq, RunID: runID, Type: typ, NodeID: "agent", Attempt: 1,
			Time: now.UTC().Truncate(time.Microsecond), Data: json.RawMessage(`{"text":" w"}`)}
	}
	stream := e.openSSE(ctx, "GET", "/api/v1/runs/"+runID+"/events", nil, nil)
	var ch chan transport.RelayEvent
	select {
	case ch = <-relay.subs:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not subscribe to the relay")
	}
	// Seq 1 never comes through the relay; everything after it does, and
	// the follower takes it all while the log (which it polls) has none.
	for seq := int64(2); seq <= n; seq++ {
		ev := event(seq)
		raw, err := json.Marshal(ev)
		require.NoError(t, err)
		ch <- transport.RelayEvent{Seq: seq, Type: string(ev.Type), Envelope: raw}
	}
	require.Eventually(t, func() bool { return len(ch) == 0 }, 10*time.Second, time.Millisecond)
	// Then the log has the run, ended, as the process running it wrote it.
	var evs []runtime.Event
	for seq := int64(1); seq <= n; seq++ {
		evs = append(evs, event(seq))
	}
	require.NoError(t, e.store.AppendEvents(ctx, runID, 0, evs))
	rec, err := e.store.GetRun(ctx, runID)
	require.NoError(t, err)
	rec.Status = runtime.RunCompleted
	require.NoError(t, e.store.UpdateRun(ctx, rec))

	got := stream.all(t)
	require.Len(t, got, n)
	requireGapFree(t, got, 0)
	require.Equal(t, string(runtime.EventRunCompleted), got[n-1].Type)
}
