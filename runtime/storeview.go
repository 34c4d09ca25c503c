package runtime

import (
	"context"
	"time"
)

// StoreObserver is told of every store call the engine makes, after it
// returns: op names the call, d is how long it took and err is what it
// returned. op is the method's name in snake_case: create_run, get_run,
// update_run, save_checkpoint, checkpoints, append_events, events;
// claim_run, renew_lease, release_lease, expired_runs (Leaser);
// renew_leases (LeaseRenewer); claim_expired (BulkClaimer); owned_runs
// (OwnerLister); write_batches (BatchWriter and BatchFinisher);
// create_claimed (RunStarter); list_runs, delete_run,
// delete_finished_before (Inspector); put_effect, get_effect,
// delete_effects (EffectLedger). The engine calls it from many goroutines
// at once and on the path of every write: it must be safe for concurrent
// use and fast (record into a histogram, do no I/O).
type StoreObserver func(op string, d time.Duration, err error)

// WriteOp reports whether op, a store call as a StoreObserver names it,
// writes to the store: in a durable store, a transaction of its own.
func WriteOp(op string) bool {
	switch op {
	case "create_run", "update_run", "save_checkpoint", "append_events", "claim_run", "renew_lease", "renew_leases",
		"release_lease", "claim_expired", "write_batches", "create_claimed", "put_effect", "delete_run",
		"delete_finished_before", "delete_effects":
		return true
	}
	return false
}

func (o StoreObserver) since(op string, start time.Time, err error) {
	o(op, time.Since(start), err)
}

// timed makes a store call that returns only an error and tells o.
func (o StoreObserver) timed(op string, call func() error) error {
	start := time.Now()
	err := call()
	o.since(op, start, err)
	return err
}

// timed makes a store call that returns a value and an error and tells o.
func timed[T any](o StoreObserver, op string, call func() (T, error)) (T, error) {
	start := time.Now()
	v, err := call()
	o.since(op, start, err)
	return v, err
}

// storeView is the engine's view of its store: the Store the kernel calls
// and each optional capability of the store (nil when it lacks it), found
// once by newStoreView so that no other code type-asserts the store. With
// an observer every one of them is timed, and the view still has exactly
// the capabilities of the store it was made from.
type storeView struct {
	Store
	leaser    Leaser
	bulk      BulkClaimer
	inspector Inspector
	batcher   BatchWriter
	finisher  BatchFinisher
	starter   RunStarter
	effects   EffectLedger
	owned     OwnerLister
	renewer   LeaseRenewer
	// jsonEvents: the store keeps event data as JSON (JSONEventStore).
	jsonEvents bool
}

// newStoreView probes st for every optional interface; with obs non-nil it
// wraps st and each capability found in a timing shim. It returns nil for
// a nil st.
func newStoreView(st Store, obs StoreObserver) *storeView {
	if st == nil {
		return nil
	}
	v := &storeView{Store: st}
	v.leaser, _ = st.(Leaser)
	v.bulk, _ = st.(BulkClaimer)
	v.inspector, _ = st.(Inspector)
	v.batcher, _ = st.(BatchWriter)
	v.finisher, _ = st.(BatchFinisher)
	v.starter, _ = st.(RunStarter)
	v.effects, _ = st.(EffectLedger)
	_, v.jsonEvents = st.(JSONEventStore)
	if v.leaser != nil {
		v.owned, _ = st.(OwnerLister)
		v.renewer, _ = st.(LeaseRenewer)
	}
	if obs == nil {
		return v
	}
	v.Store = timedStore{st, obs}
	if v.leaser != nil {
		v.leaser = timedLeaser{v.leaser, obs}
	}
	if v.bulk != nil {
		v.bulk = timedBulkClaimer{v.bulk, obs}
	}
	if v.inspector != nil {
		v.inspector = timedInspector{v.inspector, obs}
	}
	if v.batcher != nil {
		v.batcher = timedBatchWriter{v.batcher, obs}
	}
	if v.finisher != nil {
		v.finisher = timedBatchFinisher{timedBatchWriter{v.finisher, obs}}
	}
	if v.starter != nil {
		v.starter = timedRunStarter{v.starter, obs}
	}
	if v.effects != nil {
		v.effects = timedEffectLedger{v.effects, obs}
	}
	if v.owned != nil {
		v.owned = timedOwnerLister{v.owned, obs}
	}
	if v.renewer != nil {
		v.renewer = timedLeaseRenewer{v.renewer, obs}
	}
	return v
}

// names lists the optional interfaces the view has, in the order of the
// storeView fields.
func (v *storeView) names() []string {
	if v == nil {
		return []string{}
	}
	out := []string{}
	for _, c := range []struct {
		name string
		has  bool
	}{
		{"Leaser", v.leaser != nil},
		{"BulkClaimer", v.bulk != nil},
		{"Inspector", v.inspector != nil},
		{"BatchWriter", v.batcher != nil},
		{"BatchFinisher", v.finisher != nil},
		{"RunStarter", v.starter != nil},
		{"EffectLedger", v.effects != nil},
		{"OwnerLister", v.owned != nil},
		{"LeaseRenewer", v.renewer != nil},
	} {
		if c.has {
			out = append(out, c.name)
		}
	}
	return out
}

type timedStore struct {
	st  Store
	obs StoreObserver
}

func (t timedStore) CreateRun(ctx context.Context, r *RunRecord) error {
	return t.obs.timed("create_run", func() error { return t.st.CreateRun(ctx, r) })
}

func (t timedStore) GetRun(ctx context.Context, id string) (*RunRecord, error) {
	return timed(t.obs, "get_run", func() (*RunRecord, error) { return t.st.GetRun(ctx, id) })
}

func (t timedStore) UpdateRun(ctx context.Context, r *RunRecord) error {
	return t.obs.timed("update_run", func() error { return t.st.UpdateRun(ctx, r) })
}

func (t timedStore) SaveCheckpoint(ctx context.Context, cp *Checkpoint) error {
	return t.obs.timed("save_checkpoint", func() error { return t.st.SaveCheckpoint(ctx, cp) })
}

func (t timedStore) Checkpoints(ctx context.Context, runID string) ([]*Checkpoint, error) {
	return timed(t.obs, "checkpoints", func() ([]*Checkpoint, error) { return t.st.Checkpoints(ctx, runID) })
}

func (t timedStore) AppendEvents(ctx context.Context, runID string, token int64, events []Event) error {
	return t.obs.timed("append_events", func() error { return t.st.AppendEvents(ctx, runID, token, events) })
}

func (t timedStore) Events(ctx context.Context, runID string, after int64, limit int) ([]Event, error) {
	return timed(t.obs, "events", func() ([]Event, error) { return t.st.Events(ctx, runID, after, limit) })
}

type timedLeaser struct {
	l   Leaser
	obs StoreObserver
}

func (t timedLeaser) ClaimRun(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error) {
	return timed(t.obs, "claim_run", func() (Lease, error) { return t.l.ClaimRun(ctx, runID, owner, ttl) })
}

func (t timedLeaser) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	return timed(t.obs, "renew_lease", func() (Lease, error) { return t.l.RenewLease(ctx, l, ttl) })
}

func (t timedLeaser) ReleaseLease(ctx context.Context, l Lease) error {
	return t.obs.timed("release_lease", func() error { return t.l.ReleaseLease(ctx, l) })
}

func (t timedLeaser) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return timed(t.obs, "expired_runs", func() ([]string, error) { return t.l.ExpiredRuns(ctx, now, limit) })
}

type timedLeaseRenewer struct {
	r   LeaseRenewer
	obs StoreObserver
}

func (t timedLeaseRenewer) RenewLeases(ctx context.Context, leases []Lease, ttl time.Duration) ([]Lease, []error, error) {
	start := time.Now()
	renewed, errs, err := t.r.RenewLeases(ctx, leases, ttl)
	t.obs.since("renew_leases", start, err)
	return renewed, errs, err
}

type timedBulkClaimer struct {
	b   BulkClaimer
	obs StoreObserver
}

func (t timedBulkClaimer) ClaimExpired(ctx context.Context, owner string, ttl time.Duration, now time.Time, limit int) ([]Lease, error) {
	return timed(t.obs, "claim_expired", func() ([]Lease, error) { return t.b.ClaimExpired(ctx, owner, ttl, now, limit) })
}

type timedInspector struct {
	i   Inspector
	obs StoreObserver
}

func (t timedInspector) ListRuns(ctx context.Context, f RunFilter) ([]*RunRecord, error) {
	return timed(t.obs, "list_runs", func() ([]*RunRecord, error) { return t.i.ListRuns(ctx, f) })
}

func (t timedInspector) DeleteRun(ctx context.Context, runID string) error {
	return t.obs.timed("delete_run", func() error { return t.i.DeleteRun(ctx, runID) })
}

func (t timedInspector) DeleteFinishedBefore(ctx context.Context, before time.Time) (int, error) {
	return timed(t.obs, "delete_finished_before", func() (int, error) { return t.i.DeleteFinishedBefore(ctx, before) })
}

type timedBatchWriter struct {
	w   BatchWriter
	obs StoreObserver
}

func (t timedBatchWriter) WriteBatches(ctx context.Context, batches []WriteBatch) error {
	return t.obs.timed("write_batches", func() error { return t.w.WriteBatches(ctx, batches) })
}

type timedBatchFinisher struct{ timedBatchWriter }

func (timedBatchFinisher) FinishesBatches() {}

type timedRunStarter struct {
	s   RunStarter
	obs StoreObserver
}

func (t timedRunStarter) CreateClaimed(ctx context.Context, r *RunRecord, owner string, ttl time.Duration) (Lease, error) {
	return timed(t.obs, "create_claimed", func() (Lease, error) { return t.s.CreateClaimed(ctx, r, owner, ttl) })
}

type timedEffectLedger struct {
	l   EffectLedger
	obs StoreObserver
}

func (t timedEffectLedger) PutEffect(ctx context.Context, rec EffectRecord) (EffectRecord, error) {
	return timed(t.obs, "put_effect", func() (EffectRecord, error) { return t.l.PutEffect(ctx, rec) })
}

func (t timedEffectLedger) GetEffect(ctx context.Context, key string) (EffectRecord, bool, error) {
	start := time.Now()
	rec, ok, err := t.l.GetEffect(ctx, key)
	t.obs.since("get_effect", start, err)
	return rec, ok, err
}

func (t timedEffectLedger) DeleteEffects(ctx context.Context, rootRunID string) error {
	return t.obs.timed("delete_effects", func() error { return t.l.DeleteEffects(ctx, rootRunID) })
}

type timedOwnerLister struct {
	o   OwnerLister
	obs StoreObserver
}

func (t timedOwnerLister) OwnedRuns(ctx context.Context, owner string, limit int) ([]string, error) {
	return timed(t.obs, "owned_runs", func() ([]string, error) { return t.o.OwnedRuns(ctx, owner, limit) })
}
