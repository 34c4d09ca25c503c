package controltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runcontrol"
)

// QueueFactory prepares a fresh backend for one test and returns open:
// every call gives one "process" (a controller and the chat queue using
// it) on that backend. Cleanup is registered with t.Cleanup.
type QueueFactory func(t *testing.T) (open func() (runcontrol.Controller, runcontrol.ChatQueue))

// RunChatQueue runs the conformance suite of runcontrol.ChatQueue.
func RunChatQueue(t *testing.T, f QueueFactory) {
	tests := []struct {
		name string
		fn   func(*testing.T, QueueFactory)
	}{
		{"IdleChatGrantsAtOnce", testQueueIdle},
		{"Reject", testQueueReject},
		{"EnqueueFIFO", testQueueFIFO},
		{"EnqueueWaitEndsWithCtx", testQueueCancelWait},
		{"PlacedBeforeTheWait", testQueuePlaced},
		{"InterruptAndRollback", testQueueInterrupt},
		{"InvalidInput", testQueueInvalid},
		{"MutualExclusionAcrossInstances", testQueueExclusion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, f)
		})
	}
}

type acquired struct {
	turn *runcontrol.Turn
	err  error
}

// run is a bound run of a test chat.
type run struct {
	id      string
	ctx     context.Context
	release func()
}

func bindRun(t *testing.T, ctl runcontrol.Controller, chat, id string) run {
	t.Helper()
	ctx, release := bind(t, ctl, id, runcontrol.ChatScope(chat))
	return run{id: id, ctx: ctx, release: release}
}

func acquireAsync(q runcontrol.ChatQueue, chat string, r run, s runcontrol.Strategy) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		turn, err := q.Acquire(r.ctx, chat, r.id, s)
		ch <- acquired{turn, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(wait):
		t.Fatalf("Acquire did not return within %s", wait)
		return acquired{}
	}
}

func granted(t *testing.T, ch <-chan acquired) *runcontrol.Turn {
	t.Helper()
	a := receive(t, ch)
	require.NoError(t, a.err)
	require.NotNil(t, a.turn)
	t.Cleanup(a.turn.Release)
	return a.turn
}

// line probes the chat with Reject: the holder, then the queued runs.
func line(t *testing.T, q runcontrol.ChatQueue, chat string) []string {
	t.Helper()
	turn, err := q.Acquire(t.Context(), chat, "probe", runcontrol.Reject)
	if err == nil {
		turn.Release()
		return nil
	}
	var busy *runcontrol.BusyError
	require.ErrorAs(t, err, &busy)
	return busy.RunIDs
}

func waitLine(t *testing.T, q runcontrol.ChatQueue, chat string, want ...string) {
	t.Helper()
	require.Eventually(t, func() bool { return fmt.Sprint(line(t, q, chat)) == fmt.Sprint(want) },
		wait, 5*time.Millisecond, "line of %s never became %v (last %v)", chat, want, line(t, q, chat))
}

func testQueueIdle(t *testing.T, f QueueFactory) {
	ctl, q := f(t)()
	r1 := bindRun(t, ctl, "c1", "r1")
	for _, s := range []runcontrol.Strategy{runcontrol.Reject, runcontrol.Enqueue, runcontrol.Interrupt, runcontrol.Rollback} {
		r := bindRun(t, ctl, "c-"+string(s), "r-"+string(s))
		turn := granted(t, acquireAsync(q, "c-"+string(s), r, s))
		require.Equal(t, runcontrol.Turn{ChatID: "c-" + string(s), RunID: r.id, Strategy: s}, withoutRelease(turn))
	}
	turn := granted(t, acquireAsync(q, "c1", r1, runcontrol.Enqueue))
	turn.Release()
	turn.Release() // idempotent
	require.Empty(t, line(t, q, "c1"))
}

func withoutRelease(t *runcontrol.Turn) runcontrol.Turn {
	return runcontrol.Turn{ChatID: t.ChatID, RunID: t.RunID, Strategy: t.Strategy, Superseded: t.Superseded}
}

func testQueueReject(t *testing.T, f QueueFactory) {
	ctl, q := f(t)()
	r1, r2, r3 := bindRun(t, ctl, "c1", "r1"), bindRun(t, ctl, "c1", "r2"), bindRun(t, ctl, "c1", "r3")
	t1 := granted(t, acquireAsync(q, "c1", r1, runcontrol.Enqueue))
	a := receive(t, acquireAsync(q, "c1", r3, runcontrol.Reject))
	require.ErrorIs(t, a.err, runcontrol.ErrChatBusy)
	var busy *runcontrol.BusyError
	require.ErrorAs(t, a.err, &busy)
	require.Equal(t, &runcontrol.BusyError{ChatID: "c1", RunIDs: []string{"r1"}}, busy)

	ch2 := acquireAsync(q, "c1", r2, runcontrol.Enqueue)
	waitLine(t, q, "c1", "r1", "r2")
	a = receive(t, acquireAsync(q, "c1", r3, runcontrol.Reject))
	require.ErrorAs(t, a.err, &busy)
	require.Equal(t, []string{"r1", "r2"}, busy.RunIDs)
	// Reject touches nobody.
	require.NoError(t, r1.ctx.Err())
	require.NoError(t, r3.ctx.Err())
	t1.Release()
	granted(t, ch2)
}

func testQueueFIFO(t *testing.T, f QueueFactory) {
	open := f(t)
	ctlA, qA := open()
	ctlB, qB := open()
	r1 := bindRun(t, ctlA, "c1", "r1")
	turn := granted(t, acquireAsync(qA, "c1", r1, runcontrol.Enqueue))
	var chans []<-chan acquired
	want := []string{"r1"}
	for i := 2; i <= 5; i++ {
		ctl, q := ctlA, qA
		if i%2 == 0 {
			ctl, q = ctlB, qB
		}
		r := bindRun(t, ctl, "c1", fmt.Sprintf("r%d", i))
		chans = append(chans, acquireAsync(q, "c1", r, runcontrol.Enqueue))
		want = append(want, r.id)
		waitLine(t, qA, "c1", want...)
	}
	for i, ch := range chans {
		turn.Release()
		turn = granted(t, ch)
		require.Equal(t, fmt.Sprintf("r%d", i+2), turn.RunID)
		require.Empty(t, turn.Superseded)
		waitLine(t, qB, "c1", want[i+1:]...)
	}
	turn.Release()
	waitLine(t, qA, "c1")
}

func testQueueCancelWait(t *testing.T, f QueueFactory) {
	ctl, q := f(t)()
	r1, r2, r3 := bindRun(t, ctl, "c1", "r1"), bindRun(t, ctl, "c1", "r2"), bindRun(t, ctl, "c1", "r3")
	t1 := granted(t, acquireAsync(q, "c1", r1, runcontrol.Enqueue))
	ch2 := acquireAsync(q, "c1", r2, runcontrol.Enqueue)
	waitLine(t, q, "c1", "r1", "r2")
	ch3 := acquireAsync(q, "c1", r3, runcontrol.Enqueue)
	waitLine(t, q, "c1", "r1", "r2", "r3")

	// The user cancels r2 while it waits: its wait ends with the cause and
	// it leaves the line.
	_, err := ctl.Cancel(t.Context(), runcontrol.RunScope("r2"), nil)
	require.NoError(t, err)
	a := receive(t, ch2)
	require.ErrorIs(t, a.err, runcontrol.ErrUserCancel)
	waitLine(t, q, "c1", "r1", "r3")
	t1.Release()
	require.Equal(t, "r3", granted(t, ch3).RunID)
}

func testQueueInterrupt(t *testing.T, f QueueFactory) {
	for _, s := range []runcontrol.Strategy{runcontrol.Interrupt, runcontrol.Rollback} {
		t.Run(string(s), func(t *testing.T) {
			t.Parallel()
			open := f(t)
			ctlA, qA := open()
			ctlB, qB := open()
			r1, r2 := bindRun(t, ctlA, "c1", "r1"), bindRun(t, ctlA, "c1", "r2")
			t1 := granted(t, acquireAsync(qA, "c1", r1, runcontrol.Enqueue))
			ch2 := acquireAsync(qA, "c1", r2, runcontrol.Enqueue)
			waitLine(t, qA, "c1", "r1", "r2")

			// r3, on the other instance, supersedes both.
			r3 := bindRun(t, ctlB, "c1", "r3")
			ch3 := acquireAsync(qB, "c1", r3, s)
			cause := waitDone(t, r1.ctx)
			require.ErrorIs(t, cause, runcontrol.ErrSuperseded)
			require.Contains(t, cause.Error(), "r3")
			a := receive(t, ch2)
			require.ErrorIs(t, a.err, runcontrol.ErrSuperseded)
			require.ErrorIs(t, waitDone(t, r2.ctx), runcontrol.ErrSuperseded)
			require.NoError(t, r3.ctx.Err())

			// r3 waits until r1 has ended (checkpointed) and released.
			waitLine(t, qA, "c1", "r1", "r3")
			select {
			case a := <-ch3:
				t.Fatalf("%s proceeded before the superseded run released: %+v", s, a)
			default:
			}
			t1.Release()
			turn := granted(t, ch3)
			require.Equal(t, runcontrol.Turn{ChatID: "c1", RunID: "r3", Strategy: s, Superseded: []string{"r1", "r2"}}, withoutRelease(turn))
			waitLine(t, qA, "c1", "r3")
		})
	}
}

func testQueueInvalid(t *testing.T, f QueueFactory) {
	ctl, q := f(t)()
	r := bindRun(t, ctl, "c1", "r1")
	for _, tc := range []struct {
		chat, run string
		s         runcontrol.Strategy
		want      error
	}{
		{"c1", "r1", "", runcontrol.ErrInvalidStrategy},
		{"c1", "r1", "wait", runcontrol.ErrInvalidStrategy},
		{"", "r1", runcontrol.Enqueue, runcontrol.ErrInvalidScope},
		{"c1", "", runcontrol.Enqueue, runcontrol.ErrInvalidScope},
	} {
		_, err := q.Acquire(r.ctx, tc.chat, tc.run, tc.s)
		require.ErrorIs(t, err, tc.want, "%+v", tc)
	}
	for in, want := range map[string]runcontrol.Strategy{"": runcontrol.Enqueue, "reject": runcontrol.Reject, "rollback": runcontrol.Rollback} {
		got, err := runcontrol.ParseStrategy(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	// A ctx that is already done gets no turn.
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(runcontrol.ErrTimeout)
	_, err := q.Acquire(ctx, "c1", "r1", runcontrol.Enqueue)
	require.ErrorIs(t, err, runcontrol.ErrTimeout)
	require.Empty(t, line(t, q, "c1"))
}

// testQueueExclusion: runs on two instances with random strategies, each
// holding the turn for a random moment (or until it is superseded). At no
// time do two runs hold the chat's turn, and every Acquire ends.
func testQueueExclusion(t *testing.T, f QueueFactory) {
	open := f(t)
	type proc struct {
		ctl runcontrol.Controller
		q   runcontrol.ChatQueue
	}
	var procs []proc
	for range 2 {
		ctl, q := open()
		procs = append(procs, proc{ctl, q})
	}
	const n = 40
	var (
		holders, maxHolders, grantedN, busyN, supersededN atomic.Int64
		wg                                                sync.WaitGroup
		mu                                                sync.Mutex
		failures                                          []string
	)
	strategies := []runcontrol.Strategy{runcontrol.Interrupt, runcontrol.Reject, runcontrol.Rollback}
	for i := range n {
		wg.Go(func() {
			// Arrivals spread over ~20ms; most enqueue.
			time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
			s := runcontrol.Enqueue
			if rand.IntN(4) == 0 {
				s = strategies[rand.IntN(len(strategies))]
			}
			p := procs[i%2]
			id := fmt.Sprintf("x%d", i)
			ctx, release, err := p.ctl.Bind(t.Context(), id, runcontrol.ChatScope("c1"))
			if err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
				return
			}
			defer release()
			turn, err := p.q.Acquire(ctx, "c1", id, s)
			switch {
			case errors.Is(err, runcontrol.ErrChatBusy):
				busyN.Add(1)
				return
			case errors.Is(err, runcontrol.ErrSuperseded):
				supersededN.Add(1)
				return
			case err != nil:
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %v", id, err))
				mu.Unlock()
				return
			}
			grantedN.Add(1)
			h := holders.Add(1)
			for {
				m := maxHolders.Load()
				if h <= m || maxHolders.CompareAndSwap(m, h) {
					break
				}
			}
			select { // work, unless superseded
			case <-ctx.Done():
			case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
			}
			holders.Add(-1)
			turn.Release()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * wait):
		t.Fatal("runs did not all end: a turn was lost")
	}
	require.Empty(t, failures)
	require.Equal(t, int64(1), maxHolders.Load(), "two runs held the chat at once")
	require.Equal(t, int64(n), grantedN.Load()+busyN.Load()+supersededN.Load())
	t.Logf("%d granted, %d rejected, %d superseded", grantedN.Load(), busyN.Load(), supersededN.Load())
}

// testQueuePlaced: an Acquire under runcontrol.WithPlaced calls placed
// once when the run takes its place in the line, while it still waits —
// so a run placed after it is granted after it — and not when the turn
// is granted at once or refused.
func testQueuePlaced(t *testing.T, f QueueFactory) {
	ctl, q := f(t)()
	var calls sync.Map // run id -> *atomic.Int32
	under := func(r run) run {
		n := &atomic.Int32{}
		calls.Store(r.id, n)
		r.ctx = runcontrol.WithPlaced(r.ctx, func() { n.Add(1) })
		return r
	}
	placed := func(id string) int32 {
		n, _ := calls.Load(id)
		return n.(*atomic.Int32).Load()
	}
	r1 := under(bindRun(t, ctl, "c1", "r1"))
	t1 := granted(t, acquireAsync(q, "c1", r1, runcontrol.Enqueue))
	require.Zero(t, placed("r1"), "granted at once: never placed")
	a := receive(t, acquireAsync(q, "c1", under(bindRun(t, ctl, "c1", "r0")), runcontrol.Reject))
	require.ErrorIs(t, a.err, runcontrol.ErrChatBusy)
	require.Zero(t, placed("r0"), "refused: never placed")

	r2, r3 := under(bindRun(t, ctl, "c1", "r2")), under(bindRun(t, ctl, "c1", "r3"))
	ch2 := acquireAsync(q, "c1", r2, runcontrol.Enqueue)
	require.Eventually(t, func() bool { return placed("r2") == 1 }, wait, time.Millisecond)
	require.Equal(t, []string{"r1", "r2"}, line(t, q, "c1"), "placed: in the line")
	ch3 := acquireAsync(q, "c1", r3, runcontrol.Enqueue)
	require.Eventually(t, func() bool { return placed("r3") == 1 }, wait, time.Millisecond)
	require.Equal(t, []string{"r1", "r2", "r3"}, line(t, q, "c1"))
	select {
	case <-ch2:
		t.Fatal("r2 was granted while r1 holds the turn")
	default:
	}
	t1.Release()
	t2 := granted(t, ch2)
	require.Equal(t, "r2", t2.RunID)
	t2.Release()
	require.Equal(t, "r3", granted(t, ch3).RunID)
	require.Equal(t, int32(1), placed("r2"), "placed once")
	require.Equal(t, int32(1), placed("r3"))
}
