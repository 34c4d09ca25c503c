package chat

import (
	"context"
	"sync"
	"sync/atomic"
)

// startGate bounds the chat calls starting at once (Config.MaxStartingTurns
// or BusyStartingTurns) and hands its places out strictly in the order the
// calls came: a call that finds every place taken waits in line, and a
// place given back goes to the first in line, never to a call that came
// after it (a buffered channel lets a newcomer take a place a waiter was
// about to get).
type startGate struct {
	mu      sync.Mutex
	free    int             // places not taken
	line    []chan struct{} // the calls waiting, first first; closed when given a place
	waiting atomic.Int64    // len(line), read without the lock
}

func newStartGate(places int) *startGate { return &startGate{free: places} }

// enter takes a place, waiting in line for one when none is free, and
// returns the function that gives it back; or ctx's error if ctx ends
// first (the call then holds no place).
func (g *startGate) enter(ctx context.Context) (func(), error) {
	g.mu.Lock()
	if g.free > 0 && len(g.line) == 0 {
		g.free--
		g.mu.Unlock()
		return g.leave, nil
	}
	ch := make(chan struct{})
	g.line = append(g.line, ch)
	g.waiting.Store(int64(len(g.line)))
	g.mu.Unlock()
	select {
	case <-ch:
		return g.leave, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, c := range g.line {
		if c == ch {
			g.line = append(g.line[:i], g.line[i+1:]...)
			g.waiting.Store(int64(len(g.line)))
			g.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	g.mu.Unlock()
	// Given a place as ctx ended: give it on.
	g.leave()
	return nil, ctx.Err()
}

// leave gives a place back: to the first call in line, or free.
func (g *startGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.line) == 0 {
		g.free++
		return
	}
	ch := g.line[0]
	g.line[0] = nil
	g.line = g.line[1:]
	g.waiting.Store(int64(len(g.line)))
	close(ch)
}
