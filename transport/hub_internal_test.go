package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// encodeEvent builds the envelope by hand; it must be the bytes
// encoding/json gives for the event (with the time in UTC, to the
// microsecond), for every field value, or the wire shape would change.
func TestEncodeEventIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 15, 4, 5, 123456789, time.FixedZone("CET", 3600))
	events := []runtime.Event{
		{Seq: 1, RunID: "r1", ChatID: "c1", Type: runtime.EventRunStarted, Time: at,
			Data: runtime.RunStartedData{GraphID: "g", EntryNodeIDs: []string{"a"}, Attrs: map[string]any{"messageId": "m<1>"}}},
		{Seq: 2, RunID: "r1", Type: "node_delta", NodeID: "agent", Attempt: 1, Time: at, Data: nodes.NodeDeltaData{Text: " a & b <c> \u2028 é \"q\" \\"}},
		{Seq: 3, RunID: "r1", Type: runtime.EventNodeCompleted, NodeID: "n", Attempt: 3, Time: at.Truncate(time.Second),
			Data: &runtime.NodeCompletedData{Output: map[string]any{"x": []any{1.5, nil, "y"}}, DurationMs: 0.25}},
		{Seq: 4, RunID: "r<&>", ChatID: "c\"hat", Type: "custom\x01", NodeID: "nöde\u2029", Attempt: -1, Time: time.Time{}},
		{Seq: 5, RunID: "r1", Type: runtime.EventRunCompleted, Time: at, Data: json.RawMessage(` {"durationMs" : 1, "s": "<\u2028>"} `)},
		{Seq: 6, RunID: "r1", Type: "x", Time: at, Data: json.RawMessage(nil)},
		{Seq: math.MaxInt64, RunID: "", Type: "", Time: time.Unix(0, 999).In(time.UTC), Data: "invalid \xff utf-8"},
		{Seq: 8, RunID: "r1", Type: "x", Time: at, Data: map[string]any{}},
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab<>&\"\\\x00\x1f\x7f é\u2028\u2029\U0001F600")
	str := func() string {
		r := make([]rune, rnd.IntN(8))
		for i := range r {
			r[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(r)
	}
	for i := range 500 {
		events = append(events, runtime.Event{Seq: int64(i), RunID: str(), ChatID: str(), Type: runtime.EventType(str()),
			NodeID: str(), Attempt: rnd.IntN(3), Time: at.Add(time.Duration(rnd.Int64N(1e15))), Data: map[string]string{str(): str()}})
	}
	for _, ev := range events {
		f, err := encodeEvent(ev)
		require.NoError(t, err)
		want := ev
		want.Time = want.Time.UTC().Truncate(time.Microsecond)
		b, err := json.Marshal(want)
		require.NoError(t, err)
		require.Equal(t, string(b), string(f.JSON), "event %d", ev.Seq)
		require.Equal(t, ev.Seq, f.Seq)
		require.Equal(t, ev.Type, f.Type)
	}
	// A delta's frame is made once, with little room to spare: the hub
	// keeps it while its run streams.
	delta := runtime.Event{Seq: 123, RunID: "r_0123456789abcdefghij", ChatID: "c_0123456789abcdefghij", Type: "node_delta",
		NodeID: "agent", Attempt: 1, Time: at, Data: json.RawMessage(`{"text":" word"}`)}
	f, err := encodeEvent(delta)
	require.NoError(t, err)
	require.LessOrEqual(t, cap(f.JSON), len(f.JSON)+48, "%d bytes kept for %d", cap(f.JSON), len(f.JSON))
	// What encoding/json refuses is refused.
	for _, ev := range []runtime.Event{
		{Seq: 1, RunID: "r", Type: "x", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Seq: 1, RunID: "r", Type: "x", Time: at, Data: math.Inf(1)},
		{Seq: 1, RunID: "r", Type: "x", Time: at, Data: json.RawMessage(`{"a":`)},
	} {
		_, err := encodeEvent(ev)
		require.Error(t, err)
	}
}

// While a group commit is published, its subscribers are not woken; they
// are all woken when the group ends, with every frame queued, and so is a
// subscriber that got a frame from outside the group meanwhile.
func TestHubWakesAGroupsSubscribersWhenItEnds(t *testing.T) {
	t.Parallel()
	h := newHub(0)
	ids := []string{"r1", "r2", "r3"}
	subs := map[string]*subscription{}
	for _, id := range ids {
		h.open(id, 0)
		sub, _, _ := h.subscribe(id, 0)
		subs[id] = sub
	}
	woken := func(sub *subscription) bool {
		select {
		case <-sub.Ready():
			return true
		default:
			return false
		}
	}
	h.group(func() {
		for seq := int64(1); seq <= 2; seq++ {
			for _, id := range ids[:2] {
				h.publish(id, frame{Seq: seq, Type: "node_delta"})
			}
		}
		// Another goroutine's publish (a run in exit mode) waits with them.
		done := make(chan struct{})
		go func() { defer close(done); h.publish("r3", frame{Seq: 1, Type: "node_delta"}) }()
		<-done
		for _, id := range ids {
			require.False(t, woken(subs[id]), "%s woken inside the group", id)
		}
		h.gmu.Lock()
		require.Len(t, h.asleep, len(ids), "each subscription waits for its wake once")
		h.gmu.Unlock()
	})
	for _, id := range ids {
		require.True(t, woken(subs[id]), "%s not woken after the group", id)
		frames, open := subs[id].Take(nil)
		require.True(t, open)
		want := 2
		if id == "r3" {
			want = 1
		}
		require.Len(t, frames, want, id)
	}
	// Outside a group a publish wakes at once.
	h.publish("r1", frame{Seq: 3, Type: "node_delta"})
	require.True(t, woken(subs["r1"]))
	_, _ = subs["r1"].Take(nil)

	// Of two overlapping groups, the first to end wakes what waits: a
	// wake never waits for groups that keep overlapping.
	inner := make(chan struct{})
	outerDone := make(chan struct{})
	go h.group(func() {
		h.publish("r2", frame{Seq: 3, Type: "node_delta"})
		close(inner)
		<-outerDone
	})
	<-inner
	h.group(func() { h.publish("r1", frame{Seq: 4, Type: "node_delta"}) })
	require.True(t, woken(subs["r1"]), "r1 waits for the group still publishing")
	require.True(t, woken(subs["r2"]), "r2 waits for the group still publishing")
	close(outerDone)
}

// A live topic keeps at most maxBacklog of its run's latest frames, and
// a subscriber from the start gets the kept ones with the seq below which
// the store has the rest.
func TestHubKeepsABoundedBacklog(t *testing.T) {
	t.Parallel()
	h := newHub(0)
	h.open("r1", 0)
	const n = 5*maxBacklog + 7
	for seq := int64(1); seq <= n; seq++ {
		h.publish("r1", frame{Seq: seq, Type: "node_delta", JSON: []byte(`{}`)})
		sh := h.shard("r1")
		sh.mu.Lock()
		kept := len(sh.topics["r1"].frames)
		sh.mu.Unlock()
		require.LessOrEqual(t, kept, maxBacklog)
	}
	sub, backlog, base := h.subscribe("r1", 0)
	defer sub.Close()
	require.Positive(t, base)
	require.GreaterOrEqual(t, len(backlog), maxBacklog/2)
	require.Len(t, backlog, int(n-base))
	for i, f := range backlog {
		require.Equal(t, base+1+int64(i), f.Seq)
	}
}

// A live topic keeps at most maxBacklogBytes of its run's latest frames
// too (but always the last): large frames are kept a few at a time, and
// a subscriber gets the kept ones with the seq below which the store has
// the rest.
func TestHubBoundsItsBacklogInBytes(t *testing.T) {
	t.Parallel()
	h := newHub(0)
	h.open("r1", 0)
	big := make([]byte, maxBacklogBytes/5)
	kept := func() (n, bytes int) {
		sh := h.shard("r1")
		sh.mu.Lock()
		defer sh.mu.Unlock()
		tp := sh.topics["r1"]
		for _, f := range tp.frames {
			bytes += len(f.JSON)
		}
		require.Equal(t, bytes, tp.bytes, "the topic's count of its bytes")
		return len(tp.frames), bytes
	}
	for seq := int64(1); seq <= 40; seq++ {
		h.publish("r1", frame{Seq: seq, Type: "node_completed", JSON: big})
		n, bytes := kept()
		require.LessOrEqual(t, bytes, maxBacklogBytes)
		require.Positive(t, n)
	}
	sub, backlog, base := h.subscribe("r1", 0)
	require.Len(t, backlog, int(40-base))
	require.Equal(t, int64(40), backlog[len(backlog)-1].Seq)
	require.GreaterOrEqual(t, len(backlog), 2)
	sub.Close()

	// A frame larger than the bound is kept alone, until the next.
	h.publish("r1", frame{Seq: 41, Type: "node_completed", JSON: make([]byte, 2*maxBacklogBytes)})
	n, _ := kept()
	require.Equal(t, 1, n)
	h.publish("r1", frame{Seq: 42, Type: "node_delta", JSON: []byte(`{}`)})
	n, bytes := kept()
	require.Equal(t, 1, n)
	require.Equal(t, 2, bytes)
	_, backlog, base = h.subscribe("r1", 0)
	require.Equal(t, int64(41), base)
	require.Len(t, backlog, 1)
}

// pushSender is a queuer that records how each frame came: queued by the
// publisher of a group (queue) or sent by the forwarder (send). queue
// refuses the seqs in full, as a connection with a full queue does.
type pushSender struct {
	mu      sync.Mutex
	queued  []int64
	sent    []int64
	started int // senders started, by startSender or sendNow
	now     int // of those, by sendNow
	full    map[int64]bool
}

func (p *pushSender) send(f frame) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, f.Seq)
	return nil
}

func (*pushSender) flush() error { return nil }

func (p *pushSender) queue(f frame) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.full[f.Seq] {
		return false, errQueueFull
	}
	p.queued = append(p.queued, f.Seq)
	return len(p.queued) == 1, nil
}

func (p *pushSender) startSender() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started++
}

func (p *pushSender) sendNow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started++
	p.now++
}

func (p *pushSender) seen() (queued, sent []int64, started int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.queued), slices.Clone(p.sent), p.started
}

// waitParked waits until sub's forwarder waits for frames (parked), when
// the publisher of a group may queue them itself.
func waitParked(t *testing.T, sub *subscription) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !sub.dmu.TryLock() {
			return false
		}
		defer sub.dmu.Unlock()
		return sub.parked
	}, 5*time.Second, time.Millisecond, "the forwarder never waited")
}

// While a WebSocket forwarder waits, the publisher of a group commit
// queues the frames on the connection itself and starts the connection's
// sender once the group ends; a frame the connection cannot queue, and
// the terminal event, go back to the forwarder, which sends them in
// order and ends the follow.
func TestGroupPublisherQueuesTheFramesOfAWaitingForwarder(t *testing.T) {
	t.Parallel()
	s := &Server{hub: newHub(0)}
	h := s.hub
	h.open("r1", 0)
	sub, backlog, _ := h.subscribe("r1", 0)
	require.Empty(t, backlog)
	out := &pushSender{full: map[int64]bool{4: true}}
	after := int64(0)
	type result struct {
		ended bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		ended, err := s.forward(context.Background(), sub, nil, &after, out, nil, nil)
		done <- result{ended, err}
	}()
	waitParked(t, sub)

	h.group(func() {
		h.publish("r1", frame{Seq: 1, Type: "node_delta"})
		h.publish("r1", frame{Seq: 2, Type: "node_delta"})
		_, _, started := out.seen()
		require.Zero(t, started, "the sender started inside the group")
	})
	queued, sent, started := out.seen()
	require.Equal(t, []int64{1, 2}, queued, "the publisher queues the frames")
	require.Empty(t, sent)
	require.Equal(t, 1, started, "one sender, started when the group ends")
	require.Empty(t, sub.notify, "the forwarder was woken")

	// seq 4 does not fit the queue: it and what follows go back to the
	// forwarder, in order, and the terminal event ends the follow.
	h.group(func() {
		for seq := int64(3); seq <= 5; seq++ {
			h.publish("r1", frame{Seq: seq, Type: "node_delta"})
		}
		h.publish("r1", frame{Seq: 6, Type: runtime.EventRunCompleted})
	})
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.True(t, r.ended, "the terminal event ends the follow")
	case <-time.After(5 * time.Second):
		t.Fatal("the forwarder did not end")
	}
	queued, sent, _ = out.seen()
	require.Equal(t, []int64{1, 2, 3}, queued)
	require.Equal(t, []int64{4, 5, 6}, sent)
	require.Equal(t, int64(6), after)
}

// A group commit with frames for at most writeNowSenders connections is
// written by its publisher (sendNow); one for more starts a sender for
// each connection (startSender).
func TestGroupPublisherWritesFewConnectionsItself(t *testing.T) {
	t.Parallel()
	for _, conns := range []int{1, writeNowSenders, writeNowSenders + 1} {
		t.Run(fmt.Sprint(conns), func(t *testing.T) {
			s := &Server{hub: newHub(0)}
			h := s.hub
			outs := make([]*pushSender, conns)
			for i := range outs {
				runID := fmt.Sprint("r", i)
				h.open(runID, 0)
				sub, _, _ := h.subscribe(runID, 0)
				outs[i] = &pushSender{}
				after := int64(0)
				go func() { _, _ = s.forward(t.Context(), sub, nil, &after, outs[i], nil, nil) }()
				waitParked(t, sub)
			}
			h.group(func() {
				for i := range outs {
					h.publish(fmt.Sprint("r", i), frame{Seq: 1, Type: "node_delta"})
				}
			})
			for _, out := range outs {
				out.mu.Lock()
				started, now := out.started, out.now
				out.mu.Unlock()
				require.Equal(t, 1, started, "one sender per connection")
				require.Equal(t, conns <= writeNowSenders, now == 1, "written by the publisher itself")
			}
		})
	}
}

// appendEventTime gives what time.RFC3339Nano gives for the times
// encodeEvent formats (UTC, whole microseconds, years 0 to 9999), for
// events in the second it formatted last and in others.
func TestAppendEventTimeIsRFC3339Nano(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	lo, hi := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	base := time.Now().UTC().Truncate(time.Microsecond)
	for i := range 200000 {
		var at time.Time
		switch i % 4 {
		case 0: // any second
			at = time.Unix(lo+rng.Int64N(hi-lo+1), 1000*rng.Int64N(1_000_000)).UTC()
		case 1: // whole seconds and round fractions
			at = time.Unix(lo+rng.Int64N(hi-lo+1), []int64{0, 100_000_000, 120_000_000, 1000, 10_000}[rng.IntN(5)]).UTC()
		default: // the same few seconds, as a server's events are
			at = base.Add(time.Duration(rng.Int64N(3_000_000)) * time.Microsecond)
		}
		require.Equal(t, at.Format(time.RFC3339Nano), string(appendEventTime(nil, at)), "%v", at)
	}
}
