package runcontrol

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MemoryConfig configures NewMemory.
type MemoryConfig struct {
	// IntentTTL is how long a pending cancel intent is kept. Default
	// DefaultIntentTTL (60s).
	IntentTTL time.Duration
}

// Memory is the single-process Controller: one mutex guards bindings and
// intents, so Bind and Cancel are each one critical section and cannot
// interleave. The zero value is not usable; call NewMemory.
type Memory struct {
	ttl time.Duration

	mu        sync.Mutex
	closed    bool
	runs      map[string]*memBinding
	scopes    map[Scope]map[string]*memBinding
	intents   map[Scope]memIntent
	lastSweep time.Time
}

type memBinding struct {
	runID  string
	scopes []Scope
	cancel context.CancelCauseFunc
	cause  *CancelError // set once, under Memory.mu
}

type memIntent struct {
	cause   *CancelError
	expires time.Time
}

var _ Controller = (*Memory)(nil)

// NewMemory returns an in-process Controller (the default for a single
// server). Close it when done.
func NewMemory(cfg MemoryConfig) *Memory {
	if cfg.IntentTTL <= 0 {
		cfg.IntentTTL = DefaultIntentTTL
	}
	return &Memory{
		ttl:     cfg.IntentTTL,
		runs:    make(map[string]*memBinding),
		scopes:  make(map[Scope]map[string]*memBinding),
		intents: make(map[Scope]memIntent),
	}
}

// Bind implements Controller.
func (m *Memory) Bind(parent context.Context, runID string, scopes ...Scope) (context.Context, func(), error) {
	all, err := BindScopes(runID, scopes)
	if err != nil {
		return nil, nil, err
	}
	if parent.Err() != nil {
		return nil, nil, context.Cause(parent)
	}
	ctx, cancel := context.WithCancelCause(parent)

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		cancel(ErrClosed)
		return nil, nil, ErrClosed
	}
	if _, ok := m.runs[runID]; ok {
		cancel(ErrAlreadyBound)
		return nil, nil, ErrAlreadyBound
	}
	// One critical section: write the binding, then consume intents. A
	// Cancel runs either wholly before (its intent is found here) or wholly
	// after (it finds the binding).
	b := &memBinding{runID: runID, scopes: all, cancel: cancel}
	m.runs[runID] = b
	for _, s := range all {
		set := m.scopes[s]
		if set == nil {
			set = make(map[string]*memBinding)
			m.scopes[s] = set
		}
		set[runID] = b
	}
	now := time.Now()
	for _, s := range all {
		in, ok := m.intents[s]
		if !ok {
			continue
		}
		delete(m.intents, s) // consumed: the next run is not cancelled
		if now.Before(in.expires) {
			m.cancelLocked(b, in.cause)
		}
	}

	var once sync.Once
	release := func() { once.Do(func() { m.release(b) }) }
	return ctx, release, nil
}

func (m *Memory) release(b *memBinding) {
	m.mu.Lock()
	if m.runs[b.runID] == b {
		delete(m.runs, b.runID)
		for _, s := range b.scopes {
			delete(m.scopes[s], b.runID)
			if len(m.scopes[s]) == 0 {
				delete(m.scopes, s)
			}
		}
	}
	m.mu.Unlock()
	b.cancel(context.Canceled)
}

// cancelLocked cancels b with cause unless it was cancelled before: the
// first cause stays, as in context.WithCancelCause.
func (m *Memory) cancelLocked(b *memBinding, cause *CancelError) {
	if b.cause == nil {
		b.cause = cause
		b.cancel(cause)
	}
}

// Cancel implements Controller.
func (m *Memory) Cancel(_ context.Context, s Scope, cause error) (CancelResult, error) {
	return m.cancel(s, cause, s.Kind != KindRun)
}

// CancelOrphan implements Controller.
func (m *Memory) CancelOrphan(_ context.Context, runID string, cause error) (CancelResult, error) {
	return m.cancel(RunScope(runID), cause, true)
}

// cancel cancels the runs bound to s or, if there are none and keep is
// set, stores the intent.
func (m *Memory) cancel(s Scope, cause error, keep bool) (CancelResult, error) {
	if err := s.Validate(); err != nil {
		return CancelResult{}, err
	}
	ce, err := NewCancelError(s, cause)
	if err != nil {
		return CancelResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return CancelResult{}, ErrClosed
	}
	now := time.Now()
	m.sweepLocked(now)
	if set := m.scopes[s]; len(set) > 0 {
		ids := make([]string, 0, len(set))
		for id, b := range set {
			m.cancelLocked(b, ce)
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return CancelResult{Status: StatusCancelled, RunIDs: ids}, nil
	}
	if !keep {
		return CancelResult{Status: StatusNotFound}, nil
	}
	m.intents[s] = memIntent{cause: ce, expires: now.Add(m.ttl)}
	return CancelResult{Status: StatusPending}, nil
}

// sweepLocked drops expired intents, at most once per TTL, so intents
// nobody binds to do not accumulate.
func (m *Memory) sweepLocked(now time.Time) {
	if now.Sub(m.lastSweep) < m.ttl {
		return
	}
	m.lastSweep = now
	for s, in := range m.intents {
		if !now.Before(in.expires) {
			delete(m.intents, s)
		}
	}
}

// Active implements Controller.
func (m *Memory) Active(_ context.Context, s Scope) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	ids := make([]string, 0, len(m.scopes[s]))
	for id := range m.scopes[s] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Check implements Controller.
func (m *Memory) Check(_ context.Context, runID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.runs[runID]; ok && b.cause != nil {
		return b.cause
	}
	return nil
}

// Close implements Controller.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	for _, b := range m.runs {
		m.cancelLocked(b, &CancelError{Reason: ErrShutdown, Scope: RunScope(b.runID)})
	}
	clear(m.runs)
	clear(m.scopes)
	clear(m.intents)
	return nil
}
