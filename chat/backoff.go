package chat

import (
	"fmt"
	"sync"
	"time"

	"chatgraph/runtime"
)

// A run whose writes the store refused ends in this process with its
// record still running; recovery then takes it back at the next pass —
// at once for this process, whose lease it held — and executes it again.
// When the refusal is for good (the run's own data, say, that the
// database cannot hold), that would run it again every RecoveryInterval,
// with whatever model calls its unfinished nodes make, for ever. So the
// service backs off: after the n-th refusal in a row of a run, recovery
// leaves it for RecoveryInterval × 2^(n-1), at most maxRecoveryBackoff,
// and gives its claim back (runtime.ErrRecoverLater) meanwhile; a run
// that ends with its writes taken is forgotten. A transient refusal (the
// database away for a moment) costs the same first retry as before. The
// count is this process's: a restarted process tries once at once.

// maxRecoveryBackoff bounds how long recovery leaves a refused run.
const maxRecoveryBackoff = 10 * time.Minute

// refusals are the runs whose writes were refused, with when recovery
// may take each again.
type refusals struct {
	mu   sync.Mutex
	runs map[string]refusal
}

type refusal struct {
	n     int       // refusals in a row
	until time.Time // recovery leaves the run until then
	err   error     // the last refusal
}

// note counts a refusal of runID's writes at now and returns how long
// recovery now leaves it.
func (r *refusals) note(runID string, err error, now time.Time, base time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]refusal{}
	}
	f := r.runs[runID]
	f.n++
	wait := maxRecoveryBackoff
	if f.n <= 20 { // base << 20 is past any bound
		wait = min(base<<(f.n-1), maxRecoveryBackoff)
	}
	f.until, f.err = now.Add(wait), err
	r.runs[runID] = f
	return wait
}

// forget drops runID: its writes were taken.
func (r *refusals) forget(runID string) {
	r.mu.Lock()
	delete(r.runs, runID)
	r.mu.Unlock()
}

// wait returns an error wrapping runtime.ErrRecoverLater while recovery
// leaves runID at now, else nil.
func (r *refusals) wait(runID string, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.runs[runID]
	if !ok || !now.Before(f.until) {
		return nil
	}
	return fmt.Errorf("%w: its writes were refused %d times in a row, the last: %v; next try at %s",
		runtime.ErrRecoverLater, f.n, f.err, f.until.Format(time.RFC3339))
}
