package transport

import (
	"encoding/json"
	"sync"
	"time"

	"chatgraph/runtime"
)

// frame is one event, encoded once for every subscriber.
type frame struct {
	Seq  int64
	Type runtime.EventType
	JSON []byte // the envelope
}

// encodeEvent encodes the envelope. Times are UTC with microseconds, as
// the durable stores keep them, so a live event and its replay from the
// log are the same bytes.
func encodeEvent(ev runtime.Event) (frame, error) {
	ev.Time = ev.Time.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(ev)
	if err != nil {
		return frame{}, err
	}
	return frame{Seq: ev.Seq, Type: ev.Type, JSON: b}, nil
}

// maxBacklog bounds the frames a live topic keeps; older ones are read
// from the store (the engine has flushed them long before).
const maxBacklog = 16384

// hub fans the events of the runs this process executes out to their
// subscribers. The engine hands events to its sink before its store has
// them (it writes in batches), so a topic keeps the frames of its run
// (up to maxBacklog): a subscriber gets the ones it missed from there and
// the older ones from the store. Publishing never blocks: each subscriber
// has a bounded queue, and one that is full is dropped (its channel is
// closed with Dropped() true) and resubscribes after its last seq. A
// topic exists from the moment the runner mints a run id until the run
// has ended and its events are stored. Safe for concurrent use.
type hub struct {
	queue  int
	shards [hubShards]hubShard
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
	base   int64   // every seq <= base is in the store
}

// subscription receives one run's live events in seq order.
type subscription struct {
	sh      *hubShard
	runID   string
	ch      chan frame
	dropped bool // set (under sh.mu) before ch is closed
	closed  bool
}

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

// close ends a topic once its run's events are all stored: its
// subscribers' channels are closed (not dropped).
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
		close(sub.ch)
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
	sub = &subscription{sh: sh, runID: runID, ch: make(chan frame, h.queue)}
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
		t.frames, t.base = nil, f.Seq-1 // cannot happen; the store has the gap
	}
	t.frames = append(t.frames, f)
	if len(t.frames) > maxBacklog {
		n := len(t.frames) / 2
		t.frames = append([]frame(nil), t.frames[n:]...)
		t.base += int64(n)
	}
	for sub := range t.subs {
		select {
		case sub.ch <- f:
		default:
			delete(t.subs, sub)
			sub.dropped, sub.closed = true, true
			close(sub.ch)
		}
	}
}

// C delivers the events; it is closed when the run ended (Dropped false)
// or the subscriber fell behind (Dropped true).
func (s *subscription) C() <-chan frame { return s.ch }

// Dropped reports whether the hub dropped this subscriber for being slow.
// Valid once C is closed.
func (s *subscription) Dropped() bool {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	return s.dropped
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
	close(s.ch)
}
