// Package runcontrol owns which runs are active and cancels them. Cancel
// wins every race.
//
// A run binds itself before it does anything, under the scopes a client can
// name before the run id exists — its chat and its client request id — and
// under its own run id:
//
//	ctx, release, err := ctl.Bind(parent, runID,
//		runcontrol.ChatScope(chatID), runcontrol.RequestScope(clientRequestID))
//	if err != nil { ... }
//	defer release()
//	if ctx.Err() != nil { ... } // a cancel arrived before the run: end it as cancelled, run no node
//
// A cancel names a scope. If runs are bound to it they are cancelled now
// (StatusCancelled with their ids); if none is, a chat or request intent is
// stored for IntentTTL (default 60s) and cancels the next run that binds to
// that scope (StatusPending), once: the intent is consumed. A run scope
// with nothing bound answers StatusNotFound and stores nothing: the server
// mints run ids and binds a run before it reveals its id, so an unbound run
// id is unknown or finished, and the durable store says which — or an
// orphan, a run whose process died that recovery will bind again:
// CancelOrphan keeps the intent for such a run's next Bind.
//
//	res, err := ctl.Cancel(ctx, runcontrol.ChatScope(chatID), runcontrol.ErrUserCancel)
//
// The bound context is cancelled with a *CancelError: context.Cause(ctx)
// tells ErrUserCancel, ErrShutdown, ErrLeaseLost, ErrTimeout,
// ErrSuperseded and ErrUserRollback apart (errors.Is), names the scope the cancel came through
// and keeps the canceller's detail; Code gives the stable code for events.
//
// # Why no cancel is lost
//
// Both sides write before they read, and the two reads are ordered by one
// critical section per operation:
//
//   - Bind writes the binding, then consumes the intents of its scopes.
//   - Cancel reads the bindings of its scope, and writes an intent only if
//     there are none.
//
// In Memory each operation is one critical section under one mutex; in the
// Redis controller each is one Lua script, which Redis runs atomically.
// Either way the two operations are totally ordered. If Cancel comes first,
// it found no binding and stored the intent before Bind looked, so Bind
// finds it and returns a context that is already cancelled. If Bind comes
// first, Cancel finds the binding and cancels the run. There is no third
// order. (A write-then-check protocol without atomic sections works too —
// Bind: write binding, then read intents; Cancel: write intent, then read
// bindings — since at least one side must see the other's write; the
// scripts are used instead because they also consume an intent exactly
// once and keep Cancel from leaving an intent behind when it did find a
// run.)
//
// Across processes, Cancel's script also writes a cancel mark per
// cancelled run and PUBLISHes it; the owning process cancels the run when
// the message arrives. The process registers a binding locally before its
// Bind script runs, so no message can arrive for a binding it does not
// know yet. A message lost to a reconnect is not a lost cancel: the owner
// re-reads the marks of its runs every PollInterval (and at once after
// re-subscribing), and Check reads the mark synchronously at node start.
//
// # Double texting
//
// ChatQueue orders the runs of a chat with LangGraph's multitask strategies:
// Reject (a *BusyError with the active run ids), Enqueue (FIFO wait),
// Interrupt (cancel the active and queued runs with ErrSuperseded, wait for
// the active one to release, proceed) and Rollback (the same, and the
// caller deletes Turn.Superseded). Bind first, then Acquire with the bound
// context, so a cancel also ends the wait.
//
// Implementations: Memory and MemoryChatQueue here (one process), and
// chatgraph/runcontrol/redis for several processes. Both pass the
// conformance suites in chatgraph/runcontrol/controltest. See
// docs/runcontrol.md.
package runcontrol
