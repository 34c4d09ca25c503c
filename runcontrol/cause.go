package runcontrol

import (
	"errors"
	"fmt"
	"strings"
)

// Cancel causes. A bound context is cancelled with a *CancelError whose
// Reason is one of these, so errors.Is(context.Cause(ctx), ErrUserCancel)
// tells a user's stop from a shutdown, a lost lease, a timeout or a newer
// message. Callers may wrap them with detail: fmt.Errorf("%w: ...", ErrX).
var (
	// ErrUserCancel: a person asked to stop (cancel call, stop button).
	ErrUserCancel = errors.New("cancelled by user")
	// ErrShutdown: the process is stopping (Controller.Close, drain timeout).
	ErrShutdown = errors.New("server shutting down")
	// ErrLeaseLost: another process now owns the run (fencing token moved on).
	ErrLeaseLost = errors.New("run lease lost")
	// ErrTimeout: the run exceeded its time budget.
	ErrTimeout = errors.New("run timed out")
	// ErrSuperseded: a newer message in the chat replaced this run (double
	// texting with the interrupt or rollback strategy).
	ErrSuperseded = errors.New("superseded by a newer message")
	// ErrUserRollback: a person asked to stop the run and undo its turn
	// (a cancel with action "rollback"): the run ends cancelled, then its
	// turn's messages and the run itself are deleted.
	ErrUserRollback = errors.New("cancelled by user, its turn rolled back")
)

// reasons is the closed set of causes and their stable codes (used on the
// wire, in Redis and in run_cancelled event data).
var reasons = []struct {
	err  error
	code string
}{
	{ErrUserCancel, "user_cancel"},
	{ErrShutdown, "shutdown"},
	{ErrLeaseLost, "lease_lost"},
	{ErrTimeout, "timeout"},
	{ErrSuperseded, "superseded"},
	{ErrUserRollback, "user_rollback"},
}

// Code returns the stable code of the cause err wraps ("user_cancel",
// "shutdown", "lease_lost", "timeout", "superseded", "user_rollback"),
// or "" if it wraps none of them.
func Code(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	return ""
}

// ReasonForCode is the inverse of Code: the sentinel for code, or nil.
func ReasonForCode(code string) error {
	for _, r := range reasons {
		if r.code == code {
			return r.err
		}
	}
	return nil
}

// CancelError is the cause a Controller cancels a bound context with:
// context.Cause(ctx) returns it. errors.Is(err, ErrUserCancel) (or any
// other reason) works through Unwrap.
type CancelError struct {
	Reason error  // one of ErrUserCancel, ErrShutdown, ErrLeaseLost, ErrTimeout, ErrSuperseded, ErrUserRollback
	Scope  Scope  // the scope the cancel named (the run's own scope for Close)
	Detail string // the cause's full message when the canceller added detail, else ""
}

func (e *CancelError) Error() string {
	msg := e.Reason.Error()
	if e.Detail != "" {
		msg = e.Detail
	}
	return fmt.Sprintf("run cancelled (%s via %s): %s", Code(e.Reason), e.Scope, msg)
}

// Unwrap returns Reason.
func (e *CancelError) Unwrap() error { return e.Reason }

// ParseCancelError reads back a cause that was stored as text (a run
// record keeps its cancel cause as Error()): the *CancelError that wrote
// text, or nil if text is not one.
func ParseCancelError(text string) *CancelError {
	rest, ok := strings.CutPrefix(text, "run cancelled (")
	if !ok {
		return nil
	}
	code, rest, ok := strings.Cut(rest, " via ")
	if !ok {
		return nil
	}
	scope, detail, ok := strings.Cut(rest, "): ")
	reason := ReasonForCode(code)
	if !ok || reason == nil {
		return nil
	}
	sc, err := ParseScope(scope)
	if err != nil {
		return nil
	}
	e := &CancelError{Reason: reason, Scope: sc}
	if detail != reason.Error() {
		e.Detail = detail
	}
	return e
}

// NewCancelError builds the cause for a cancel of scope s. A nil cause
// means ErrUserCancel. cause must wrap one of the six reasons, or be a
// *CancelError (its reason and detail are kept, the scope is s);
// otherwise it returns ErrInvalidCause.
func NewCancelError(s Scope, cause error) (*CancelError, error) {
	if cause == nil {
		return &CancelError{Reason: ErrUserCancel, Scope: s}, nil
	}
	var ce *CancelError
	if errors.As(cause, &ce) {
		return &CancelError{Reason: ce.Reason, Scope: s, Detail: ce.Detail}, nil
	}
	for _, r := range reasons {
		if errors.Is(cause, r.err) {
			e := &CancelError{Reason: r.err, Scope: s}
			if cause != r.err {
				e.Detail = cause.Error()
			}
			return e, nil
		}
	}
	return nil, fmt.Errorf("%w: %v", ErrInvalidCause, cause)
}
