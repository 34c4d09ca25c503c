package runcontrol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Strategy says what a new run does when its chat already has one: the
// multitask strategies of LangGraph ("double texting").
type Strategy string

const (
	// Reject fails with a *BusyError naming the active run(s).
	Reject Strategy = "reject"
	// Enqueue waits, in FIFO order, until the runs before it are done.
	Enqueue Strategy = "enqueue"
	// Interrupt cancels the active run (ErrSuperseded; the caller keeps its
	// progress) and the queued ones, waits until the active run has
	// released its turn, and proceeds.
	Interrupt Strategy = "interrupt"
	// Rollback is Interrupt, and the caller then deletes the superseded
	// runs (Turn.Superseded) and their messages, as if never sent.
	Rollback Strategy = "rollback"
)

// DefaultStrategy is the strategy of a request that names none.
const DefaultStrategy = Enqueue

// ParseStrategy validates s; "" means DefaultStrategy.
func ParseStrategy(s string) (Strategy, error) {
	if s == "" {
		return DefaultStrategy, nil
	}
	st := Strategy(s)
	return st, st.Validate()
}

// Validate reports ErrInvalidStrategy unless s is one of the four.
func (s Strategy) Validate() error {
	switch s {
	case Reject, Enqueue, Interrupt, Rollback:
		return nil
	}
	return fmt.Errorf("%w: %q (want reject, enqueue, interrupt or rollback)", ErrInvalidStrategy, string(s))
}

var (
	// ErrInvalidStrategy: not one of the four strategies.
	ErrInvalidStrategy = errors.New("runcontrol: invalid multitask strategy")
	// ErrChatBusy is what a *BusyError matches with errors.Is.
	ErrChatBusy = errors.New("runcontrol: chat has an active run")
)

// BusyError answers Acquire with Reject while the chat has a run: the
// transport maps it to 409 conflict with the run ids.
type BusyError struct {
	ChatID string
	RunIDs []string // the run holding the turn, then the queued ones
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("runcontrol: chat %s has active run(s) %v", e.ChatID, e.RunIDs)
}

// Is makes errors.Is(err, ErrChatBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrChatBusy }

// Turn is the right to run in a chat: at most one turn per chat is held at
// a time. Release it when the run ends (after its checkpoint is written).
type Turn struct {
	ChatID   string
	RunID    string
	Strategy Strategy
	// Superseded lists the runs Acquire cancelled with ErrSuperseded
	// (Interrupt, Rollback): the run that held the turn (it has released
	// it by the time Acquire returns), then the queued ones (they never
	// started). With Rollback the caller deletes them.
	Superseded []string

	release func()
}

// NewTurn is for ChatQueue implementations: a granted turn whose Release
// calls release once.
func NewTurn(chatID, runID string, s Strategy, superseded []string, release func()) *Turn {
	var once sync.Once
	return &Turn{ChatID: chatID, RunID: runID, Strategy: s, Superseded: superseded,
		release: func() { once.Do(release) }}
}

// Release hands the turn to the next queued run. Idempotent.
func (t *Turn) Release() { t.release() }

// ChatQueue orders the runs of each chat. Use it after Bind:
//
//	ctx, release, err := ctl.Bind(parent, runID, runcontrol.ChatScope(chatID))
//	defer release()
//	turn, err := queue.Acquire(ctx, chatID, runID, strategy)
//	if err != nil { ... } // *BusyError, ErrSuperseded, ctx's cause
//	defer turn.Release()
//
// Binding first means a cancel of the chat, request or run also ends the
// wait, and Interrupt can always reach the run holding the turn through
// the Controller (RunScope). Implementations are safe for concurrent use.
type ChatQueue interface {
	// Acquire returns the chat's turn for runID according to s. While it
	// waits, ctx ending makes it return context.Cause(ctx); a later
	// Interrupt or Rollback makes it return a *CancelError with
	// ErrSuperseded (and the run is cancelled through the Controller).
	Acquire(ctx context.Context, chatID, runID string, s Strategy) (*Turn, error)
}

// Lingering is implemented by a ChatQueue whose places in a chat's line
// outlive the process that took them (runcontrol/redis: a waiter's place
// and a held turn last a TurnTTL after their process died, so that the
// run can take them back when it is recovered or started again
// elsewhere). What such a process left for a run that will never take
// its turn again would keep the runs behind it waiting until it expired;
// the chat service's recovery frees it with these.
type Lingering interface {
	// Holder returns the run holding chatID's turn, "" when none does.
	Holder(ctx context.Context, chatID string) (string, error)
	// Leave takes runID out of chatID's line for good — its place, and
	// the turn if it holds it — for a run that will never take its turn
	// (a queued turn recovery fails, a holder whose run ended in a
	// process that died before it released the turn). The run must not
	// be waiting or holding the turn in a live process. Idempotent; a run
	// with no place is no error.
	Leave(ctx context.Context, chatID, runID string) error
}

// MemoryChatQueue is the single-process ChatQueue.
type MemoryChatQueue struct {
	ctl Controller

	mu    sync.Mutex
	chats map[string]*chatLine
}

type chatLine struct {
	holder string
	queue  []*waiter
}

type waiter struct {
	runID   string
	done    chan struct{} // closed when granted or superseded
	granted bool          // under MemoryChatQueue.mu
	err     error
}

var _ ChatQueue = (*MemoryChatQueue)(nil)

// NewMemoryChatQueue returns a ChatQueue for runs bound through ctl in this
// process.
func NewMemoryChatQueue(ctl Controller) *MemoryChatQueue {
	return &MemoryChatQueue{ctl: ctl, chats: make(map[string]*chatLine)}
}

// Acquire implements ChatQueue.
func (q *MemoryChatQueue) Acquire(ctx context.Context, chatID, runID string, s Strategy) (*Turn, error) {
	if err := CheckAcquire(chatID, runID, s); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	turn := &Turn{ChatID: chatID, RunID: runID, Strategy: s}
	q.mu.Lock()
	line := q.chats[chatID]
	if line == nil {
		line = &chatLine{}
		q.chats[chatID] = line
	}
	if line.holder == "" {
		line.holder = runID
		q.mu.Unlock()
		return q.granted(turn), nil
	}
	w := &waiter{runID: runID, done: make(chan struct{})}
	switch s {
	case Reject:
		ids := append([]string{line.holder}, waiterIDs(line.queue)...)
		q.mu.Unlock()
		return nil, &BusyError{ChatID: chatID, RunIDs: ids}
	case Enqueue:
		line.queue = append(line.queue, w)
	case Interrupt, Rollback:
		turn.Superseded = append([]string{line.holder}, waiterIDs(line.queue)...)
		for _, old := range line.queue {
			old.err = SupersededBy(chatID, runID)
			close(old.done)
		}
		line.queue = []*waiter{w}
	}
	q.mu.Unlock()
	Placed(ctx)

	if err := Supersede(ctx, q.ctl, chatID, runID, turn.Superseded); err != nil {
		q.abandon(chatID, w)
		return nil, err
	}
	select {
	case <-w.done:
		if w.err != nil {
			return nil, w.err
		}
		return q.granted(turn), nil
	case <-ctx.Done():
		q.abandon(chatID, w)
		return nil, context.Cause(ctx)
	}
}

// abandon takes w out of the line; a turn granted meanwhile is passed on.
func (q *MemoryChatQueue) abandon(chatID string, w *waiter) {
	q.mu.Lock()
	granted := w.granted
	if line := q.chats[chatID]; line != nil && !granted {
		line.queue = slices.DeleteFunc(line.queue, func(o *waiter) bool { return o == w })
	}
	q.mu.Unlock()
	if granted {
		q.release(chatID, w.runID)
	}
}

func (q *MemoryChatQueue) granted(t *Turn) *Turn {
	return NewTurn(t.ChatID, t.RunID, t.Strategy, t.Superseded, func() { q.release(t.ChatID, t.RunID) })
}

func (q *MemoryChatQueue) release(chatID, runID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.chats[chatID]
	if line == nil || line.holder != runID {
		return
	}
	if len(line.queue) == 0 {
		delete(q.chats, chatID)
		return
	}
	next := line.queue[0]
	line.queue = line.queue[1:]
	line.holder = next.runID
	next.granted = true
	close(next.done)
}

type placedKey struct{}

// WithPlaced returns ctx carrying placed, which a ChatQueue's Acquire
// under it calls once the run has its place in the chat's line (behind
// the turn's holder), before it waits for the turn — and not when the
// turn is granted at once or refused. A caller that starts several turns
// of one chat in order (recovery, starting the queued turns of a process
// that died) so waits for each to be placed rather than granted, and the
// chat service answers a call that waits for its turn once it is placed.
// An implementation that never calls it makes those waits last until the
// turn is granted.
func WithPlaced(ctx context.Context, placed func()) context.Context {
	return context.WithValue(ctx, placedKey{}, placed)
}

// Placed calls the function WithPlaced put in ctx, if any. For
// implementations of ChatQueue.
func Placed(ctx context.Context) {
	if f, ok := ctx.Value(placedKey{}).(func()); ok && f != nil {
		f()
	}
}

// CheckAcquire validates the arguments of ChatQueue.Acquire (shared by
// implementations).
func CheckAcquire(chatID, runID string, s Strategy) error {
	if err := ChatScope(chatID).Validate(); err != nil {
		return err
	}
	if err := RunScope(runID).Validate(); err != nil {
		return err
	}
	return s.Validate()
}

func waiterIDs(ws []*waiter) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.runID
	}
	return ids
}

// SupersededBy is the error of a run superseded in chatID by run byRunID.
func SupersededBy(chatID, byRunID string) *CancelError {
	return &CancelError{Reason: ErrSuperseded, Scope: ChatScope(chatID), Detail: fmt.Sprintf("%v (run %s)", ErrSuperseded, byRunID)}
}

// Supersede cancels victims through ctl with SupersededBy(chatID, byRunID),
// for ChatQueue implementations. The cancels are made even if ctx ends
// meanwhile (the superseding run may itself be superseded): the victims
// have already lost their place.
func Supersede(ctx context.Context, ctl Controller, chatID, byRunID string, victims []string) error {
	ctx = context.WithoutCancel(ctx)
	for _, v := range victims {
		if _, err := ctl.Cancel(ctx, RunScope(v), SupersededBy(chatID, byRunID)); err != nil {
			return fmt.Errorf("runcontrol: supersede run %s: %w", v, err)
		}
	}
	return nil
}
