package runcontrol

import (
	"context"
	"errors"
	"time"
)

// Errors returned by Controller methods.
var (
	// ErrInvalidScope: a scope's kind is unknown or its id empty/too long.
	ErrInvalidScope = errors.New("runcontrol: invalid scope")
	// ErrInvalidCause: a cancel cause wraps none of the six reasons.
	ErrInvalidCause = errors.New("runcontrol: invalid cancel cause")
	// ErrAlreadyBound: Bind was called for a run id that is bound already.
	ErrAlreadyBound = errors.New("runcontrol: run already bound")
	// ErrClosed: the controller was closed.
	ErrClosed = errors.New("runcontrol: controller closed")
)

// Cancel statuses.
const (
	// StatusCancelled: runs were bound to the scope; they are cancelled now.
	StatusCancelled = "cancelled"
	// StatusPending: nothing is bound to the chat or request scope; the
	// intent is stored for DefaultIntentTTL and cancels the next run that
	// binds to the scope.
	StatusPending = "pending"
	// StatusNotFound: nothing is bound to the run scope (the id is unknown
	// or the run has finished). Nothing is stored and nothing changes: run
	// ids are minted by the server, which binds a run before it reveals its
	// id, so an unbound run id never starts later. The caller asks the
	// durable store whether the run exists (404), has finished, or is an
	// orphan that recovery will bind again (CancelOrphan).
	StatusNotFound = "not_found"
)

// DefaultIntentTTL is how long a pending cancel intent waits for its run.
const DefaultIntentTTL = 60 * time.Second

// CancelResult answers a Cancel.
type CancelResult struct {
	Status string   // StatusCancelled, StatusPending or StatusNotFound
	RunIDs []string // the runs cancelled (sorted), for StatusCancelled only
}

// Controller owns which runs are active and cancels them. Cancel wins every
// race: whatever the interleaving of Bind and Cancel (in one process or
// across processes), a cancel for a scope either cancels the runs bound to
// it or is stored and cancels the next run that binds to it. All methods
// are safe for concurrent use.
type Controller interface {
	// Bind registers runID under scopes (RunScope(runID) is always added)
	// and returns a context derived from parent that is cancelled, with a
	// *CancelError cause, when a cancel for any of those scopes arrives. A
	// pending intent stored before Bind (within its TTL) for one of the
	// scopes is consumed, and the returned context is already cancelled
	// when Bind returns: the caller must check ctx.Err() before executing
	// anything. release unbinds the run and cancels ctx (with
	// context.Canceled if nothing cancelled it before); it is idempotent
	// and must be called when the run ends. Bind fails with
	// ErrAlreadyBound if runID is bound, ErrInvalidScope for a bad id or
	// scope, the parent's cause if parent is already done, ErrClosed after
	// Close.
	Bind(parent context.Context, runID string, scopes ...Scope) (ctx context.Context, release func(), err error)

	// Cancel cancels the runs bound to s now (StatusCancelled with their
	// ids) or, if there are none, stores the intent for a chat or request
	// scope (StatusPending) and answers StatusNotFound for a run scope. A
	// nil cause means ErrUserCancel; a cause must wrap one of the reasons
	// (ErrInvalidCause otherwise). Cancelling a cancelled run again is
	// harmless: the first cause stays. ctx bounds only the call itself.
	Cancel(ctx context.Context, s Scope, cause error) (CancelResult, error)

	// CancelOrphan cancels run runID as Cancel(RunScope(runID)) does if it
	// is bound; if it is not, the intent is stored for IntentTTL
	// (StatusPending) and cancels the run's next Bind, which consumes it.
	// It is for an orphaned run: one the durable store shows running (or
	// reserved) whose process died, and which recovery will bind again.
	// Cancel keeps nothing for a run scope, since an unbound run id
	// otherwise never starts later. The cause rules are Cancel's.
	CancelOrphan(ctx context.Context, runID string, cause error) (CancelResult, error)

	// Active lists the run ids bound to s, sorted. Cancelled runs stay
	// listed until they release.
	Active(ctx context.Context, s Scope) ([]string, error)

	// Check returns the cause (a *CancelError) if runID has been cancelled
	// and nil otherwise. It is cheap enough to call at every node start;
	// the Redis controller also reads the stored cancel mark, so a cancel
	// whose pub/sub message was lost is seen here at once (and the bound
	// context is cancelled with it).
	Check(ctx context.Context, runID string) error

	// Close cancels the runs still bound through this controller with
	// ErrShutdown, unbinds them and stops background work. It is
	// idempotent; afterwards Bind, Cancel and Active return ErrClosed.
	Close() error
}
