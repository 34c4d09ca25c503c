package runtime

import (
	"sync"
	"time"
)

// lagHalfLife is how fast Engine.CommitLag forgets a slow commit: the
// peak it reports halves every lagHalfLife after it.
const lagHalfLife = 50 * time.Millisecond

// commitLag keeps the peak of how long the group commits of late took
// from taking their writes to publishing their events, halving every
// lagHalfLife since it was reached: a burst of slow commits is
// remembered for a while after it, and one fast commit does not hide
// it.
type commitLag struct {
	mu   sync.Mutex
	peak time.Duration
	at   time.Time
}

// note records a commit published at now that took took.
func (l *commitLag) note(now time.Time, took time.Duration) {
	l.mu.Lock()
	if took >= l.decayedLocked(now) {
		l.peak, l.at = took, now
	}
	l.mu.Unlock()
}

// get is the peak as of now.
func (l *commitLag) get(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decayedLocked(now)
}

func (l *commitLag) decayedLocked(now time.Time) time.Duration {
	halves := now.Sub(l.at) / lagHalfLife
	if halves >= 32 {
		return 0
	}
	return l.peak >> max(halves, 0)
}

// CommitLag is how long the engine's group commits (sync and batched
// runs) have lately taken from taking the runs' writes to publishing
// their events — the part of a streamed event's latency the store and
// the machine's load add: the slowest recent commit's time, halved for
// every lagHalfLife since it. Zero while nothing is committed through
// a group commit (no store, exit mode) or once the commits have been
// fast for a while. An application can bound the work it starts while
// it is high, so that the runs already streaming keep their pace (the
// chat service bounds the turns starting at once: chat.Config).
func (e *Engine) CommitLag() time.Duration { return e.lag.get(time.Now()) }
