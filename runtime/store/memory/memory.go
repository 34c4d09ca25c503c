package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"chatgraph/runtime"
)

// Store is an in-memory runtime.Store, runtime.Leaser, runtime.Inspector,
// runtime.BatchWriter and runtime.EffectLedger, safe for concurrent use.
// Values are kept as given: outputs are shared with the caller, not copied
// (effect values are copied). Leases coordinate the goroutines of one
// process only.
type Store struct {
	mu      sync.RWMutex
	runs    map[string]*entry
	effects map[string]runtime.EffectRecord
}

type entry struct {
	rec    runtime.RunRecord
	cps    map[string]*runtime.Checkpoint
	order  []string // node ids in first-checkpoint order
	events []runtime.Event
	// owner and expires describe the lease; owner is empty when there is none.
	owner   string
	expires time.Time
}

// New returns an empty store.
func New() *Store {
	return &Store{runs: map[string]*entry{}, effects: map[string]runtime.EffectRecord{}}
}

var (
	_ runtime.Store         = (*Store)(nil)
	_ runtime.Leaser        = (*Store)(nil)
	_ runtime.Inspector     = (*Store)(nil)
	_ runtime.BatchWriter   = (*Store)(nil)
	_ runtime.BatchFinisher = (*Store)(nil)
	_ runtime.RunStarter    = (*Store)(nil)
	_ runtime.BulkClaimer   = (*Store)(nil)
	_ runtime.OwnerLister   = (*Store)(nil)
	_ runtime.EffectLedger  = (*Store)(nil)
)

// CreateRun implements runtime.Store. A pending record is a reservation:
// CreateRun replaces it whole (with no lease); any other record with the
// id is ErrRunExists.
func (s *Store) CreateRun(_ context.Context, r *runtime.RunRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken(r.ID) {
		return fmt.Errorf("%w: %s", runtime.ErrRunExists, r.ID)
	}
	s.runs[r.ID] = &entry{rec: *r, cps: map[string]*runtime.Checkpoint{}}
	return nil
}

// CreateClaimed implements runtime.RunStarter: CreateRun holding the
// run's first lease (token r.Token+1).
func (s *Store) CreateClaimed(_ context.Context, r *runtime.RunRecord, owner string, ttl time.Duration) (runtime.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := runtime.Lease{RunID: r.ID, Owner: owner, Token: r.Token + 1, ExpiresAt: time.Now().Add(ttl)}
	if s.taken(r.ID) {
		return runtime.Lease{}, fmt.Errorf("%w: %s", runtime.ErrRunExists, r.ID)
	}
	s.create(r, l)
	return l, nil
}

// taken says a record other than a reservation holds id (under mu).
func (s *Store) taken(id string) bool {
	e, ok := s.runs[id]
	return ok && e.rec.Status != runtime.RunPending
}

// create stores r holding lease l (under mu).
func (s *Store) create(r *runtime.RunRecord, l runtime.Lease) {
	e := &entry{rec: *r, cps: map[string]*runtime.Checkpoint{}, owner: l.Owner, expires: l.ExpiresAt}
	e.rec.Token = l.Token
	s.runs[r.ID] = e
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

// WriteBatches implements runtime.BatchWriter and runtime.BatchFinisher:
// it checks every write first (creations, tokens, seqs) and applies the
// batches only when all pass, so a refused write changes nothing.
func (s *Store) WriteBatches(_ context.Context, batches []runtime.WriteBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The runs' tokens and last seqs as the batches move them.
	type state struct{ token, last int64 }
	moved := map[string]*state{}
	check := func(id string, token int64) (*state, error) {
		if st, ok := moved[id]; ok {
			if token < st.token {
				return nil, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, id, st.token, token)
			}
			return st, nil
		}
		e, err := s.fenced(id, token)
		if err != nil {
			return nil, err
		}
		st := &state{e.rec.Token, e.rec.LastSeq}
		moved[id] = st
		return st, nil
	}
	for _, b := range batches {
		if len(b.Writes) > 0 {
			// It keeps no application's data to write them to.
			return fmt.Errorf("memory store: run %s: joined writes (of type %T) are not supported", b.RunID, b.Writes[0])
		}
		if c := b.Create; c != nil {
			if b.Lease == nil {
				return fmt.Errorf("memory store: create %s in a batch needs its lease", c.ID)
			}
			if moved[c.ID] != nil || s.taken(c.ID) {
				return fmt.Errorf("%w: %s", runtime.ErrRunExists, c.ID)
			}
			moved[c.ID] = &state{b.Lease.Token, c.LastSeq}
		}
		for _, cp := range b.Checkpoints {
			if _, err := check(cp.RunID, cp.Token); err != nil {
				return err
			}
		}
		if len(b.Events) > 0 {
			st, err := check(b.RunID, b.Token)
			if err != nil {
				return err
			}
			for i := range b.Events {
				if want := st.last + 1 + int64(i); b.Events[i].Seq != want {
					return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, b.RunID, want, b.Events[i].Seq)
				}
			}
			st.last += int64(len(b.Events))
		}
		if f := b.Finish; f != nil {
			if _, err := check(f.ID, f.Token); err != nil {
				return err
			}
		}
	}
	for _, b := range batches {
		if b.Create != nil {
			s.create(b.Create, *b.Lease)
		}
		for _, cp := range b.Checkpoints {
			e := s.runs[cp.RunID]
			c := *cp
			if _, ok := e.cps[cp.NodeID]; !ok {
				e.order = append(e.order, cp.NodeID)
			}
			e.cps[cp.NodeID] = &c
		}
		if len(b.Events) > 0 {
			e := s.runs[b.RunID]
			e.events = append(e.events, b.Events...)
			e.rec.LastSeq += int64(len(b.Events))
		}
		if f := b.Finish; f != nil {
			e := s.runs[f.ID]
			last := e.rec.LastSeq
			e.rec = *f
			e.rec.LastSeq = last
		}
		if l := b.Release; l != nil {
			// Nothing to release when the lease already passed on.
			if e := s.runs[l.RunID]; e != nil && e.owner == l.Owner && e.rec.Token == l.Token {
				e.owner, e.expires = "", time.Time{}
			}
		}
	}
	return nil
}

// FinishesBatches marks the store as a runtime.BatchFinisher.
func (s *Store) FinishesBatches() {}

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

// ClaimRun implements runtime.Leaser.
func (s *Store) ClaimRun(_ context.Context, runID, owner string, ttl time.Duration) (runtime.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.runs[runID]
	if !ok {
		return runtime.Lease{}, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	now := time.Now()
	if e.owner != "" && e.owner != owner && e.expires.After(now) {
		return runtime.Lease{}, fmt.Errorf("%w: run %s is held by %s until %s", runtime.ErrLeaseHeld, runID, e.owner, e.expires.Format(time.RFC3339Nano))
	}
	e.rec.Token++
	e.owner, e.expires = owner, now.Add(ttl)
	return runtime.Lease{RunID: runID, Owner: owner, Token: e.rec.Token, ExpiresAt: e.expires}, nil
}

// RenewLease implements runtime.Leaser.
func (s *Store) RenewLease(_ context.Context, l runtime.Lease, ttl time.Duration) (runtime.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renew(l, time.Now().Add(ttl))
}

// RenewLeases implements runtime.LeaseRenewer.
func (s *Store) RenewLeases(_ context.Context, leases []runtime.Lease, ttl time.Duration) ([]runtime.Lease, []error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	renewed, errs := make([]runtime.Lease, len(leases)), make([]error, len(leases))
	expires := time.Now().Add(ttl)
	for i, l := range leases {
		renewed[i], errs[i] = s.renew(l, expires)
	}
	return renewed, errs, nil
}

// renew moves l's expiry to expires if l still holds its run. (under mu)
func (s *Store) renew(l runtime.Lease, expires time.Time) (runtime.Lease, error) {
	e, err := s.holder(l)
	if err != nil {
		return runtime.Lease{}, err
	}
	e.expires = expires
	l.ExpiresAt = expires
	return l, nil
}

// ReleaseLease implements runtime.Leaser.
func (s *Store) ReleaseLease(_ context.Context, l runtime.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.runs[l.RunID]
	if !ok {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, l.RunID)
	}
	if e.owner == "" && e.rec.Token == l.Token {
		return nil // released already
	}
	if _, err := s.holder(l); err != nil {
		return err
	}
	e.owner, e.expires = "", time.Time{}
	return nil
}

// holder returns the run's entry when l is its current lease.
func (s *Store) holder(l runtime.Lease) (*entry, error) {
	e, ok := s.runs[l.RunID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, l.RunID)
	}
	if e.rec.Token != l.Token || e.owner != l.Owner {
		return nil, fmt.Errorf("%w: run %s is at token %d (owner %q), lease has %d (owner %q)",
			runtime.ErrFenced, l.RunID, e.rec.Token, e.owner, l.Token, l.Owner)
	}
	return e, nil
}

// ExpiredRuns implements runtime.Leaser. limit <= 0 means no limit.
func (s *Store) ExpiredRuns(_ context.Context, now time.Time, limit int) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.runningIDs(expiredAt(now), limit), nil
}

func expiredAt(now time.Time) func(*entry) bool {
	return func(e *entry) bool { return e.owner == "" || !e.expires.After(now) }
}

// ClaimExpired implements runtime.BulkClaimer.
func (s *Store) ClaimExpired(_ context.Context, owner string, ttl time.Duration, now time.Time, limit int) ([]runtime.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.runningIDs(expiredAt(now), limit)
	out := make([]runtime.Lease, 0, len(ids))
	expires := time.Now().Add(ttl)
	for _, id := range ids {
		e := s.runs[id]
		e.rec.Token++
		e.owner, e.expires = owner, expires
		out = append(out, runtime.Lease{RunID: id, Owner: owner, Token: e.rec.Token, ExpiresAt: expires})
	}
	return out, nil
}

// OwnedRuns implements runtime.OwnerLister.
func (s *Store) OwnedRuns(_ context.Context, owner string, limit int) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.runningIDs(func(e *entry) bool { return owner != "" && e.owner == owner }, limit), nil
}

// runningIDs lists the running runs that match, oldest first, up to limit
// (<= 0: all). The caller holds mu.
func (s *Store) runningIDs(match func(*entry) bool, limit int) []string {
	var found []*entry
	for _, e := range s.runs {
		if e.rec.Status == runtime.RunRunning && match(e) {
			found = append(found, e)
		}
	}
	slices.SortFunc(found, func(a, b *entry) int {
		return cmp.Or(a.rec.CreatedAt.Compare(b.rec.CreatedAt), cmp.Compare(a.rec.ID, b.rec.ID))
	})
	if limit > 0 && len(found) > limit {
		found = found[:limit]
	}
	ids := make([]string, len(found))
	for i, e := range found {
		ids[i] = e.rec.ID
	}
	return ids
}

// ListRuns implements runtime.Inspector: runs matching f, newest
// (CreatedAt) first. After and Before are exclusive bounds.
func (s *Store) ListRuns(_ context.Context, f runtime.RunFilter) ([]*runtime.RunRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*runtime.RunRecord
	for _, e := range s.runs {
		r := &e.rec
		if (len(f.Status) > 0 && !slices.Contains(f.Status, r.Status)) ||
			(f.ChatID != "" && r.ChatID != f.ChatID) ||
			(f.GraphID != "" && r.GraphID != f.GraphID) ||
			(!f.After.IsZero() && !r.CreatedAt.After(f.After)) ||
			(!f.Before.IsZero() && !r.CreatedAt.Before(f.Before)) {
			continue
		}
		rec := *r
		out = append(out, &rec)
	}
	slices.SortFunc(out, func(a, b *runtime.RunRecord) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// DeleteRun implements runtime.Inspector.
func (s *Store) DeleteRun(_ context.Context, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.runs[runID]; !ok {
		return fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	delete(s.runs, runID)
	return nil
}

// DeleteFinishedBefore implements runtime.Inspector. It also removes the
// effects of every run lineage that no longer has a run (see
// runtime.EffectLedger).
func (s *Store) DeleteFinishedBefore(_ context.Context, t time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, e := range s.runs {
		switch e.rec.Status {
		case runtime.RunCompleted, runtime.RunFailed, runtime.RunCancelled:
			if e.rec.UpdatedAt.Before(t) {
				delete(s.runs, id)
				n++
			}
		}
	}
	if len(s.effects) > 0 {
		live := make(map[string]bool, 2*len(s.runs))
		for id, e := range s.runs {
			live[id], live[e.rec.RootID] = true, true
		}
		for k, rec := range s.effects {
			if !live[rec.RootRunID] {
				delete(s.effects, k)
			}
		}
	}
	return n, nil
}

// PutEffect implements runtime.EffectLedger. A zero CreatedAt is set to
// now; an empty Value is stored as JSON null.
func (s *Store) PutEffect(_ context.Context, rec runtime.EffectRecord) (runtime.EffectRecord, error) {
	if err := checkEffect(&rec); err != nil {
		return runtime.EffectRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if kept, ok := s.effects[rec.Key]; ok {
		return copyEffect(kept), nil
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	rec = copyEffect(rec)
	s.effects[rec.Key] = rec
	return copyEffect(rec), nil
}

// GetEffect implements runtime.EffectLedger.
func (s *Store) GetEffect(_ context.Context, key string) (runtime.EffectRecord, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rec, ok := s.effects[key]
	if !ok {
		return runtime.EffectRecord{}, false, nil
	}
	return copyEffect(rec), true, nil
}

// DeleteEffects implements runtime.EffectLedger.
func (s *Store) DeleteEffects(_ context.Context, rootRunID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, rec := range s.effects {
		if rec.RootRunID == rootRunID {
			delete(s.effects, k)
		}
	}
	return nil
}

// checkEffect validates rec as the durable stores do, so the memory store
// cannot accept what they refuse.
func checkEffect(rec *runtime.EffectRecord) error {
	if rec.Key == "" || rec.RootRunID == "" {
		return errors.New("memory store: put effect: key and root run id are required")
	}
	if len(rec.Value) == 0 {
		rec.Value = json.RawMessage("null")
	}
	if !json.Valid(rec.Value) {
		return fmt.Errorf("memory store: put effect %s: value is not valid JSON", rec.Key)
	}
	return nil
}

func copyEffect(rec runtime.EffectRecord) runtime.EffectRecord {
	rec.Value = append(json.RawMessage(nil), rec.Value...)
	return rec
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
