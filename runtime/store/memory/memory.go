package memory

import (
	"context"
	"fmt"
	"sync"

	"chatgraph/runtime"
)

// Store is an in-memory runtime.Store, safe for concurrent use. Values are
// kept as given: outputs are shared with the caller, not copied.
type Store struct {
	mu   sync.RWMutex
	runs map[string]*entry
}

type entry struct {
	rec    runtime.RunRecord
	cps    map[string]*runtime.Checkpoint
	order  []string // node ids in first-checkpoint order
	events []runtime.Event
}

// New returns an empty store.
func New() *Store { return &Store{runs: map[string]*entry{}} }

var _ runtime.Store = (*Store)(nil)

// CreateRun implements runtime.Store.
func (s *Store) CreateRun(_ context.Context, r *runtime.RunRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.runs[r.ID]; ok {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, r.ID)
	}
	s.runs[r.ID] = &entry{rec: *r, cps: map[string]*runtime.Checkpoint{}}
	return nil
}

// GetRun implements runtime.Store.
func (s *Store) GetRun(_ context.Context, id string) (*runtime.RunRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.runs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, id)
	}
	rec := e.rec
	return &rec, nil
}

// UpdateRun implements runtime.Store.
func (s *Store) UpdateRun(_ context.Context, r *runtime.RunRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.fenced(r.ID, r.Token)
	if err != nil {
		return err
	}
	last := e.rec.LastSeq
	e.rec = *r
	e.rec.LastSeq = last
	return nil
}

// SaveCheckpoint implements runtime.Store.
func (s *Store) SaveCheckpoint(_ context.Context, cp *runtime.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.fenced(cp.RunID, cp.Token)
	if err != nil {
		return err
	}
	c := *cp
	if _, ok := e.cps[cp.NodeID]; !ok {
		e.order = append(e.order, cp.NodeID)
	}
	e.cps[cp.NodeID] = &c
	return nil
}

// Checkpoints implements runtime.Store.
func (s *Store) Checkpoints(_ context.Context, runID string) ([]*runtime.Checkpoint, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.runs[runID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	out := make([]*runtime.Checkpoint, 0, len(e.order))
	for _, id := range e.order {
		c := *e.cps[id]
		out = append(out, &c)
	}
	return out, nil
}

// AppendEvents implements runtime.Store.
func (s *Store) AppendEvents(_ context.Context, runID string, token int64, evs []runtime.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.fenced(runID, token)
	if err != nil {
		return err
	}
	next := e.rec.LastSeq + 1
	for i := range evs {
		if evs[i].Seq != next+int64(i) {
			return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, runID, next+int64(i), evs[i].Seq)
		}
	}
	e.events = append(e.events, evs...)
	e.rec.LastSeq += int64(len(evs))
	return nil
}

// Events implements runtime.Store.
func (s *Store) Events(_ context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.runs[runID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	if after < 0 {
		after = 0
	}
	if after >= int64(len(e.events)) {
		return nil, nil
	}
	evs := e.events[after:]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	return append([]runtime.Event(nil), evs...), nil
}

// fenced returns the run's entry when token is not older than its own.
func (s *Store) fenced(id string, token int64) (*entry, error) {
	e, ok := s.runs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, id)
	}
	if token < e.rec.Token {
		return nil, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, id, e.rec.Token, token)
	}
	return e, nil
}
