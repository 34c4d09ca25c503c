package runtime

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The committer's goroutine outlives a commit: it waits for the next run
// to be listed and commits it, instead of exiting and being started
// afresh (whose new stack would grow again in the store's deep calls at
// every commit of a lightly loaded server). It exits once nothing was
// listed for committerIdle, and at once when the engine closes.
func TestCommitterLoopWaitsForTheNextRun(t *testing.T) {
	quit := make(chan struct{})
	c := &committer{group: new(atomic.Pointer[func(func())]), hurry: make(chan struct{}, 1), wake: make(chan struct{}, 1), quit: quit}
	running := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running
	}
	commitOne := func() {
		t.Helper()
		r := &run{}
		done := make(chan struct{})
		r.emu.Lock()
		r.cwait = done // closed when the committer has committed r
		c.add(r)
		r.emu.Unlock()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the listed run was not committed")
		}
	}

	commitOne()
	time.Sleep(50 * time.Millisecond)
	require.True(t, running(), "the loop exited after its commit")
	commitOne() // wakes the waiting loop
	require.True(t, running())

	// Idle for committerIdle: the loop exits, and the next run starts it.
	require.Eventually(t, func() bool { return !running() }, committerIdle+2*time.Second, 10*time.Millisecond)
	commitOne()
	require.True(t, running())

	// Closing ends the wait at once.
	close(quit)
	exited := make(chan struct{})
	go func() { c.wg.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(committerIdle / 2):
		t.Fatal("the loop waited out its idle time after the engine closed")
	}
	require.False(t, running())
	commitOne() // a run listed after the close is still committed
}
