package transport

import (
	"encoding/json"
	"sync"

	"chatgraph/runtime"
)

// frame is one event, encoded once for every subscriber.
type frame struct {
	Seq  int64
	Type runtime.EventType
	JSON []byte // the envelope
}

func encodeEvent(ev runtime.Event) (frame, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return frame{}, err
	}
	return frame{Seq: ev.Seq, Type: ev.Type, JSON: b}, nil
}

// hub fans the events of the runs this process executes out to their
// subscribers. Publishing never blocks: each subscriber has a bounded
// queue, and one that is full is dropped (its channel closed with
// Dropped() true) and catches up from the store log by seq. A topic
// exists from the moment the runner mints a run id until the run's
// terminal event. Safe for concurrent use.
type hub struct {
	queue int

	mu     sync.Mutex
	topics map[string]*topic
}

type topic struct {
	subs map[*subscription]struct{}
}

// subscription receives one run's live events in seq order.
type subscription struct {
	h       *hub
	runID   string
	ch      chan frame
	dropped bool // set (under h.mu) before ch is closed
	closed  bool
}

func newHub(queue int) *hub {
	if queue <= 0 {
		queue = 1024
	}
	return &hub{queue: queue, topics: map[string]*topic{}}
}

// open creates the topic of a run about to start.
func (h *hub) open(runID string) {
	h.mu.Lock()
	if h.topics[runID] == nil {
		h.topics[runID] = &topic{subs: map[*subscription]struct{}{}}
	}
	h.mu.Unlock()
}

// close ends a topic: its subscribers' channels are closed (not dropped).
func (h *hub) close(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[runID]
	if t == nil {
		return
	}
	delete(h.topics, runID)
	for sub := range t.subs {
		sub.closed = true
		close(sub.ch)
	}
}

// live reports whether runID has an open topic here.
func (h *hub) live(runID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.topics[runID] != nil
}

// subscribe returns a subscription to runID's future events, or nil when
// the run has no topic here (finished, or executing in another process).
func (h *hub) subscribe(runID string) *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[runID]
	if t == nil {
		return nil
	}
	sub := &subscription{h: h, runID: runID, ch: make(chan frame, h.queue)}
	t.subs[sub] = struct{}{}
	return sub
}

// publish hands f to every subscriber of runID without blocking; a
// terminal event closes the topic after delivery.
func (h *hub) publish(runID string, f frame) {
	h.mu.Lock()
	t := h.topics[runID]
	if t != nil {
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
	h.mu.Unlock()
	if f.Type.Terminal() {
		h.close(runID)
	}
}

// C delivers the events; it is closed when the run ended (Dropped false)
// or the subscriber fell behind (Dropped true).
func (s *subscription) C() <-chan frame { return s.ch }

// Dropped reports whether the hub dropped this subscriber for being slow.
// Valid once C is closed.
func (s *subscription) Dropped() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.dropped
}

// Close unsubscribes. Idempotent.
func (s *subscription) Close() {
	if s == nil {
		return
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if t := s.h.topics[s.runID]; t != nil {
		delete(t.subs, s)
	}
	close(s.ch)
}
