package nodes

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"chatgraph/runtime"
)

// Streamed text is one node_delta per model chunk until a run has sent
// Deps.DeltaEventsPerRun of them; beyond that, a node's text is coalesced
// into one delta every deltaInterval or every deltaChunk bytes, so a huge
// or pathological answer (100k one-letter words) costs a bounded number
// of events and log rows, while the concatenated text stays the same.
// Either way a chunk joins the node's previous delta while that delta
// still waits for its commit (runtime.FlowContext.EmitOrMerge), up to
// deltaChunk bytes: when commits come slower than the model's chunks, the
// run writes and sends fewer deltas instead of queueing one per chunk. A
// negative DeltaEventsPerRun turns all coalescing off: one delta per
// chunk.
const (
	deltaInterval = 100 * time.Millisecond
	deltaChunk    = 8 << 10
)

// deltaCountKey names the run-wide delta counter in the run cache.
const deltaCountKey = "nodes.deltaEvents"

// deltaStream emits a node's text deltas, coalescing them once the run is
// over its budget. Any other event of the node flushes the pending text
// first, so the order of text and tool events is kept. Safe for
// concurrent use.
type deltaStream struct {
	emit  func(runtime.EventType, any) error
	merge func(runtime.EventType, any, func(prev any) (any, bool)) (bool, error)
	count *atomic.Int64
	limit int64 // deltas a run sends uncoalesced; negative: no limit

	mu      sync.Mutex
	pending strings.Builder
	last    time.Time
}

func newDeltaStream(fc *runtime.FlowContext, limit int) *deltaStream {
	c, _ := fc.CacheLoadOrStore(deltaCountKey, new(atomic.Int64))
	return &deltaStream{emit: fc.Emit, merge: fc.EmitOrMerge, count: c.(*atomic.Int64), limit: int64(limit)}
}

// delta is called with each chunk of streamed text.
func (d *deltaStream) delta(s string) {
	if s == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending.Len() == 0 && (d.limit < 0 || d.count.Load() < d.limit) {
		d.send(s)
		return
	}
	d.pending.WriteString(s)
	if d.pending.Len() >= deltaChunk || time.Since(d.last) >= deltaInterval {
		d.flushLocked()
	}
}

// event emits another event of the node after the pending text.
func (d *deltaStream) event(t runtime.EventType, data any) error {
	d.flush()
	return d.emit(t, data)
}

// flush emits the pending text, if any.
func (d *deltaStream) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushLocked()
}

func (d *deltaStream) flushLocked() {
	if d.pending.Len() == 0 {
		return
	}
	s := d.pending.String()
	d.pending.Reset()
	d.send(s)
}

func (d *deltaStream) send(s string) {
	d.last = time.Now()
	if d.limit < 0 {
		// No coalescing at all: one delta per chunk.
		d.count.Add(1)
		_ = d.emit(EventNodeDelta, &NodeDeltaData{Text: s})
		return
	}
	merged, _ := d.merge(EventNodeDelta, &NodeDeltaData{Text: s}, func(prev any) (any, bool) {
		p, ok := prev.(*NodeDeltaData)
		if !ok || len(p.Text)+len(s) > deltaChunk {
			return nil, false
		}
		return &NodeDeltaData{Text: p.Text + s}, true
	})
	if !merged {
		d.count.Add(1)
	}
}
