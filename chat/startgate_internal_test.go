package chat

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The start gate gives its places in the order the calls came: a place
// given back goes to the first call in line even before that call's
// goroutine runs again, so a call that comes meanwhile cannot take it;
// a call whose context ends leaves the line, and one given a place as
// its context ended gives it on.
func TestStartGateIsFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	g := newStartGate(1)
	leaveA, err := g.enter(t.Context())
	require.NoError(t, err)

	type entered struct {
		name  string
		leave func()
	}
	got := make(chan entered, 3)
	wait := func(ctx context.Context, name string, n int64) {
		go func() {
			if leave, err := g.enter(ctx); err == nil {
				got <- entered{name, leave}
			}
		}()
		require.Eventually(t, func() bool { return g.waiting.Load() == n }, 5*time.Second, time.Millisecond)
	}
	wait(t.Context(), "b", 1)
	cctx, cancelC := context.WithCancel(t.Context())
	wait(cctx, "c", 2)
	wait(t.Context(), "d", 3)

	leaveA()
	require.EqualValues(t, 2, g.waiting.Load(), "b is out of the line at once")
	_, err = g.enter(canceled())
	require.ErrorIs(t, err, context.Canceled, "a newcomer finds no place: b has it")
	b := <-got
	require.Equal(t, "b", b.name)

	cancelC()
	require.Eventually(t, func() bool { return g.waiting.Load() == 1 }, 5*time.Second, time.Millisecond, "c left the line")
	b.leave()
	d := <-got
	require.Equal(t, "d", d.name, "c's place went to the next in line")
	d.leave()
	require.Equal(t, 1, g.free)
	select {
	case e := <-got:
		t.Fatalf("%s entered after leaving the line", e.name)
	default:
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
