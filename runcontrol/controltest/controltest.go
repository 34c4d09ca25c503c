package controltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runcontrol"
)

// Options tune the controllers a Factory opens.
type Options struct {
	// IntentTTL for the controllers; 0 means the implementation's default.
	IntentTTL time.Duration
}

// Factory prepares a fresh, empty backend for one test (a new memory
// controller, a new Redis key prefix...) and returns open. Every call of
// open returns a controller on that backend: controllers from one open
// share their state and stand for the processes of one deployment (give
// each its own connection where that means something). The factory
// registers cleanup with t.Cleanup: closing controllers, deleting keys.
type Factory func(t *testing.T, o Options) (open func() runcontrol.Controller)

// RaceIterations is the number of randomised cancel-vs-bind interleavings
// the Race test runs.
var RaceIterations = 1000

// wait bounds every wait for something asynchronous (a cancel crossing
// processes). Nothing in the suite sleeps to wait for an event.
const wait = 10 * time.Second

// Run runs the conformance suite against f. Subtests are parallel.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"CancelBoundRun", testCancelBoundRun},
		{"PendingIntentCancelsNextBindOnly", testPendingIntent},
		{"RequestIntentTargetsItsRequest", testRequestIntent},
		{"RunScopeUnknownOrFinished", testRunScopeNotFound},
		{"OrphanIntentCancelsItsNextBind", testOrphanIntent},
		{"DistinctCauses", testDistinctCauses},
		{"InvalidInput", testInvalidInput},
		{"ManyRunsAndScopes", testManyRuns},
		{"CancelAcrossInstances", testAcrossInstances},
		{"IntentExpires", testIntentExpires},
		{"ReleaseAndParent", testReleaseAndParent},
		{"Close", testClose},
		{"RaceCancelVsBind", testRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, f)
		})
	}
}

func bg(t *testing.T) context.Context { return t.Context() }

// waitDone waits (bounded) until ctx ends and returns its cause.
func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(wait):
		t.Fatalf("context not cancelled within %s", wait)
		return nil
	}
}

// requireCause checks cause is a *CancelError with the reason and scope.
func requireCause(t *testing.T, cause error, reason error, s runcontrol.Scope) *runcontrol.CancelError {
	t.Helper()
	var ce *runcontrol.CancelError
	require.ErrorAs(t, cause, &ce)
	require.ErrorIs(t, cause, reason)
	require.Equal(t, s, ce.Scope)
	return ce
}

func bind(t *testing.T, c runcontrol.Controller, run string, scopes ...runcontrol.Scope) (context.Context, func()) {
	t.Helper()
	ctx, release, err := c.Bind(bg(t), run, scopes...)
	require.NoError(t, err)
	t.Cleanup(release)
	return ctx, release
}

func testCancelBoundRun(t *testing.T, f Factory) {
	for _, target := range []runcontrol.Scope{
		runcontrol.ChatScope("c1"), runcontrol.RequestScope("q1"), runcontrol.RunScope("r1"),
	} {
		t.Run(target.Kind, func(t *testing.T) {
			t.Parallel()
			c := f(t, Options{})()
			ctx, release := bind(t, c, "r1", runcontrol.ChatScope("c1"), runcontrol.RequestScope("q1"))
			require.NoError(t, c.Check(bg(t), "r1"))

			res, err := c.Cancel(bg(t), target, nil)
			require.NoError(t, err)
			require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusCancelled, RunIDs: []string{"r1"}}, res)
			ce := requireCause(t, waitDone(t, ctx), runcontrol.ErrUserCancel, target)
			require.Equal(t, "user_cancel", runcontrol.Code(ce))
			require.Equal(t, ce, c.Check(bg(t), "r1"))

			// A cancelled run stays active until it releases.
			active, err := c.Active(bg(t), runcontrol.ChatScope("c1"))
			require.NoError(t, err)
			require.Equal(t, []string{"r1"}, active)

			// A second cancel is harmless and keeps the first cause.
			res, err = c.Cancel(bg(t), runcontrol.RunScope("r1"), runcontrol.ErrTimeout)
			require.NoError(t, err)
			require.Equal(t, runcontrol.StatusCancelled, res.Status)
			requireCause(t, context.Cause(ctx), runcontrol.ErrUserCancel, target)

			release()
			for _, s := range []runcontrol.Scope{runcontrol.ChatScope("c1"), runcontrol.RequestScope("q1"), runcontrol.RunScope("r1")} {
				active, err := c.Active(bg(t), s)
				require.NoError(t, err)
				require.Empty(t, active, s)
			}
		})
	}
}

func testPendingIntent(t *testing.T, f Factory) {
	c := f(t, Options{})()
	chat := runcontrol.ChatScope("c1")
	res, err := c.Cancel(bg(t), chat, nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusPending}, res)

	// Already cancelled when Bind returns: no node may execute.
	ctx, release := bind(t, c, "r1", chat, runcontrol.RequestScope("q1"))
	require.Error(t, ctx.Err(), "ctx must be cancelled at Bind return")
	requireCause(t, context.Cause(ctx), runcontrol.ErrUserCancel, chat)
	requireCause(t, c.Check(bg(t), "r1"), runcontrol.ErrUserCancel, chat)
	release()

	// Consumed: the next run of the chat runs.
	ctx2, _ := bind(t, c, "r2", chat)
	require.NoError(t, ctx2.Err())
	require.NoError(t, c.Check(bg(t), "r2"))

	// The intent of one chat does not touch another.
	res, err = c.Cancel(bg(t), runcontrol.ChatScope("c2"), nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)
	ctx3, _ := bind(t, c, "r3", runcontrol.ChatScope("c3"))
	require.NoError(t, ctx3.Err())
}

func testRequestIntent(t *testing.T, f Factory) {
	c := f(t, Options{})()
	req := runcontrol.RequestScope("q1")
	res, err := c.Cancel(bg(t), req, nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)

	// Another run of the same chat, for another request, is not touched.
	other, _ := bind(t, c, "r0", runcontrol.ChatScope("c1"), runcontrol.RequestScope("q0"))
	require.NoError(t, other.Err())

	ctx, _ := bind(t, c, "r1", runcontrol.ChatScope("c1"), req)
	require.Error(t, ctx.Err())
	requireCause(t, context.Cause(ctx), runcontrol.ErrUserCancel, req)
	require.NoError(t, other.Err())

	// Consumed.
	ctx2, _ := bind(t, c, "r2", req)
	require.NoError(t, ctx2.Err())
}

func testRunScopeNotFound(t *testing.T, f Factory) {
	c := f(t, Options{})()
	// Unknown run id: not_found, nothing stored.
	res, err := c.Cancel(bg(t), runcontrol.RunScope("ghost"), nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusNotFound}, res)
	ctx, release := bind(t, c, "ghost")
	require.NoError(t, ctx.Err(), "a not_found cancel must not be kept")
	release()

	// Finished run: not_found, and nothing changes.
	ctx, release = bind(t, c, "done", runcontrol.ChatScope("c1"))
	release()
	require.ErrorIs(t, context.Cause(ctx), context.Canceled) // released, not cancelled by a cause
	res, err = c.Cancel(bg(t), runcontrol.RunScope("done"), nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusNotFound, res.Status)
	require.NoError(t, c.Check(bg(t), "done"))
	for _, s := range []runcontrol.Scope{runcontrol.RunScope("done"), runcontrol.ChatScope("c1")} {
		active, err := c.Active(bg(t), s)
		require.NoError(t, err)
		require.Empty(t, active)
	}
	next, _ := bind(t, c, "next", runcontrol.ChatScope("c1"))
	require.NoError(t, next.Err())
}

func testOrphanIntent(t *testing.T, f Factory) {
	open := f(t, Options{})
	a, b := open(), open()
	chat := runcontrol.ChatScope("c1")

	// Unbound: the intent is kept, through a, for the run's next Bind on b.
	res, err := a.CancelOrphan(bg(t), "o1", runcontrol.ErrTimeout)
	require.NoError(t, err)
	require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusPending}, res)
	other, _ := bind(t, b, "o2", chat)
	require.NoError(t, other.Err(), "an orphan's intent is its run's alone")
	ctx, release := bind(t, b, "o1", chat)
	require.Error(t, ctx.Err(), "ctx must be cancelled at Bind return")
	requireCause(t, context.Cause(ctx), runcontrol.ErrTimeout, runcontrol.RunScope("o1"))
	requireCause(t, a.Check(bg(t), "o1"), runcontrol.ErrTimeout, runcontrol.RunScope("o1"))
	release()

	// Consumed: the run bound again runs.
	ctx, release = bind(t, a, "o1")
	require.NoError(t, ctx.Err())
	release()

	// Bound: cancelled at once, as Cancel of its run scope.
	ctx, _ = bind(t, b, "o3", chat)
	res, err = a.CancelOrphan(bg(t), "o3", nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusCancelled, RunIDs: []string{"o3"}}, res)
	requireCause(t, waitDone(t, ctx), runcontrol.ErrUserCancel, runcontrol.RunScope("o3"))
	require.NoError(t, other.Err())

	// Cancel of a run scope still keeps nothing beside an orphan's intent.
	res, err = a.Cancel(bg(t), runcontrol.RunScope("o4"), nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusNotFound, res.Status)
	ctx, _ = bind(t, b, "o4")
	require.NoError(t, ctx.Err())

	// Bad input stores nothing.
	_, err = a.CancelOrphan(bg(t), "o5", errors.New("whatever"))
	require.ErrorIs(t, err, runcontrol.ErrInvalidCause)
	_, err = a.CancelOrphan(bg(t), "", nil)
	require.ErrorIs(t, err, runcontrol.ErrInvalidScope)
	ctx, _ = bind(t, b, "o5")
	require.NoError(t, ctx.Err())
}

func testDistinctCauses(t *testing.T, f Factory) {
	c := f(t, Options{})()
	all := []error{runcontrol.ErrUserCancel, runcontrol.ErrShutdown, runcontrol.ErrLeaseLost, runcontrol.ErrTimeout, runcontrol.ErrSuperseded,
		runcontrol.ErrUserRollback}
	codes := []string{"user_cancel", "shutdown", "lease_lost", "timeout", "superseded", "user_rollback"}
	for i, reason := range all {
		for _, detail := range []string{"", "because test " + codes[i]} {
			cause := reason
			if detail != "" {
				cause = fmt.Errorf("%w: %s", reason, detail)
			}
			for _, pending := range []bool{false, true} {
				id := fmt.Sprintf("%s-%t-%t", codes[i], detail != "", pending)
				chat := runcontrol.ChatScope(id)
				var ctx context.Context
				if pending {
					res, err := c.Cancel(bg(t), chat, cause)
					require.NoError(t, err)
					require.Equal(t, runcontrol.StatusPending, res.Status)
					ctx, _ = bind(t, c, id, chat)
					require.Error(t, ctx.Err())
				} else {
					ctx, _ = bind(t, c, id, chat)
					res, err := c.Cancel(bg(t), chat, cause)
					require.NoError(t, err)
					require.Equal(t, runcontrol.StatusCancelled, res.Status)
				}
				got := waitDone(t, ctx)
				ce := requireCause(t, got, reason, chat)
				require.Equal(t, codes[i], runcontrol.Code(got))
				for j, other := range all {
					if j != i {
						require.NotErrorIs(t, got, other)
					}
				}
				require.NotErrorIs(t, got, context.Canceled)
				if detail != "" {
					require.Contains(t, ce.Detail, detail)
					require.Contains(t, got.Error(), detail)
				} else {
					require.Empty(t, ce.Detail)
				}
			}
		}
	}
}

func testInvalidInput(t *testing.T, f Factory) {
	c := f(t, Options{})()
	for _, s := range []runcontrol.Scope{{}, {Kind: "chat"}, {Kind: "thread", ID: "x"}, {Kind: "run", ID: "a\nb"}} {
		_, err := c.Cancel(bg(t), s, nil)
		require.ErrorIs(t, err, runcontrol.ErrInvalidScope, s)
		_, err = c.Active(bg(t), s)
		require.ErrorIs(t, err, runcontrol.ErrInvalidScope, s)
		_, _, err = c.Bind(bg(t), "r", s)
		require.ErrorIs(t, err, runcontrol.ErrInvalidScope, s)
	}
	_, _, err := c.Bind(bg(t), "")
	require.ErrorIs(t, err, runcontrol.ErrInvalidScope)

	// A cause that is none of the reasons is refused and stores nothing.
	_, err = c.Cancel(bg(t), runcontrol.ChatScope("c1"), errors.New("whatever"))
	require.ErrorIs(t, err, runcontrol.ErrInvalidCause)
	ctx, _ := bind(t, c, "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, ctx.Err())

	// Binding a bound run id again fails and leaves the first binding be.
	_, _, err = c.Bind(bg(t), "r1", runcontrol.ChatScope("c2"))
	require.ErrorIs(t, err, runcontrol.ErrAlreadyBound)
	require.NoError(t, ctx.Err())
	active, err := c.Active(bg(t), runcontrol.ChatScope("c2"))
	require.NoError(t, err)
	require.Empty(t, active)
	res, err := c.Cancel(bg(t), runcontrol.ChatScope("c1"), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, res.RunIDs)
	waitDone(t, ctx)

	// A parent that is already done: no binding.
	parent, cancel := context.WithCancelCause(bg(t))
	cancel(errors.New("caller gave up"))
	_, _, err = c.Bind(parent, "r9")
	require.EqualError(t, err, "caller gave up")
	active, err = c.Active(bg(t), runcontrol.RunScope("r9"))
	require.NoError(t, err)
	require.Empty(t, active)

	// Duplicate scopes are bound once.
	_, _ = bind(t, c, "r2", runcontrol.ChatScope("c3"), runcontrol.ChatScope("c3"), runcontrol.RunScope("r2"))
	active, err = c.Active(bg(t), runcontrol.ChatScope("c3"))
	require.NoError(t, err)
	require.Equal(t, []string{"r2"}, active)
}

func testManyRuns(t *testing.T, f Factory) {
	c := f(t, Options{})()
	chat := runcontrol.ChatScope("c1")
	ctx1, _ := bind(t, c, "r1", chat)
	ctx2, _ := bind(t, c, "r2", chat, runcontrol.RequestScope("q2"))
	ctx3, _ := bind(t, c, "r3", runcontrol.ChatScope("c2"))
	active, err := c.Active(bg(t), chat)
	require.NoError(t, err)
	require.Equal(t, []string{"r1", "r2"}, active)

	res, err := c.Cancel(bg(t), runcontrol.RequestScope("q2"), runcontrol.ErrTimeout)
	require.NoError(t, err)
	require.Equal(t, []string{"r2"}, res.RunIDs)
	requireCause(t, waitDone(t, ctx2), runcontrol.ErrTimeout, runcontrol.RequestScope("q2"))
	require.NoError(t, ctx1.Err())

	res, err = c.Cancel(bg(t), chat, nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.CancelResult{Status: runcontrol.StatusCancelled, RunIDs: []string{"r1", "r2"}}, res)
	requireCause(t, waitDone(t, ctx1), runcontrol.ErrUserCancel, chat)
	requireCause(t, context.Cause(ctx2), runcontrol.ErrTimeout, runcontrol.RequestScope("q2"))
	require.NoError(t, ctx3.Err())
}

func testAcrossInstances(t *testing.T, f Factory) {
	open := f(t, Options{})
	a, b := open(), open()
	chat := runcontrol.ChatScope("c1")

	// Bound on b, cancelled through a.
	ctx, release := bind(t, b, "r1", chat)
	active, err := a.Active(bg(t), chat)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, active)
	res, err := a.Cancel(bg(t), chat, runcontrol.ErrSuperseded)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, res.RunIDs)
	requireCause(t, waitDone(t, ctx), runcontrol.ErrSuperseded, chat)
	requireCause(t, a.Check(bg(t), "r1"), runcontrol.ErrSuperseded, chat)
	release()

	// Pending on a, bound on b.
	res, err = a.Cancel(bg(t), chat, nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)
	ctx, _ = bind(t, b, "r2", chat)
	require.Error(t, ctx.Err())

	// A run id bound on b cannot be bound again on a.
	_, _, err = a.Bind(bg(t), "r2")
	require.ErrorIs(t, err, runcontrol.ErrAlreadyBound)
}

func testIntentExpires(t *testing.T, f Factory) {
	const ttl = 200 * time.Millisecond
	c := f(t, Options{IntentTTL: ttl})()
	res, err := c.Cancel(bg(t), runcontrol.ChatScope("c1"), nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)
	// Waiting for the TTL to pass is the point of this test.
	res, err = c.CancelOrphan(bg(t), "r2", nil)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)
	time.Sleep(ttl + 100*time.Millisecond)
	ctx, _ := bind(t, c, "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, ctx.Err(), "an expired intent must not cancel")
	ctx, _ = bind(t, c, "r2")
	require.NoError(t, ctx.Err(), "an orphan's expired intent must not cancel")
}

func testReleaseAndParent(t *testing.T, f Factory) {
	c := f(t, Options{})()
	ctx, release, err := c.Bind(bg(t), "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, err)
	release()
	release() // idempotent
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.NoError(t, c.Check(bg(t), "r1"))
	// The id can be bound again after release.
	ctx, release = bind(t, c, "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, ctx.Err())
	release()

	// A parent's cancel ends the run with the parent's cause; the
	// controller reports no cancel of its own.
	parent, cancel := context.WithCancelCause(bg(t))
	ctx, release, err = c.Bind(parent, "r2", runcontrol.ChatScope("c2"))
	require.NoError(t, err)
	defer release()
	stop := errors.New("parent stopped")
	cancel(stop)
	require.ErrorIs(t, context.Cause(ctx), stop)
	require.NoError(t, c.Check(bg(t), "r2"))
	active, err := c.Active(bg(t), runcontrol.ChatScope("c2"))
	require.NoError(t, err)
	require.Equal(t, []string{"r2"}, active, "still bound until release")
}

func testClose(t *testing.T, f Factory) {
	open := f(t, Options{})
	c := open()
	ctx, release := bind(t, c, "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, c.Close())
	requireCause(t, waitDone(t, ctx), runcontrol.ErrShutdown, runcontrol.RunScope("r1"))
	release() // after Close: harmless
	require.NoError(t, c.Close())
	_, _, err := c.Bind(bg(t), "r2")
	require.ErrorIs(t, err, runcontrol.ErrClosed)
	_, err = c.Cancel(bg(t), runcontrol.ChatScope("c1"), nil)
	require.ErrorIs(t, err, runcontrol.ErrClosed)
	_, err = c.Active(bg(t), runcontrol.ChatScope("c1"))
	require.ErrorIs(t, err, runcontrol.ErrClosed)
}

// testRace runs RaceIterations randomised interleavings of a Cancel on one
// instance and a Bind on another. Every cancel must land exactly once:
//   - status is never not_found (chat and request scopes);
//   - pending means the intent was stored before Bind looked, so the ctx
//     is cancelled when Bind returns (no node would execute); the same if
//     Cancel returned before Bind started;
//   - cancelled means the run was bound: it names the run and its ctx ends
//     (across instances) with the user cause and this iteration's detail;
//   - the intent is consumed: the next run bound to the scope runs.
func testRace(t *testing.T, f Factory) {
	open := f(t, Options{})
	a, b := open(), open()
	var (
		clock                       atomic.Int64
		pending, cancelled, atStart atomic.Int64
		mu                          sync.Mutex
		failures                    []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	jitter := func() {
		if d := rand.IntN(400); d > 50 {
			time.Sleep(time.Duration(d) * time.Microsecond)
		} else {
			for range d {
				runtime.Gosched()
			}
		}
	}
	one := func(i int) {
		ctx := bg(t)
		run := fmt.Sprintf("race-%d", i)
		scope := runcontrol.ChatScope(fmt.Sprintf("chat-%d", i))
		if i%2 == 1 {
			scope = runcontrol.RequestScope(fmt.Sprintf("req-%d", i))
		}
		detail := fmt.Sprintf("iteration %d", i)
		start := make(chan struct{})
		cancelDone := make(chan struct{})
		var (
			res       runcontrol.CancelResult
			cerr      error
			cancelEnd int64
		)
		go func() {
			defer close(cancelDone)
			<-start
			jitter()
			res, cerr = a.Cancel(ctx, scope, fmt.Errorf("%w: %s", runcontrol.ErrUserCancel, detail))
			cancelEnd = clock.Add(1)
		}()
		close(start)
		jitter()
		bindStart := clock.Add(1)
		runCtx, release, err := b.Bind(ctx, run, runcontrol.ChatScope("shared"), scope)
		atReturn := err == nil && runCtx.Err() != nil // before anything else can happen
		<-cancelDone
		if err != nil || cerr != nil {
			fail("%d: bind err %v, cancel err %v", i, err, cerr)
			if release != nil {
				release()
			}
			return
		}
		defer release()
		if atReturn {
			atStart.Add(1)
		}
		switch res.Status {
		case runcontrol.StatusPending:
			pending.Add(1)
			if !atReturn {
				fail("%d: intent was pending but Bind returned a live ctx (a node would execute)", i)
				return
			}
		case runcontrol.StatusCancelled:
			cancelled.Add(1)
			if len(res.RunIDs) != 1 || res.RunIDs[0] != run {
				fail("%d: cancelled %v, want [%s]", i, res.RunIDs, run)
			}
		default:
			fail("%d: status %q", i, res.Status)
			return
		}
		if cancelEnd < bindStart && !atReturn {
			fail("%d: Cancel returned before Bind started, yet Bind returned a live ctx", i)
			return
		}
		select {
		case <-runCtx.Done():
		case <-time.After(wait):
			fail("%d: cancel never reached the run", i)
			return
		}
		var ce *runcontrol.CancelError
		if cause := context.Cause(runCtx); !errors.As(cause, &ce) || !errors.Is(cause, runcontrol.ErrUserCancel) || ce.Detail == "" || ce.Scope != scope {
			fail("%d: cause %v", i, cause)
		} else if want := fmt.Errorf("%w: %s", runcontrol.ErrUserCancel, detail).Error(); ce.Detail != want {
			fail("%d: detail %q, want %q", i, ce.Detail, want)
		}
		release()
		// Exactly once: nothing of this cancel is left for the next run.
		next, rel2, err := a.Bind(ctx, run+"-next", scope)
		if err != nil {
			fail("%d: second bind: %v", i, err)
			return
		}
		if next.Err() != nil {
			fail("%d: the cancel also hit the next run: %v", i, context.Cause(next))
		}
		rel2()
	}

	began := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				one(i)
			}
		})
	}
	for i := range RaceIterations {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("%d interleavings in %s: %d pending (ctx cancelled at Bind return), %d cancelled while bound; %d ctxs already cancelled at Bind return",
		RaceIterations, time.Since(began).Round(time.Millisecond), pending.Load(), cancelled.Load(), atStart.Load())
	if len(failures) > 10 {
		failures = failures[:10]
	}
	require.Empty(t, failures)
	if RaceIterations >= 100 {
		require.Positive(t, pending.Load(), "no interleaving put Cancel first")
		require.Positive(t, cancelled.Load(), "no interleaving put Bind first")
	}
}

// ReportPercentiles reports the p50 and p99 of latency samples, in
// microseconds, on a benchmark.
func ReportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
