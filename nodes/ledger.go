package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"chatgraph/runtime"
)

// Ledger kinds (LedgerRecord.Kind).
const (
	// LedgerToolCall records a completed tool call's outcome.
	LedgerToolCall = "tool_call"
	// LedgerModelStep records a model answer inside an agent's loop, so a
	// re-executed agent replays its steps instead of asking the model again.
	LedgerModelStep = "model_step"
	// LedgerApprovalPending records which call an approval interrupt (of
	// one run) asked about, so the resume value is applied to that call.
	LedgerApprovalPending = "approval_pending"
)

// LedgerRecord is one entry of the ledger.
type LedgerRecord struct {
	Key string `json:"key"`
	// RootRunID is the run lineage the record belongs to (for GC).
	RootRunID string          `json:"rootRunId"`
	NodeID    string          `json:"nodeId"`
	Kind      string          `json:"kind"`
	Value     json.RawMessage `json:"value"`
	CreatedAt time.Time       `json:"createdAt"`
}

// Ledger records completed side effects of agents by idempotency key, so
// an agent executed again — on resume after an approval, on retry, after a
// crash — reuses recorded outcomes instead of calling tools (or the model)
// again. Keys are IdempotencyKey hashes scoped by the run lineage (root
// run id), the node and the tool call id.
//
// Implementations are safe for concurrent use. Put is first-write-wins:
// putting a key that exists keeps the stored record and returns nil.
type Ledger interface {
	Get(ctx context.Context, key string) (LedgerRecord, bool, error)
	Put(ctx context.Context, rec LedgerRecord) error
}

// IdempotencyKey hashes parts into a key (length-prefixed, so part
// boundaries matter).
func IdempotencyKey(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return "idk_" + hex.EncodeToString(h.Sum(sum[:0])[:20])
}

// StoreLedger is a Ledger kept in a checkpoint store that implements
// runtime.EffectLedger (the sqlite, postgres and memory stores do). With a
// durable store the records survive restarts and are shared by every
// process on the store, so an agent resumed after a restart, or by another
// process, reuses the calls recorded before instead of repeating them.
// It is safe for concurrent use as far as the store is (all three are).
type StoreLedger struct {
	l runtime.EffectLedger
}

var _ Ledger = (*StoreLedger)(nil)

// NewStoreLedger returns a Ledger kept in l, typically the engine's store:
//
//	if el, ok := st.(runtime.EffectLedger); ok {
//		deps.Ledger = nodes.NewStoreLedger(el)
//	}
func NewStoreLedger(l runtime.EffectLedger) *StoreLedger { return &StoreLedger{l: l} }

// Get implements Ledger.
func (s *StoreLedger) Get(ctx context.Context, key string) (LedgerRecord, bool, error) {
	rec, ok, err := s.l.GetEffect(ctx, key)
	if err != nil || !ok {
		return LedgerRecord{}, false, err
	}
	return LedgerRecord(rec), true, nil
}

// Put implements Ledger: the store keeps the first record of a key.
func (s *StoreLedger) Put(ctx context.Context, rec LedgerRecord) error {
	_, err := s.l.PutEffect(ctx, runtime.EffectRecord(rec))
	return err
}

// DeleteRoot drops the records of a run lineage. The stores' retention
// (runtime.Inspector.DeleteFinishedBefore) already does when the lineage's
// last run goes; this is for deleting a lineage on purpose.
func (s *StoreLedger) DeleteRoot(ctx context.Context, rootRunID string) error {
	return s.l.DeleteEffects(ctx, rootRunID)
}

// MemoryLedger is an in-process Ledger, the default of Deps.Ledger. It
// forgets everything on restart and is not shared between processes: a
// durable deployment uses a StoreLedger.
type MemoryLedger struct {
	mu   sync.RWMutex
	recs map[string]LedgerRecord
}

var _ Ledger = (*MemoryLedger)(nil)

// NewMemoryLedger returns an empty ledger.
func NewMemoryLedger() *MemoryLedger { return &MemoryLedger{recs: map[string]LedgerRecord{}} }

// Get implements Ledger.
func (l *MemoryLedger) Get(_ context.Context, key string) (LedgerRecord, bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.recs[key]
	return r, ok, nil
}

// Put implements Ledger.
func (l *MemoryLedger) Put(_ context.Context, rec LedgerRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.recs[rec.Key]; ok {
		return nil
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	rec.Value = append(json.RawMessage(nil), rec.Value...)
	l.recs[rec.Key] = rec
	return nil
}

// Len returns the number of records.
func (l *MemoryLedger) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.recs)
}

// Records returns the records of one kind ("" for all) — for tests and
// inspection.
func (l *MemoryLedger) Records(kind string) []LedgerRecord {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []LedgerRecord
	for _, r := range l.recs {
		if kind == "" || r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// DeleteRoot drops the records of a run lineage (when its runs are
// garbage-collected) and returns how many it dropped.
func (l *MemoryLedger) DeleteRoot(rootRunID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, r := range l.recs {
		if r.RootRunID == rootRunID {
			delete(l.recs, k)
			n++
		}
	}
	return n
}
