package runtime

import (
	"errors"
	"sync/atomic"
	"time"
)

// ErrRunTimeLimit is the cause of a run cancelled for running longer than
// Config.MaxRunDuration.
var ErrRunTimeLimit = errors.New("the run exceeded its time limit")

// execGuard tells whether one executor call returned before the kernel
// gave up on it. The kernel never kills a goroutine (Go cannot): an
// executor that ignores its context keeps running after its node was
// reported cancelled or timed out, and Engine.AbandonedExecutors counts
// such calls until they return.
type execGuard struct {
	state atomic.Int32 // 0 running, 1 returned, 2 abandoned
}

// returned records the end of the call; an abandoned call leaves the count.
func (g *execGuard) returned(e *Engine) {
	if !g.state.CompareAndSwap(0, 1) {
		e.abandoned.Add(-1)
	}
}

// abandon records that the kernel stopped waiting for a call still running.
func (g *execGuard) abandon(e *Engine) {
	if g.state.CompareAndSwap(0, 2) {
		e.abandoned.Add(1)
	}
}

// AbandonedExecutors is the number of executor calls still running after
// the kernel gave up on them (a cancel or timeout they ignored past the
// grace period). Each one holds a goroutine and whatever it is doing; a
// value that stays above zero names a node type that does not honour its
// context.
func (e *Engine) AbandonedExecutors() int64 { return e.abandoned.Load() }

// CancelGrace is how long a cancelled run waits for its in-flight
// executors before it ends cancelled anyway (Config.CancelGrace): a
// cancel that reached a run sees its end within it.
func (e *Engine) CancelGrace() time.Duration { return e.grace }
