package transport

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"chatgraph/runtime"
)

// frame is one event, encoded once for every subscriber.
type frame struct {
	Seq  int64
	Type runtime.EventType
	JSON []byte // the envelope
}

// envelopeBytes is room for an envelope's bytes besides its strings and
// data: the keys, quotes and punctuation (109 bytes with every field),
// a seq and an attempt of a few digits each. Made too small, the append
// that overflows it reallocates the frame at twice the size, and a live
// run's kept frames (maxBacklog) hold that room for as long as it runs.
const envelopeBytes = 128

// encodeEvent encodes the envelope: the bytes json.Marshal gives for the
// event, built by hand around the data the engine encoded once at emit
// (runtime.Event.DataJSON), so the store row, the hub's frame and every
// subscriber's SSE or WebSocket frame share one encoding. Times are UTC
// with microseconds, as the durable stores keep them, so a live event and
// its replay from the log are the same bytes.
func encodeEvent(ev runtime.Event) (frame, error) {
	ev.Time = ev.Time.UTC().Truncate(time.Microsecond)
	data, err := ev.DataJSON()
	if err != nil {
		return frame{}, err
	}
	if y := ev.Time.Year(); y < 0 || y > 9999 {
		_, err := json.Marshal(ev) // encoding/json refuses these times
		return frame{}, err
	}
	b := make([]byte, 0, envelopeBytes+len(ev.RunID)+len(ev.ChatID)+len(ev.Type)+len(ev.NodeID)+len(data))
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"runId":`...)
	b = runtime.AppendJSONString(b, ev.RunID)
	if ev.ChatID != "" {
		b = append(b, `,"chatId":`...)
		b = runtime.AppendJSONString(b, ev.ChatID)
	}
	b = append(b, `,"type":`...)
	b = runtime.AppendJSONString(b, string(ev.Type))
	if ev.NodeID != "" {
		b = append(b, `,"nodeId":`...)
		b = runtime.AppendJSONString(b, ev.NodeID)
	}
	if ev.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(ev.Attempt), 10)
	}
	b = append(b, `,"time":"`...)
	b = appendEventTime(b, ev.Time)
	b = append(b, '"')
	if ev.Data != nil {
		b = append(b, `,"data":`...)
		b = append(b, data...)
	}
	b = append(b, '}')
	return frame{Seq: ev.Seq, Type: ev.Type, JSON: b}, nil
}

// appendEventTime appends t — UTC, whole microseconds, years 0 to 9999
// (encodeEvent) — as t.AppendFormat(b, time.RFC3339Nano) does: the date
// and time to the second, then the fraction without its trailing zeros
// (none when it is zero), then Z. The part up to the second is the same
// for every event of that second, and a server publishes thousands of
// events a second: it is formatted once a second (lastSecond) instead of
// through the time package's calendar for each event.
func appendEventTime(b []byte, t time.Time) []byte {
	sec := t.Unix()
	p := lastSecond.Load()
	if p == nil || p.unix != sec {
		p = &secondText{unix: sec}
		p.text = t.Truncate(time.Second).AppendFormat(nil, "2006-01-02T15:04:05")
		lastSecond.Store(p)
	}
	b = append(b, p.text...)
	if us := t.Nanosecond() / 1000; us != 0 {
		var frac [7]byte
		frac[0] = '.'
		for i := 6; i > 0; i-- {
			frac[i] = byte('0' + us%10)
			us /= 10
		}
		n := 7
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, 'Z')
}

// secondText is a second's formatted date and time (appendEventTime).
type secondText struct {
	unix int64
	text []byte
}

// lastSecond is the second appendEventTime formatted last.
var lastSecond atomic.Pointer[secondText]

// maxBacklog and maxBacklogBytes bound what a live topic keeps: the
// run's latest frames, at most maxBacklog of them and maxBacklogBytes of
// envelopes (but always its last frame); once past either it drops its
// oldest down to half of both. A run streaming small deltas keeps a few
// hundred of them, one whose nodes emit large outputs a few of those: a
// thousand live runs hold tens of MiB, whatever their nodes emit (before
// the byte bound, a run kept up to 1,024 frames of any size). A
// subscriber that wants older frames reads them from the store, which
// holds every frame the hub ever had (commit-then-publish).
const (
	maxBacklog      = 1024
	maxBacklogBytes = 64 << 10
)

// hub fans the events of the runs this process executes out to their
// subscribers. The engine hands it each event once its store holds it
// (commit-then-publish); a topic keeps the frames of its run (up to
// maxBacklog), so a subscriber gets the ones it missed from there and the
// older ones from the store. Publishing never blocks: each subscriber has
// a bounded queue, and one that is full is dropped (its subscription ends
// with the frames it had) and resubscribes after its last seq. A topic
// exists from the moment the runner mints a run id until the run has
// ended and its events are stored. Safe for concurrent use.
type hub struct {
	queue  int
	shards [hubShards]hubShard

	// While a group commit is published (group), subscriptions that get
	// frames are woken once it has been, all together, so that each
	// WebSocket connection writes its frames of the commit at once.
	gmu    sync.Mutex
	groups int             // groups being published
	asleep []*subscription // to wake when a group ends
	spare  []*subscription // the last woken list, emptied, for the next
}

// hubShards spreads the topics over locks, so runs publish in parallel.
const hubShards = 64

type hubShard struct {
	mu     sync.Mutex
	topics map[string]*topic
}

func (h *hub) shard(runID string) *hubShard {
	x := uint32(2166136261) // FNV-1a
	for i := 0; i < len(runID); i++ {
		x = (x ^ uint32(runID[i])) * 16777619
	}
	return &h.shards[x%hubShards]
}

type topic struct {
	subs   map[*subscription]struct{}
	frames []frame // seqs base+1 ... base+len(frames)
	bytes  int     // the frames' envelopes, in all
	base   int64   // every seq <= base is in the store
}

// subscription receives one run's live events in seq order: the
// publisher appends them to its queue (under the shard's lock) and wakes
// the one goroutine that takes them. The queue grows as needed, up to the
// hub's limit, so an idle subscription holds no buffer.
type subscription struct {
	sh     *hubShard
	runID  string
	notify chan struct{} // cap 1: frames are queued or the subscription ended
	q      []frame       // under sh.mu
	closed bool          // under sh.mu: ended (the run's events are all stored, or dropped, or Close)

	// The publisher of a group commit may deliver the frames itself
	// (push) instead of waking the goroutine that takes them, while that
	// goroutine waits (parked): one goroutine hand-off fewer per event,
	// and a WebSocket connection's frames of the commit are all queued
	// before its sender starts. dmu is held by whoever delivers.
	dmu    sync.Mutex
	parked bool               // under dmu
	push   func(*pushed) bool // under dmu; false: the goroutine must go on (woken)
}

// pushed is what the pushes of one group leave to do once every
// subscription woken by the group was served: the senders of the
// connections they queued frames on, to start.
type pushed []queuer

func newHub(queue int) *hub {
	if queue <= 0 {
		queue = 1024
	}
	h := &hub{queue: queue}
	for i := range h.shards {
		h.shards[i].topics = map[string]*topic{}
	}
	return h
}

// open creates the topic of a run about to start or continue; the events
// up to seq base are in the store already.
func (h *hub) open(runID string, base int64) {
	sh := h.shard(runID)
	sh.mu.Lock()
	if sh.topics[runID] == nil {
		sh.topics[runID] = &topic{subs: map[*subscription]struct{}{}, base: base}
	}
	sh.mu.Unlock()
}

// close ends a topic once its run's events are all stored, and with it
// its subscriptions.
func (h *hub) close(runID string) {
	sh := h.shard(runID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.topics[runID]
	if t == nil {
		return
	}
	delete(sh.topics, runID)
	for sub := range t.subs {
		sub.closed = true
		sub.wake()
	}
}

// live reports whether runID has an open topic here.
func (h *hub) live(runID string) bool {
	sh := h.shard(runID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.topics[runID] != nil
}

// subscribe returns a subscription to runID's future events with the
// kept frames after seq `after` (backlog) and the seq up to which the
// store holds the rest (base); nil when the run has no topic here
// (finished, or executing in another process).
func (h *hub) subscribe(runID string, after int64) (sub *subscription, backlog []frame, base int64) {
	sh := h.shard(runID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.topics[runID]
	if t == nil {
		return nil, nil, 0
	}
	sub = &subscription{sh: sh, runID: runID, notify: make(chan struct{}, 1)}
	t.subs[sub] = struct{}{}
	if i := after - t.base; i < int64(len(t.frames)) {
		if i < 0 {
			i = 0
		}
		backlog = append([]frame(nil), t.frames[i:]...)
	}
	return sub, backlog, t.base
}

// publish keeps f and hands it to every subscriber of runID without
// blocking.
func (h *hub) publish(runID string, f frame) {
	sh := h.shard(runID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.topics[runID]
	if t == nil {
		return
	}
	switch next := t.base + int64(len(t.frames)) + 1; {
	case f.Seq < next:
		return // a duplicate
	case f.Seq > next && len(t.frames) == 0:
		t.base = f.Seq - 1 // the first event of a continued log
	case f.Seq > next:
		t.frames, t.bytes, t.base = nil, 0, f.Seq-1 // cannot happen; the store has the gap
	}
	t.frames = append(t.frames, f)
	t.bytes += len(f.JSON)
	if len(t.frames) > maxBacklog || t.bytes > maxBacklogBytes {
		n := 0
		for n < len(t.frames)-1 && (len(t.frames)-n > maxBacklog/2 || t.bytes > maxBacklogBytes/2) {
			t.bytes -= len(t.frames[n].JSON)
			n++
		}
		t.frames = append([]frame(nil), t.frames[n:]...)
		t.base += int64(n)
	}
	for sub := range t.subs {
		if len(sub.q) >= h.queue {
			// Too slow: it catches up from the kept frames and the log.
			delete(t.subs, sub)
			sub.closed = true
			sub.wake()
		} else {
			// A queue that was not empty has its wake coming already.
			if sub.q = append(sub.q, f); len(sub.q) == 1 {
				h.wake(sub)
			}
		}
	}
}

// wake wakes sub, or, while a group is published, once it has been.
// (under sub's shard lock)
func (h *hub) wake(sub *subscription) {
	h.gmu.Lock()
	if h.groups > 0 {
		h.asleep = append(h.asleep, sub)
		h.gmu.Unlock()
		return
	}
	h.gmu.Unlock()
	sub.wake()
}

// writeNowSenders: a group commit whose frames go to at most this many
// WebSocket connections is written by its publisher itself, as far as
// each socket takes the frames at once (wsConn.sendNow): a delta then
// reaches its socket without waiting for a sender goroutine to get a
// processor, which on two busy cores is a wait of about half a
// millisecond at the median. A commit for more connections starts a
// sender for each: one goroutine writing them all would hold the next
// commits' publishing, where the senders write in parallel
// (docs/benchmarks.md, "The publisher writing a connection's frames
// itself").
const writeNowSenders = 4

// group runs publish, a group commit's publishing, and wakes the
// subscriptions that got frames meanwhile when it returns. Events
// published meanwhile by others (a run in exit mode, the other durability
// mode's committer) wait with them, for at most this group's publishing:
// whichever group ends first wakes every subscription waiting, so no
// wake waits for groups that keep overlapping.
func (h *hub) group(publish func()) {
	h.gmu.Lock()
	h.groups++
	h.gmu.Unlock()
	defer func() {
		h.gmu.Lock()
		h.groups--
		subs := h.asleep
		h.asleep, h.spare = h.spare, nil
		h.gmu.Unlock()
		var senders pushed
		for _, sub := range subs {
			sub.wakeGroup(&senders)
		}
		writeNow := len(senders) <= writeNowSenders
		for _, q := range senders {
			if writeNow {
				q.sendNow()
			} else {
				q.startSender()
			}
		}
		clear(subs)
		h.gmu.Lock()
		if h.spare == nil {
			h.spare = subs[:0]
		}
		h.gmu.Unlock()
	}()
	publish()
}

// wake tells the subscription's taker that something changed. Safe for
// concurrent use.
func (s *subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// wakeGroup delivers sub's frames with its push, or, when the goroutine
// taking them is not waiting (or its push hands back), wakes it.
func (s *subscription) wakeGroup(p *pushed) {
	if s.dmu.TryLock() {
		if s.parked && s.push != nil {
			if s.push(p) {
				s.dmu.Unlock()
				return
			}
			s.parked = false // the goroutine goes on from here
		}
		s.dmu.Unlock()
	}
	s.wake()
}

// Ready is signalled when frames are queued or the subscription ended;
// then call Take.
func (s *subscription) Ready() <-chan struct{} { return s.notify }

// Take returns the frames queued since the last Take, in seq order, and
// whether the subscription is still open; once it is not (the run's
// events are all stored, or the subscriber was too slow and was dropped),
// resubscribe after the last seq delivered. buf, when not nil, is the
// slice a previous Take returned, done with: it is reused for the queue.
// One goroutine takes from a subscription.
func (s *subscription) Take(buf []frame) (frames []frame, open bool) {
	clear(buf)
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	frames, s.q = s.q, buf[:0]
	return frames, !s.closed
}

// Close unsubscribes. Idempotent; nil-safe.
func (s *subscription) Close() {
	if s == nil {
		return
	}
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if t := s.sh.topics[s.runID]; t != nil {
		delete(t.subs, s)
	}
	s.q = nil
}
