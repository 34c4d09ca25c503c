package chat

import (
	"sync"
	"time"
)

// A rollback moves onto what remains the turns it finds written under a
// message it deletes (reparentOrphans). A turn sent at the same moment
// may be written under one of them just after that: it waits behind the
// rollback, and when its run starts it follows rolledBack from the parent
// it names to what remains (turnInput), instead of failing for a branch
// it cannot find. The memory is this process's and kept for
// rolledBackFor; a turn written by another process in that instant is
// not covered.
type rolledBack struct {
	mu sync.Mutex
	to map[string]leadsTo
}

type leadsTo struct {
	id string    // what remains of the deleted message's branch ("": the root)
	at time.Time // when it was deleted
}

// rolledBackFor is how long a deleted message's lead is kept: far longer
// than a turn takes from its write to its run's start.
const rolledBackFor = 10 * time.Minute

// note records where each of the deleted messages ids leads.
func (r *rolledBack) note(ids []string, remains func(string) string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.to == nil {
		r.to = map[string]leadsTo{}
	}
	for id, l := range r.to {
		if now.Sub(l.at) > rolledBackFor {
			delete(r.to, id)
		}
	}
	for _, id := range ids {
		r.to[id] = leadsTo{remains(id), now}
	}
}

// lead returns what remains of deleted message id's branch, if a rollback
// here deleted it.
func (r *rolledBack) lead(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.to[id]
	return l.id, ok
}
