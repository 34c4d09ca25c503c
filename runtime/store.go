package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// RunStatus is the state of a run record.
type RunStatus string

// Run statuses. Pending is a run created but not yet started.
const (
	RunPending     RunStatus = "pending"
	RunRunning     RunStatus = "running"
	RunCompleted   RunStatus = "completed"
	RunFailed      RunStatus = "failed"
	RunCancelled   RunStatus = "cancelled"
	RunInterrupted RunStatus = "interrupted"
)

// RunStatuses are the run statuses, in a run's order.
var RunStatuses = []RunStatus{RunPending, RunRunning, RunCompleted, RunFailed, RunCancelled, RunInterrupted}

// Finished reports whether s is terminal.
func (s RunStatus) Finished() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled || s == RunInterrupted
}

// NodeStatus is the state of one node in one run.
type NodeStatus string

// Node statuses as checkpoints record them.
const (
	NodePending      NodeStatus = "pending"
	NodeRunning      NodeStatus = "running"
	NodeSucceeded    NodeStatus = "succeeded"
	NodeFailed       NodeStatus = "failed"
	NodeSkipped      NodeStatus = "skipped"
	NodeCancelled    NodeStatus = "cancelled"
	NodeInterrupted  NodeStatus = "interrupted"
	NodeStaleRunning NodeStatus = "stale_running"
)

// Effect declares what a node does to the world; it decides what may run
// again on resume. Succeeded write, external and human nodes are never
// executed again, even when their inputs changed.
type Effect string

// Effects. The empty value means EffectPure.
const (
	EffectPure     Effect = "pure"
	EffectRead     Effect = "read"
	EffectWrite    Effect = "write"
	EffectExternal Effect = "external"
	EffectHuman    Effect = "human"
)

// Sticky reports whether a succeeded node of this effect must never run again.
func (e Effect) Sticky() bool {
	return e == EffectWrite || e == EffectExternal || e == EffectHuman
}

// RunRecord is the durable description of a run: enough to resume it
// given the graph.
type RunRecord struct {
	ID string `json:"id"`
	// ParentID is the run this one continues (resume into a new run).
	ParentID string `json:"parentId,omitempty"`
	// RootID is the first run of the lineage; a fresh run is its own root.
	// Node inputs hashes are scoped by it, so continuations replay.
	RootID       string         `json:"rootId"`
	ChatID       string         `json:"chatId,omitempty"`
	GraphID      string         `json:"graphId"`
	PlanVersion  int64          `json:"planVersion"`
	Kind         string         `json:"kind,omitempty"`
	Attrs        map[string]any `json:"attrs,omitempty"`
	EntryNodeIDs []string       `json:"entryNodeIds"`
	Input        any            `json:"input,omitempty"`
	Options      RunOptions     `json:"options"`
	Status       RunStatus      `json:"status"`
	Error        string         `json:"error,omitempty"`
	// Interrupts pending when the run ended interrupted.
	Interrupts []InterruptInfo `json:"interrupts,omitempty"`
	// Answers are the resume values this run was started with, by
	// interrupt id, so a recovered run gives them again.
	Answers map[string]any `json:"answers,omitempty"`
	// LastSeq is the seq of the last event appended.
	LastSeq int64 `json:"lastSeq"`
	// Token is the fencing token of the lease holder that wrote the record.
	Token     int64     `json:"token"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// RunOptions are the per-run policies a run record keeps.
type RunOptions struct {
	MaxParallel     int           `json:"maxParallel,omitempty"`
	FailurePolicy   FailurePolicy `json:"failurePolicy,omitempty"`
	MaxNodeFailures int           `json:"maxNodeFailures,omitempty"`
	// Durability overrides the engine's default mode for this run.
	Durability Durability `json:"durability,omitempty"`
	// ForkAtSeq is the parent's event seq a fork started from
	// (ResumeRequest.AtSeq; 0: the parent's end). The kernel sets it, so
	// that a recovered run starts from the same point as the run did.
	ForkAtSeq int64 `json:"forkAtSeq,omitempty"`
}

// FailurePolicy decides what a node failure with no failure path does.
type FailurePolicy string

// Failure policies. The empty value means FailFast.
const (
	// FailFast cancels in-flight nodes and skips the rest.
	FailFast FailurePolicy = "fail_fast"
	// FailOpen lets independent branches finish; the run still ends failed.
	FailOpen FailurePolicy = "fail_open"
)

// Checkpoint is the latest recorded state of one node in one run.
type Checkpoint struct {
	RunID       string     `json:"runId"`
	NodeID      string     `json:"nodeId"`
	Status      NodeStatus `json:"status"`
	PlanVersion int64      `json:"planVersion"`
	InputsHash  string     `json:"inputsHash,omitempty"`
	Effect      Effect     `json:"effect,omitempty"`
	Output      any        `json:"output,omitempty"`
	Summary     string     `json:"summary,omitempty"`
	Error       string     `json:"error,omitempty"`
	ErrorCode   string     `json:"errorCode,omitempty"`
	// ErrorTrace keeps detail that never goes on the wire (a panic's stack).
	ErrorTrace string `json:"errorTrace,omitempty"`
	// SkipReason is set on skipped nodes.
	SkipReason string `json:"skipReason,omitempty"`
	// Interrupt is, for an interrupted node, its pending interrupt; for a
	// running node resumed with a value, the interrupt that value answers.
	Interrupt *InterruptInfo `json:"interrupt,omitempty"`
	// Resumes counts the resume values this node has consumed.
	Resumes       int       `json:"resumes,omitempty"`
	Attempt       int       `json:"attempt"`
	AttemptID     string    `json:"attemptId,omitempty"`
	Replayed      bool      `json:"replayed,omitempty"`
	StartedAt     time.Time `json:"startedAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	// Token is the fencing token the write was made under.
	Token int64 `json:"token"`
}

// Store keeps run records, node checkpoints and event logs. Every write
// carries a fencing token (RunRecord.Token, Checkpoint.Token, the token
// argument); a store rejects it with ErrFenced when the run's record holds
// a newer one. Implementations are safe for concurrent use.
type Store interface {
	// CreateRun inserts a new record. A record in status RunPending is a
	// reservation of its id (written, for example, in one transaction with
	// an application's own rows before the run starts): CreateRun replaces
	// it, every field and the lease (with none). Any other record with the
	// id is ErrRunExists.
	CreateRun(ctx context.Context, r *RunRecord) error
	// GetRun returns a copy of the record; ErrRunNotFound if absent.
	GetRun(ctx context.Context, id string) (*RunRecord, error)
	// UpdateRun replaces the record (fenced).
	UpdateRun(ctx context.Context, r *RunRecord) error
	// SaveCheckpoint upserts the node's checkpoint (fenced).
	SaveCheckpoint(ctx context.Context, cp *Checkpoint) error
	// Checkpoints returns the latest checkpoint of every node of a run.
	Checkpoints(ctx context.Context, runID string) ([]*Checkpoint, error)
	// AppendEvents appends events whose seqs continue the log without a gap
	// (ErrSeqConflict otherwise) and moves the record's LastSeq (fenced).
	AppendEvents(ctx context.Context, runID string, token int64, events []Event) error
	// Events returns up to limit events with seq > after, in order (limit <= 0: all).
	Events(ctx context.Context, runID string, after int64, limit int) ([]Event, error)
}

// ErrLeaseHeld is returned by ClaimRun when another owner holds a live lease.
var ErrLeaseHeld = errors.New("run lease held by another owner")

// Lease is a process's claim on a run: while it is live, only the owner
// writes the run, with its Token.
type Lease struct {
	RunID     string    `json:"runId"`
	Owner     string    `json:"owner"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Leaser is implemented by stores that coordinate several processes.
// Tokens only ever increase for a run, and survive restarts of anything.
type Leaser interface {
	// ClaimRun takes run id's lease for owner until now+ttl when it is free,
	// expired or already owner's, and bumps the run's fencing token (the
	// record's Token becomes the new token). ErrLeaseHeld otherwise.
	ClaimRun(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error)
	// RenewLease extends a live lease; ErrFenced if the token is no longer
	// the run's newest or the lease passed to someone else.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease gives the lease up (the token stays).
	ReleaseLease(ctx context.Context, l Lease) error
	// ExpiredRuns lists up to limit runs in status running whose lease
	// expired before now (or that have no lease), oldest first.
	ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]string, error)
}

// LeaseRenewer is implemented by Leaser stores that renew many leases in
// one write (one transaction, one round trip): the engine renews every
// lease of its runs that is due in one call, not one write per run.
// renewed[i] and errs[i] are leases[i]'s outcome, as RenewLease gives it
// (ErrFenced, ErrRunNotFound), and a refused lease does not stop the
// others; err fails the call as a whole, and then no lease was renewed.
type LeaseRenewer interface {
	RenewLeases(ctx context.Context, leases []Lease, ttl time.Duration) (renewed []Lease, errs []error, err error)
}

// OwnerLister is implemented by Leaser stores that list the running runs
// whose lease names owner, expired or not, oldest first, up to limit
// (<= 0: all). An engine restarted with the same stable Config.Owner uses
// it to take its own runs back at once (through ClaimRun, which bumps each
// run's token) instead of waiting out their leases.
type OwnerLister interface {
	OwnedRuns(ctx context.Context, owner string, limit int) ([]string, error)
}

// BulkClaimer is implemented by stores that claim many expired runs in
// one write: every running run whose lease expired at now (or that has
// none), oldest first, up to limit, each with a new lease for owner.
type BulkClaimer interface {
	ClaimExpired(ctx context.Context, owner string, ttl time.Duration, now time.Time, limit int) ([]Lease, error)
}

// RunFilter selects runs to list.
type RunFilter struct {
	Status  []RunStatus
	ChatID  string
	GraphID string
	// Before/After bound CreatedAt (zero: unbounded).
	Before, After time.Time
	Limit         int // default 100
}

// Inspector is implemented by stores that can list and delete runs
// (inspection CLI, retention).
type Inspector interface {
	ListRuns(ctx context.Context, f RunFilter) ([]*RunRecord, error)
	// DeleteRun removes a run, its checkpoints and its event log.
	DeleteRun(ctx context.Context, runID string) error
	// DeleteFinishedBefore removes finished runs (completed, failed,
	// cancelled) last updated before t, with their checkpoints and events,
	// and (with an EffectLedger) the effects of lineages left with no run;
	// it returns how many runs it removed.
	DeleteFinishedBefore(ctx context.Context, t time.Time) (int, error)
}

// EffectRecord is one completed side effect, recorded under its
// idempotency key.
type EffectRecord struct {
	Key string `json:"key"`
	// RootRunID is the run lineage the effect belongs to (retention
	// deletes it with the lineage).
	RootRunID string          `json:"rootRunId"`
	NodeID    string          `json:"nodeId"`
	Kind      string          `json:"kind"`
	Value     json.RawMessage `json:"value"`
	CreatedAt time.Time       `json:"createdAt"`
}

// EffectLedger is implemented by stores that durably record completed side
// effects by idempotency key, so a resumed, retried or recovered run
// lineage never repeats one: an executor about to perform an effect looks
// its key up and reuses the recorded result. Executors reach it through
// their services, never through the kernel.
type EffectLedger interface {
	// PutEffect records rec unless its key is taken; either way it returns
	// the record kept under the key (the first one wins).
	PutEffect(ctx context.Context, rec EffectRecord) (EffectRecord, error)
	// GetEffect returns the record under key.
	GetEffect(ctx context.Context, key string) (EffectRecord, bool, error)
	// DeleteEffects removes every record of a run lineage.
	DeleteEffects(ctx context.Context, rootRunID string) error
}
