package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// leaseRenewals keeps the leases of an engine's runs alive, and those of
// the runs a recovery pass claimed that wait for their launch to start
// them (a recovered run may wait for its chat's turn). One goroutine
// renews, every sixth of the TTL, every lease renewed more than a sixth
// of the TTL ago, in one store call when the store is a LeaseRenewer: a
// server with a thousand runs writes one renewal every few seconds, not a
// thousand every sixth to third of the TTL, each a transaction of its own
// in front of the group commits. A lease is so renewed between a sixth
// and a third of the TTL after it was taken or last renewed. The
// goroutine runs while the engine has runs with a lease and exits when it
// has none. A failed renewal cancels its run with ErrLeaseLost (unless
// the run's end is being written, which releases the lease); the others
// go on.
type leaseRenewals struct {
	e *Engine

	mu      sync.Mutex
	runs    map[renewable]time.Time // when each lease was taken or last renewed
	running bool                    // the loop goroutine is up
	wg      sync.WaitGroup
	empty   chan struct{} // the last run left (cap 1)
}

// renewable is what holds a lease the renewals keep alive: a run, or a
// claim waiting for its run to start.
type renewable interface {
	// current is the lease to renew now; false while there is none to
	// renew yet.
	current() (Lease, bool)
	// renewed takes the outcome of the renewal of lease cur (next, or
	// err) and reports whether to go on renewing.
	renewed(cur, next Lease, err error) bool
}

// add renews r's lease until the stop it returns is called.
func (lr *leaseRenewals) add(r renewable) (stop func()) {
	lr.mu.Lock()
	if lr.runs == nil {
		lr.runs = map[renewable]time.Time{}
		lr.empty = make(chan struct{}, 1)
	}
	lr.runs[r] = time.Now()
	if !lr.running {
		lr.running = true
		lr.wg.Add(1)
		go lr.loop()
	}
	lr.mu.Unlock()
	return func() {
		lr.mu.Lock()
		delete(lr.runs, r)
		if len(lr.runs) == 0 {
			select {
			case lr.empty <- struct{}{}:
			default:
			}
		}
		lr.mu.Unlock()
	}
}

// wait waits for the loop to end when the engine has no run with a lease
// left (the last one's leaving ends it); with runs left it returns at
// once (Engine.Close, which its callers call after every run ended).
func (lr *leaseRenewals) wait() {
	lr.mu.Lock()
	idle := len(lr.runs) == 0
	lr.mu.Unlock()
	if idle {
		lr.wg.Wait()
	}
}

// loop renews the due leases every sixth of the TTL until no run is left.
func (lr *leaseRenewals) loop() {
	defer lr.wg.Done()
	every := max(lr.e.leaseTTL/6, time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			t.Reset(every)
		case <-lr.empty:
		}
		lr.mu.Lock()
		if len(lr.runs) == 0 {
			lr.running = false
			lr.mu.Unlock()
			return
		}
		due := lr.due(time.Now().Add(-every))
		lr.mu.Unlock()
		if len(due) > 0 {
			lr.renew(due)
		}
	}
}

// due lists the leases renewed before since that can be renewed now.
// (under mu)
func (lr *leaseRenewals) due(since time.Time) []dueLease {
	var out []dueLease
	for r, at := range lr.runs {
		if at.After(since) {
			continue
		}
		if cur, ok := r.current(); ok {
			out = append(out, dueLease{r, cur})
		}
	}
	return out
}

// renewLate renews at once the leases last renewed more than half the
// TTL ago. A recovery pass calls it before it claims the expired runs, so
// that a run of this engine whose renewals fell behind (the renewing
// goroutine starved of a processor, the store slow) is not claimed, and
// so fenced, by its own engine while it executes here.
func (lr *leaseRenewals) renewLate() {
	lr.mu.Lock()
	due := lr.due(time.Now().Add(-lr.e.leaseTTL / 2))
	lr.mu.Unlock()
	if len(due) > 0 {
		lr.renew(due)
	}
}

type dueLease struct {
	r     renewable
	lease Lease
}

// renewChunk bounds the leases one store call renews: a call is one
// transaction, which holds the store's writer in front of the group
// commits while it runs.
const renewChunk = 256

// renew renews the due leases, renewChunk in one call when the store can,
// and hands each run its outcome.
func (lr *leaseRenewals) renew(due []dueLease) {
	for len(due) > renewChunk {
		lr.renewSome(due[:renewChunk])
		due = due[renewChunk:]
	}
	lr.renewSome(due)
}

func (lr *leaseRenewals) renewSome(due []dueLease) {
	ttl := lr.e.leaseTTL
	leases := make([]Lease, len(due))
	for i, d := range due {
		leases[i] = d.lease
	}
	renewed := make([]Lease, len(due))
	errs := make([]error, len(due))
	st := lr.e.store
	ctx := context.Background()
	if st.renewer != nil {
		got, gotErrs, err := st.renewer.RenewLeases(ctx, leases, ttl)
		for i := range due {
			switch {
			case err != nil:
				errs[i] = err
			case len(got) != len(due) || len(gotErrs) != len(due):
				errs[i] = fmt.Errorf("runtime: the store renewed %d leases of %d", len(got), len(due))
			default:
				renewed[i], errs[i] = got[i], gotErrs[i]
			}
		}
	} else {
		for i, l := range leases {
			renewed[i], errs[i] = st.leaser.RenewLease(ctx, l, ttl)
		}
	}
	now := time.Now()
	for i, d := range due {
		lr.mu.Lock()
		_, live := lr.runs[d.r]
		if live && errs[i] == nil {
			lr.runs[d.r] = now
		}
		lr.mu.Unlock()
		if !live {
			continue // ended meanwhile: its end released the lease
		}
		if !d.r.renewed(d.lease, renewed[i], errs[i]) {
			lr.mu.Lock()
			delete(lr.runs, d.r)
			lr.mu.Unlock()
		}
	}
}

// current implements renewable: a run created in its first group commit
// has no record to renew until that commit is done (it may wait behind
// others).
func (r *run) current() (Lease, bool) {
	r.emu.Lock()
	defer r.emu.Unlock()
	return *r.lease, !(r.bornInBatch && r.cgen == 0)
}

// renewed implements renewable: no more renewing once the lease is lost
// (the run is then failed and cancelled) or the run's end is being
// written.
func (r *run) renewed(cur, next Lease, err error) bool {
	r.emu.Lock()
	ending := r.ending
	if err == nil && r.lease.Token == cur.Token {
		*r.lease = next
	}
	r.emu.Unlock()
	switch {
	case err == nil:
		return true
	case ending:
		return false // the run's end (with its lease's release) is being written
	}
	r.e.log.Warn("run lease lost", "run", r.rec.ID, "err", err)
	lost := fmt.Errorf("%w: %v", ErrLeaseLost, err)
	// Write nothing more: the run belongs to whoever recovers it.
	r.fail(lost)
	r.cancel(lost)
	return false
}

// renewLease keeps the run's lease alive until the stop it returns is
// called (see leaseRenewals).
func (r *run) renewLease() (stop func()) {
	if r.store == nil || r.store.leaser == nil || r.lease == nil {
		return func() {}
	}
	return r.e.renewals.add(r)
}

// waitingClaim is the lease a recovery pass claimed for a run that its
// Launch has not started yet: renewed while it waits, so that neither
// another process nor this engine's next pass claims the run again.
type waitingClaim struct {
	stop  func() // ends the renewals
	mu    sync.Mutex
	lease Lease
	err   error // the renewal failed: the claim is lost
}

func (c *waitingClaim) current() (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease, c.err == nil
}

func (c *waitingClaim) renewed(cur, next Lease, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = fmt.Errorf("%w: %v", ErrLeaseLost, err)
		return false
	}
	if c.lease.Token == cur.Token {
		c.lease = next
	}
	return true
}

// renewWaiting renews lease, claimed for a run that waits to start,
// until the claim is taken.
func (e *Engine) renewWaiting(lease Lease) *waitingClaim {
	c := &waitingClaim{lease: lease}
	c.stop = e.renewals.add(c)
	return c
}

// take ends the renewals and hands over the claim as it is now, or the
// error it was lost with.
func (c *waitingClaim) take() (Lease, error) {
	c.stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease, c.err
}
