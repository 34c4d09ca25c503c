package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// Option tunes Run.
type Option func(*suite)

// Durable tells the suite how to open a second, independent store on the
// data a store returned by open holds — what another process, or the same
// process after a restart, would see. reopen must leave s usable and
// register the new store's cleanup with t.Cleanup. It enables the restart
// test and the races between two store instances; without it those tests
// skip (the in-memory store has nothing to reopen) or race goroutines on
// one instance.
func Durable(reopen func(t *testing.T, s runtime.Store) runtime.Store) Option {
	return func(s *suite) { s.reopen = reopen }
}

// ReplacesNUL tells the suite that the store writes U+0000 in text as
// U+FFFD, as one on PostgreSQL must (its text holds no U+0000); without
// it the suite expects text back as it was written.
func ReplacesNUL() Option {
	return func(s *suite) { s.replacesNUL = true }
}

type suite struct {
	open        func(t *testing.T) runtime.Store
	reopen      func(t *testing.T, s runtime.Store) runtime.Store
	replacesNUL bool
}

// wait bounds every poll for something that happens in time (a lease
// expiring). Nothing in the suite sleeps to wait for an event.
const wait = 10 * time.Second

// Run runs the conformance suite against the stores open returns. open
// must return a fresh, empty store for each call and register its cleanup
// with t.Cleanup. Subtests are parallel. Leaser, Inspector and
// EffectLedger tests skip when the store does not implement them.
func Run(t *testing.T, open func(t *testing.T) runtime.Store, opts ...Option) {
	s := &suite{open: open}
	for _, o := range opts {
		o(s)
	}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"CreateAndGetRun", s.testCreateGet},
		{"UpdateRun", s.testUpdateRun},
		{"CheckpointFieldsRoundTrip", s.testCheckpointFields},
		{"CheckpointStatusesAndOutputs", s.testCheckpointStatuses},
		{"CheckpointUpsertOrder", s.testCheckpointUpsert},
		{"EventsAppendAndPage", s.testEventsAppend},
		{"EventsSeqConflict", s.testEventsSeqConflict},
		{"TextWithNUL", s.testTextWithNUL},
		{"Fencing", s.testFencing},
		{"WriteBatches", s.testWriteBatches},
		{"WriteBatchFinish", s.testWriteBatchFinish},
		{"CreateClaimed", s.testCreateClaimed},
		{"WriteBatchCreate", s.testWriteBatchCreate},
		{"CreateOverReservation", s.testCreateOverReservation},
		{"CreateClaimedOverReservation", s.testCreateClaimedOverReservation},
		{"WriteBatchCreateOverReservation", s.testWriteBatchCreateOverReservation},
		{"ReservationRace", s.testReservationRace},
		{"ClaimExpired", s.testClaimExpired},
		{"LeaseClaim", s.testLeaseClaim},
		{"LeaseRenewRelease", s.testLeaseRenewRelease},
		{"LeaseRenewMany", s.testLeaseRenewMany},
		{"LeaseExpiryFencesOldHolder", s.testLeaseExpiry},
		{"ExpiredRuns", s.testExpiredRuns},
		{"ReopenKeepsDataAndTokens", s.testReopen},
		{"ListRuns", s.testListRuns},
		{"ListRunsDefaultLimit", s.testListRunsDefaultLimit},
		{"DeleteRun", s.testDeleteRun},
		{"DeleteFinishedBefore", s.testDeleteFinishedBefore},
		{"ParallelAppends", s.testParallelAppends},
		{"SameSeqRace", s.testSameSeqRace},
		{"ClaimRace", s.testClaimRace},
		{"FencedWriterRace", s.testFencedWriterRace},
		{"EffectPutGet", s.testEffectPutGet},
		{"EffectValuesRoundTrip", s.testEffectValues},
		{"EffectFirstWriteWins", s.testEffectFirstWriteWins},
		{"DeleteEffects", s.testDeleteEffects},
		{"EffectsSurviveReopen", s.testEffectsReopen},
		{"EffectsRetention", s.testEffectsRetention},
		{"EffectsRetentionManyLineages", s.testEffectsRetentionManyLineages},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// t0 has sub-millisecond digits and a zone other than UTC: stores keep
// instants to the millisecond at least, and may return them in UTC.
var t0 = time.Date(2026, 11, 22, 10, 30, 0, 123_456_789, time.FixedZone("CET", 3600))

func at(d time.Duration) time.Time { return t0.Add(d) }

func newRun(id string) *runtime.RunRecord {
	return &runtime.RunRecord{
		ID:           id,
		ParentID:     "parent-" + id,
		RootID:       "root-" + id,
		ChatID:       "chat-1",
		GraphID:      "graph-1",
		PlanVersion:  3,
		Kind:         "interactive",
		Attrs:        map[string]any{"messageId": "m-1", "n": 2, "tags": []any{"a", "b"}},
		EntryNodeIDs: []string{"start", "side"},
		Input:        map[string]any{"text": "hello", "n": 1.5},
		Options: runtime.RunOptions{MaxParallel: 4, FailurePolicy: runtime.FailOpen, MaxNodeFailures: 2,
			Durability: runtime.DurabilityBatched},
		Answers:   map[string]any{"int-0": map[string]any{"approved": true}},
		Status:    runtime.RunRunning,
		CreatedAt: at(0),
		UpdatedAt: at(time.Second),
	}
}

// need returns st as the optional capability T, skipping the test when
// the store does not implement it.
func need[T any](t *testing.T, st runtime.Store) T {
	t.Helper()
	c, ok := st.(T)
	if !ok {
		var zero *T
		t.Skipf("%T does not implement %s", st, reflect.TypeOf(zero).Elem())
	}
	return c
}

// second returns another store on st's data when the store is durable,
// else st itself.
func (s *suite) second(t *testing.T, st runtime.Store) runtime.Store {
	if s.reopen == nil {
		return st
	}
	return s.reopen(t, st)
}

func create(t *testing.T, st runtime.Store, r *runtime.RunRecord) {
	t.Helper()
	require.NoError(t, st.CreateRun(t.Context(), r))
}

// --- comparison helpers -------------------------------------------------

func ms(x time.Time) time.Time { return x.UTC().Truncate(time.Millisecond) }

// jsonValue is v as its JSON decoding: what a durable store gives back.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func requireRun(t *testing.T, want, got *runtime.RunRecord) {
	t.Helper()
	require.NotNil(t, got)
	w, g := *want, *got
	w.CreatedAt, w.UpdatedAt = ms(w.CreatedAt), ms(w.UpdatedAt)
	g.CreatedAt, g.UpdatedAt = ms(g.CreatedAt), ms(g.UpdatedAt)
	require.Equal(t, jsonValue(t, &w), jsonValue(t, &g), "run %s", want.ID)
}

func normCheckpoint(c runtime.Checkpoint) runtime.Checkpoint {
	c.StartedAt, c.UpdatedAt, c.NextAttemptAt = ms(c.StartedAt), ms(c.UpdatedAt), ms(c.NextAttemptAt)
	return c
}

func requireCheckpoints(t *testing.T, want, got []*runtime.Checkpoint) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := normCheckpoint(*want[i]), normCheckpoint(*got[i])
		require.Equal(t, jsonValue(t, &w), jsonValue(t, &g), "checkpoint %d (%s)", i, want[i].NodeID)
		// Instants, not only their JSON text: zero stays zero.
		require.True(t, w.StartedAt.Equal(g.StartedAt), "startedAt of %s", w.NodeID)
		require.True(t, w.UpdatedAt.Equal(g.UpdatedAt), "updatedAt of %s", w.NodeID)
		require.True(t, w.NextAttemptAt.Equal(g.NextAttemptAt), "nextAttemptAt of %s", w.NodeID)
		require.Equal(t, want[i].NextAttemptAt.IsZero(), got[i].NextAttemptAt.IsZero())
	}
}

func requireEvents(t *testing.T, want, got []runtime.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		w.Time, g.Time = ms(w.Time), ms(g.Time)
		require.Equal(t, jsonValue(t, &w), jsonValue(t, &g), "event seq %d", want[i].Seq)
	}
}

func checkpoints(t *testing.T, st runtime.Store, runID string) []*runtime.Checkpoint {
	t.Helper()
	cps, err := st.Checkpoints(t.Context(), runID)
	require.NoError(t, err)
	return cps
}

func events(t *testing.T, st runtime.Store, runID string, after int64, limit int) []runtime.Event {
	t.Helper()
	evs, err := st.Events(t.Context(), runID, after, limit)
	require.NoError(t, err)
	return evs
}

func getRun(t *testing.T, st runtime.Store, id string) *runtime.RunRecord {
	t.Helper()
	r, err := st.GetRun(t.Context(), id)
	require.NoError(t, err)
	return r
}

type payload struct {
	Text  string         `json:"text"`
	N     int            `json:"n"`
	Items []string       `json:"items,omitempty"`
	Meta  map[string]any `json:"meta,omitempty"`
}

func mkEvents(runID string, from int64, n int) []runtime.Event {
	evs := make([]runtime.Event, n)
	for i := range evs {
		seq := from + int64(i)
		evs[i] = runtime.Event{
			Seq: seq, RunID: runID, ChatID: "chat-1", Type: runtime.EventNodeCompleted,
			NodeID: fmt.Sprintf("n%d", seq), Attempt: int(seq % 3), Time: at(time.Duration(seq) * time.Millisecond),
			Data: runtime.NodeCompletedData{Output: payload{Text: "out", N: int(seq)}, DurationMs: 1.25},
		}
	}
	return evs
}

// --- run records ----------------------------------------------------------

func (s *suite) testCreateGet(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()

	_, err := st.GetRun(ctx, "nope")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	r := newRun("r1")
	r.Error = "earlier error"
	r.Interrupts = []runtime.InterruptInfo{{ID: "i1", NodeID: "ask", Reason: "review", Payload: map[string]any{"q": "ok?"}}}
	r.Token = 4
	create(t, st, r)
	got := getRun(t, st, "r1")
	requireRun(t, r, got)
	require.Equal(t, runtime.RunRunning, got.Status)
	require.Equal(t, int64(4), got.Token)
	require.Equal(t, []string{"start", "side"}, got.EntryNodeIDs)
	require.Equal(t, runtime.RunOptions{MaxParallel: 4, FailurePolicy: runtime.FailOpen, MaxNodeFailures: 2,
		Durability: runtime.DurabilityBatched}, got.Options)
	require.Equal(t, jsonValue(t, r.Answers), jsonValue(t, got.Answers))
	require.True(t, ms(r.CreatedAt).Equal(ms(got.CreatedAt)))

	// A minimal record round-trips too (no input, attrs, entries).
	bare := &runtime.RunRecord{ID: "r2", RootID: "r2", GraphID: "g", Status: runtime.RunPending}
	create(t, st, bare)
	got2 := getRun(t, st, "r2")
	requireRun(t, bare, got2)
	require.Nil(t, got2.Input)
	require.True(t, got2.CreatedAt.IsZero())

	// Duplicate ids are refused and leave the first record alone.
	dup := newRun("r1")
	dup.Status = runtime.RunFailed
	require.ErrorIs(t, st.CreateRun(ctx, dup), runtime.ErrRunExists)
	requireRun(t, r, getRun(t, st, "r1"))

	// GetRun returns a copy.
	got.Status = runtime.RunFailed
	got.LastSeq = 99
	got.ChatID = "changed"
	requireRun(t, r, getRun(t, st, "r1"))
}

func (s *suite) testUpdateRun(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	r := newRun("r1")
	create(t, st, r)
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 1, 2)))

	up := newRun("r1")
	up.Status = runtime.RunInterrupted
	up.Error = "waiting"
	up.Attrs = map[string]any{"other": true}
	up.Interrupts = []runtime.InterruptInfo{{ID: "i9", NodeID: "n", Reason: "input"}}
	up.Answers = map[string]any{"i8": "yes", "i7": []any{1, 2}}
	up.Options.Durability = runtime.DurabilitySync
	up.PlanVersion = 4
	up.UpdatedAt = at(time.Minute)
	up.LastSeq = 99 // the store keeps its own LastSeq
	require.NoError(t, st.UpdateRun(ctx, up))

	got := getRun(t, st, "r1")
	want := *up
	want.LastSeq = 2
	requireRun(t, &want, got)
	require.Equal(t, int64(2), got.LastSeq)

	missing := newRun("nope")
	require.ErrorIs(t, st.UpdateRun(ctx, missing), runtime.ErrRunNotFound)
}

// --- checkpoints ----------------------------------------------------------

func fullCheckpoint(runID, nodeID string) *runtime.Checkpoint {
	return &runtime.Checkpoint{
		RunID:       runID,
		NodeID:      nodeID,
		Status:      runtime.NodeFailed,
		PlanVersion: 7,
		InputsHash:  "sha256:9f86d081884c7d65",
		Effect:      runtime.EffectExternal,
		Output:      map[string]any{"text": "partial", "n": 3, "nested": map[string]any{"list": []any{1, "two", nil, true}}},
		Summary:     "called the API",
		Error:       "upstream said no",
		ErrorCode:   runtime.ErrCodeTimeout,
		ErrorTrace:  "goroutine 7 [running]:\nmain.handler()\n\t/src/x.go:12 +0x1d",
		SkipReason:  runtime.SkipRunFailed,
		Interrupt: &runtime.InterruptInfo{
			ID: "int-1", NodeID: nodeID, Reason: "review",
			Payload: map[string]any{"question": "ship it?", "choices": []any{"yes", "no"}},
		},
		Resumes:       2,
		Attempt:       3,
		AttemptID:     "att-" + nodeID + "-3",
		Replayed:      true,
		StartedAt:     at(10 * time.Millisecond),
		UpdatedAt:     at(250 * time.Millisecond),
		NextAttemptAt: at(5 * time.Second),
	}
}

func (s *suite) testCheckpointFields(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))

	full := fullCheckpoint("r1", "full")
	bare := &runtime.Checkpoint{RunID: "r1", NodeID: "bare", Status: runtime.NodePending}
	stale := &runtime.Checkpoint{
		RunID: "r1", NodeID: "stale", Status: runtime.NodeStaleRunning, Effect: runtime.EffectWrite,
		Attempt: 1, AttemptID: "att-stale-1", StartedAt: at(0), UpdatedAt: at(time.Millisecond),
	}
	for _, cp := range []*runtime.Checkpoint{full, bare, stale} {
		require.NoError(t, st.SaveCheckpoint(ctx, cp))
	}
	got := checkpoints(t, st, "r1")
	requireCheckpoints(t, []*runtime.Checkpoint{full, bare, stale}, got)

	g := got[0]
	require.Equal(t, runtime.NodeFailed, g.Status)
	require.Equal(t, int64(7), g.PlanVersion)
	require.Equal(t, "sha256:9f86d081884c7d65", g.InputsHash)
	require.Equal(t, runtime.EffectExternal, g.Effect)
	require.Equal(t, "goroutine 7 [running]:\nmain.handler()\n\t/src/x.go:12 +0x1d", g.ErrorTrace)
	require.Equal(t, runtime.ErrCodeTimeout, g.ErrorCode)
	require.Equal(t, runtime.SkipRunFailed, g.SkipReason)
	require.NotNil(t, g.Interrupt)
	require.Equal(t, "int-1", g.Interrupt.ID)
	require.Equal(t, 2, g.Resumes)
	require.Equal(t, 3, g.Attempt)
	require.Equal(t, "att-full-3", g.AttemptID)
	require.True(t, g.Replayed)
	require.Equal(t, ms(full.NextAttemptAt), ms(g.NextAttemptAt))

	require.Nil(t, got[1].Output)
	require.Nil(t, got[1].Interrupt)
	require.True(t, got[1].StartedAt.IsZero())
	require.True(t, got[1].NextAttemptAt.IsZero())
	require.Equal(t, runtime.NodeStaleRunning, got[2].Status)

	// Checkpoints returns copies.
	got[0].Status = runtime.NodeSucceeded
	got[0].Summary = "changed"
	requireCheckpoints(t, []*runtime.Checkpoint{full, bare, stale}, checkpoints(t, st, "r1"))
}

func (s *suite) testCheckpointStatuses(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))

	statuses := []runtime.NodeStatus{
		runtime.NodePending, runtime.NodeRunning, runtime.NodeSucceeded, runtime.NodeFailed,
		runtime.NodeSkipped, runtime.NodeCancelled, runtime.NodeInterrupted, runtime.NodeStaleRunning,
	}
	outputs := []any{
		"a string", 42, 3.25, true, []any{1, "x", nil}, map[string]any{"k": map[string]any{"v": 1}},
		payload{Text: "struct", N: 7, Items: []string{"a"}, Meta: map[string]any{"z": false}}, json.RawMessage(`{"raw":[1,2]}`),
	}
	var want []*runtime.Checkpoint
	for i, status := range statuses {
		cp := &runtime.Checkpoint{
			RunID: "r1", NodeID: fmt.Sprintf("n%d-%s", i, status), Status: status,
			Output: outputs[i], Attempt: i, UpdatedAt: at(time.Duration(i) * time.Second),
		}
		require.NoError(t, st.SaveCheckpoint(ctx, cp))
		want = append(want, cp)
	}
	got := checkpoints(t, st, "r1")
	requireCheckpoints(t, want, got)
	for i, status := range statuses {
		require.Equal(t, status, got[i].Status)
		require.Equal(t, jsonValue(t, outputs[i]), jsonValue(t, got[i].Output))
	}
}

func (s *suite) testCheckpointUpsert(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))
	create(t, st, newRun("r2"))

	_, err := st.Checkpoints(ctx, "nope")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	require.Empty(t, checkpoints(t, st, "r1"))
	require.ErrorIs(t, st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: "nope", NodeID: "a"}), runtime.ErrRunNotFound)

	cp := func(runID, node string, status runtime.NodeStatus, attempt int) *runtime.Checkpoint {
		return &runtime.Checkpoint{
			RunID: runID, NodeID: node, Status: status, Attempt: attempt, AttemptID: fmt.Sprintf("%s-%d", node, attempt),
			Output: map[string]any{"node": node, "attempt": attempt}, StartedAt: at(0), UpdatedAt: at(time.Duration(attempt) * time.Second),
		}
	}
	// Ids chosen so that neither alphabetical nor reverse order is first-save order.
	order := []string{"m", "z", "a", "q"}
	for _, n := range order {
		require.NoError(t, st.SaveCheckpoint(ctx, cp("r1", n, runtime.NodeRunning, 1)))
	}
	require.NoError(t, st.SaveCheckpoint(ctx, cp("r2", "a", runtime.NodeRunning, 1)))
	// Later saves replace the checkpoint and keep the node's place.
	require.NoError(t, st.SaveCheckpoint(ctx, cp("r1", "a", runtime.NodeFailed, 1)))
	require.NoError(t, st.SaveCheckpoint(ctx, cp("r1", "m", runtime.NodeSucceeded, 2)))
	require.NoError(t, st.SaveCheckpoint(ctx, cp("r1", "a", runtime.NodeSucceeded, 2)))

	requireCheckpoints(t, []*runtime.Checkpoint{
		cp("r1", "m", runtime.NodeSucceeded, 2),
		cp("r1", "z", runtime.NodeRunning, 1),
		cp("r1", "a", runtime.NodeSucceeded, 2),
		cp("r1", "q", runtime.NodeRunning, 1),
	}, checkpoints(t, st, "r1"))
	requireCheckpoints(t, []*runtime.Checkpoint{cp("r2", "a", runtime.NodeRunning, 1)}, checkpoints(t, st, "r2"))
}

// --- events ---------------------------------------------------------------

// Text holding U+0000, which outside parts write (a tool's error quoting
// its input, a client's id), is written: a run's record, attributes and
// checkpoint keep it, or U+FFFD in its place (ReplacesNUL); its events
// keep it; an id holding it is simply not found.
func (s *suite) testTextWithNUL(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	const nul = "a\x00b"
	want := nul
	if s.replacesNUL {
		want = "a\uFFFDb"
	}
	r := newRun("r1")
	r.Attrs = map[string]any{"note": nul}
	create(t, st, r)
	r.Status, r.Error = runtime.RunFailed, "tool: "+nul
	require.NoError(t, st.UpdateRun(ctx, r))
	require.NoError(t, st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: "r1", NodeID: "n1", Status: runtime.NodeFailed,
		Error: nul, Summary: nul, Attempt: 1, StartedAt: at(0), UpdatedAt: at(time.Millisecond)}))
	evs := mkEvents("r1", 1, 1)
	evs[0].Data = map[string]any{"text": nul}
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, evs))

	got := getRun(t, st, "r1")
	require.Equal(t, "tool: "+want, got.Error)
	require.Equal(t, want, got.Attrs["note"])
	cps := checkpoints(t, st, "r1")
	require.Len(t, cps, 1)
	require.Equal(t, want, cps[0].Error)
	require.Equal(t, want, cps[0].Summary)
	read := events(t, st, "r1", 0, 0)
	require.Len(t, read, 1)
	raw, err := json.Marshal(read[0].Data)
	require.NoError(t, err)
	require.JSONEq(t, `{"text":"a\u0000b"}`, string(raw), "event payloads keep U+0000")

	_, err = st.GetRun(ctx, "r1\x00")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	_, err = st.Events(ctx, "r1\x00", 0, 0)
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
}

func (s *suite) testEventsAppend(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))
	create(t, st, newRun("r2"))

	_, err := st.Events(ctx, "nope", 0, 0)
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	require.ErrorIs(t, st.AppendEvents(ctx, "nope", 0, mkEvents("nope", 1, 1)), runtime.ErrRunNotFound)
	require.Empty(t, events(t, st, "r1", 0, 0))

	all := mkEvents("r1", 1, 10)
	// Payload shapes: a struct, a map, nothing, a string, raw JSON.
	all[0].Type, all[0].Data = runtime.EventRunStarted, runtime.RunStartedData{GraphID: "graph-1", PlanVersion: 3, EntryNodeIDs: []string{"start"}, ActiveNodeIDs: []string{"start"}}
	all[1].Data = map[string]any{"k": []any{1, 2.5, "x"}}
	all[2].Type, all[2].Data, all[2].NodeID, all[2].Attempt = runtime.EventEdgeTaken, nil, "", 0
	all[3].Data = "just text"
	all[4].Data = json.RawMessage(`{"already":"json"}`)
	all[9].Type, all[9].Data = runtime.EventRunCompleted, runtime.RunCompletedData{DurationMs: 12.5}

	require.NoError(t, st.AppendEvents(ctx, "r1", 0, all[0:3]))
	require.Equal(t, int64(3), getRun(t, st, "r1").LastSeq)
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, all[3:4]))
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, nil)) // an empty batch changes nothing
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, all[4:10]))
	require.Equal(t, int64(10), getRun(t, st, "r1").LastSeq)
	require.Equal(t, int64(0), getRun(t, st, "r2").LastSeq)

	requireEvents(t, all, events(t, st, "r1", 0, 0))
	requireEvents(t, all, events(t, st, "r1", 0, -1))
	requireEvents(t, all[:3], events(t, st, "r1", 0, 3))
	requireEvents(t, all[3:7], events(t, st, "r1", 3, 4))
	requireEvents(t, all[8:], events(t, st, "r1", 8, 0))
	requireEvents(t, all[8:], events(t, st, "r1", 8, 50))
	require.Empty(t, events(t, st, "r1", 10, 0))
	require.Empty(t, events(t, st, "r1", 500, 10))
	require.Empty(t, events(t, st, "r2", 0, 0))

	// Paging through the log visits every event once, in order.
	var paged []runtime.Event
	for after := int64(0); ; {
		page := events(t, st, "r1", after, 3)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	requireEvents(t, all, paged)

	got := events(t, st, "r1", 2, 1)[0]
	require.Equal(t, runtime.EventEdgeTaken, got.Type)
	require.Nil(t, got.Data)
	require.Empty(t, got.NodeID)
	got = events(t, st, "r1", 0, 1)[0]
	require.Equal(t, "r1", got.RunID)
	require.Equal(t, "chat-1", got.ChatID)
	require.Equal(t, runtime.EventRunStarted, got.Type)
	require.Equal(t, ms(all[0].Time), ms(got.Time))
}

func (s *suite) testEventsSeqConflict(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))

	// A log starts at seq 1.
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 0, 1)), runtime.ErrSeqConflict)
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 2, 1)), runtime.ErrSeqConflict)
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 1, 5)))

	gap := mkEvents("r1", 6, 3)
	gap[2].Seq = 9 // 6, 7, 9
	dupInBatch := mkEvents("r1", 6, 2)
	dupInBatch[1].Seq = 6
	for name, evs := range map[string][]runtime.Event{
		"ahead":        mkEvents("r1", 7, 1),
		"repeat last":  mkEvents("r1", 5, 1),
		"rewrite":      mkEvents("r1", 1, 6),
		"gap in batch": gap,
		"dup in batch": dupInBatch,
	} {
		err := st.AppendEvents(ctx, "r1", 0, evs)
		require.ErrorIs(t, err, runtime.ErrSeqConflict, name)
		// A refused batch writes nothing.
		require.Equal(t, int64(5), getRun(t, st, "r1").LastSeq, name)
		require.Empty(t, events(t, st, "r1", 5, 0), name)
	}
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 6, 2)))
	require.Len(t, events(t, st, "r1", 0, 0), 7)
}

// --- fencing --------------------------------------------------------------

func (s *suite) testFencing(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	r := newRun("r1")
	r.Token = 5
	create(t, st, r)

	stale := newRun("r1")
	stale.Token = 4
	stale.Status = runtime.RunFailed
	require.ErrorIs(t, st.UpdateRun(ctx, stale), runtime.ErrFenced)
	cp := fullCheckpoint("r1", "a")
	cp.Token = 4
	require.ErrorIs(t, st.SaveCheckpoint(ctx, cp), runtime.ErrFenced)
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", 4, mkEvents("r1", 1, 2)), runtime.ErrFenced)
	// Fencing is reported before a seq problem.
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", 4, mkEvents("r1", 7, 1)), runtime.ErrFenced)
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", 0, nil), runtime.ErrFenced)

	// Nothing a fenced writer sent was kept.
	requireRun(t, r, getRun(t, st, "r1"))
	require.Empty(t, checkpoints(t, st, "r1"))
	require.Empty(t, events(t, st, "r1", 0, 0))

	// The current token writes.
	cp.Token = 5
	require.NoError(t, st.SaveCheckpoint(ctx, cp))
	require.NoError(t, st.AppendEvents(ctx, "r1", 5, mkEvents("r1", 1, 2)))
	up := newRun("r1")
	up.Token = 5
	up.Status = runtime.RunCompleted
	require.NoError(t, st.UpdateRun(ctx, up))
	got := getRun(t, st, "r1")
	require.Equal(t, runtime.RunCompleted, got.Status)
	require.Equal(t, int64(5), got.Token)
	require.Equal(t, int64(2), got.LastSeq)
	requireCheckpoints(t, []*runtime.Checkpoint{cp}, checkpoints(t, st, "r1"))
	require.Equal(t, int64(5), checkpoints(t, st, "r1")[0].Token)
}

func (s *suite) testWriteBatches(t *testing.T) {
	st := s.open(t)
	bw, ok := st.(runtime.BatchWriter)
	if !ok {
		t.Skipf("%T does not implement runtime.BatchWriter", st)
	}
	ctx := t.Context()
	create(t, st, newRun("r1"))
	r2 := newRun("r2")
	r2.Token = 3
	create(t, st, r2)
	create(t, st, newRun("r3"))
	require.NoError(t, bw.WriteBatches(ctx, nil))

	cp := func(runID, node string, status runtime.NodeStatus, token int64) *runtime.Checkpoint {
		c := fullCheckpoint(runID, node)
		c.Status, c.Token = status, token
		return c
	}
	// Two batches of r1 in one call: the second continues the first's log.
	r1a := cp("r1", "a", runtime.NodeSucceeded, 0)
	require.NoError(t, bw.WriteBatches(ctx, []runtime.WriteBatch{
		{RunID: "r1", Checkpoints: []*runtime.Checkpoint{cp("r1", "a", runtime.NodeRunning, 0), cp("r1", "b", runtime.NodeRunning, 0)}, Events: mkEvents("r1", 1, 2)},
		{RunID: "r2", Token: 3, Checkpoints: []*runtime.Checkpoint{cp("r2", "x", runtime.NodeRunning, 3)}, Events: mkEvents("r2", 1, 1)},
		{RunID: "r1", Checkpoints: []*runtime.Checkpoint{r1a}, Events: mkEvents("r1", 3, 1)},
		{RunID: "r3", Checkpoints: []*runtime.Checkpoint{cp("r3", "only", runtime.NodePending, 0)}},
	}))
	requireCheckpoints(t, []*runtime.Checkpoint{r1a, cp("r1", "b", runtime.NodeRunning, 0)}, checkpoints(t, st, "r1"))
	requireEvents(t, mkEvents("r1", 1, 3), events(t, st, "r1", 0, 0))
	require.Equal(t, int64(3), getRun(t, st, "r1").LastSeq)
	requireCheckpoints(t, []*runtime.Checkpoint{cp("r2", "x", runtime.NodeRunning, 3)}, checkpoints(t, st, "r2"))
	require.Equal(t, int64(1), getRun(t, st, "r2").LastSeq)
	require.Len(t, checkpoints(t, st, "r3"), 1)

	// One refused write rejects the whole call: r3's good batch is not kept.
	good := runtime.WriteBatch{RunID: "r3", Checkpoints: []*runtime.Checkpoint{cp("r3", "new", runtime.NodeRunning, 0)}, Events: mkEvents("r3", 1, 2)}
	for _, tc := range []struct {
		name string
		bad  runtime.WriteBatch
		want error
	}{
		{"fenced events", runtime.WriteBatch{RunID: "r2", Token: 2, Events: mkEvents("r2", 2, 1)}, runtime.ErrFenced},
		{"fenced checkpoint", runtime.WriteBatch{RunID: "r2", Token: 3, Checkpoints: []*runtime.Checkpoint{cp("r2", "y", runtime.NodeRunning, 1)}}, runtime.ErrFenced},
		{"seq gap", runtime.WriteBatch{RunID: "r1", Events: mkEvents("r1", 5, 1)}, runtime.ErrSeqConflict},
		{"seq repeated", runtime.WriteBatch{RunID: "r1", Events: mkEvents("r1", 3, 1)}, runtime.ErrSeqConflict},
		{"unknown run", runtime.WriteBatch{RunID: "nope", Events: mkEvents("nope", 1, 1)}, runtime.ErrRunNotFound},
	} {
		for _, order := range [][]runtime.WriteBatch{{good, tc.bad}, {tc.bad, good}} {
			require.ErrorIs(t, bw.WriteBatches(ctx, order), tc.want, tc.name)
			require.Len(t, checkpoints(t, st, "r3"), 1, tc.name)
			require.Empty(t, events(t, st, "r3", 0, 0), tc.name)
			require.Zero(t, getRun(t, st, "r3").LastSeq, tc.name)
			require.Len(t, events(t, st, "r1", 0, 0), 3, tc.name)
			require.Len(t, checkpoints(t, st, "r2"), 1, tc.name)
		}
	}
	// Two batches of one run whose seqs do not chain are refused too.
	err := bw.WriteBatches(ctx, []runtime.WriteBatch{good, {RunID: "r3", Events: mkEvents("r3", 2, 1)}})
	require.ErrorIs(t, err, runtime.ErrSeqConflict)
	require.Empty(t, events(t, st, "r3", 0, 0))

	require.NoError(t, bw.WriteBatches(ctx, []runtime.WriteBatch{good, {RunID: "r3", Events: mkEvents("r3", 3, 1)}}))
	require.Len(t, events(t, st, "r3", 0, 0), 3)
	require.Len(t, checkpoints(t, st, "r3"), 2)

	// A commit with more events than one statement may carry keeps every
	// one of them, each in its run's log.
	require.NoError(t, bw.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "r1", Events: mkEvents("r1", 4, 70)},
		{RunID: "r2", Token: 3, Events: mkEvents("r2", 2, 37)}, {RunID: "r1", Events: mkEvents("r1", 74, 5)}}))
	requireEvents(t, mkEvents("r1", 1, 78), events(t, st, "r1", 0, 0))
	requireEvents(t, mkEvents("r2", 1, 38), events(t, st, "r2", 0, 0))
	require.Equal(t, int64(78), getRun(t, st, "r1").LastSeq)
}

// --- leases ---------------------------------------------------------------

func (s *suite) testLeaseClaim(t *testing.T) {
	st := s.open(t)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	r := newRun("r1")
	r.Token = 2
	create(t, st, r)

	_, err := ls.ClaimRun(ctx, "nope", "A", time.Hour)
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	before := time.Now()
	a, err := ls.ClaimRun(ctx, "r1", "A", time.Hour)
	require.NoError(t, err)
	require.Equal(t, "r1", a.RunID)
	require.Equal(t, "A", a.Owner)
	require.Greater(t, a.Token, int64(2), "the claim bumps the record's token")
	require.WithinRange(t, a.ExpiresAt, before.Add(time.Hour-time.Second), time.Now().Add(time.Hour+time.Second))
	require.Equal(t, a.Token, getRun(t, st, "r1").Token)

	// Another owner cannot take a live lease; its attempt changes nothing.
	_, err = ls.ClaimRun(ctx, "r1", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	require.Equal(t, a.Token, getRun(t, st, "r1").Token)

	// The owner may claim again: the token moves on and fences its own older writes.
	a2, err := ls.ClaimRun(ctx, "r1", "A", time.Hour)
	require.NoError(t, err)
	require.Greater(t, a2.Token, a.Token)
	cp := &runtime.Checkpoint{RunID: "r1", NodeID: "n", Status: runtime.NodeRunning, Token: a.Token}
	require.ErrorIs(t, st.SaveCheckpoint(ctx, cp), runtime.ErrFenced)
	cp.Token = a2.Token
	require.NoError(t, st.SaveCheckpoint(ctx, cp))
	require.Equal(t, a2.Token, checkpoints(t, st, "r1")[0].Token)

	// UpdateRun under the lease keeps the lease.
	up := newRun("r1")
	up.Token = a2.Token
	up.Status = runtime.RunRunning
	require.NoError(t, st.UpdateRun(ctx, up))
	_, err = ls.ClaimRun(ctx, "r1", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)

	// Leases are per run.
	create(t, st, newRun("r2"))
	b, err := ls.ClaimRun(ctx, "r2", "B", time.Hour)
	require.NoError(t, err)
	require.Equal(t, "B", b.Owner)
}

func (s *suite) testLeaseRenewRelease(t *testing.T) {
	st := s.open(t)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	create(t, st, newRun("r1"))

	a, err := ls.ClaimRun(ctx, "r1", "A", time.Minute)
	require.NoError(t, err)
	renewed, err := ls.RenewLease(ctx, a, time.Hour)
	require.NoError(t, err)
	require.Equal(t, a.Token, renewed.Token)
	require.Equal(t, "A", renewed.Owner)
	require.Equal(t, "r1", renewed.RunID)
	require.True(t, renewed.ExpiresAt.After(a.ExpiresAt.Add(50*time.Minute)), "renewal extends the lease")
	require.Equal(t, a.Token, getRun(t, st, "r1").Token, "renewal keeps the token")

	// A renewal by someone else's name or with another token is fenced.
	wrongOwner := renewed
	wrongOwner.Owner = "B"
	_, err = ls.RenewLease(ctx, wrongOwner, time.Hour)
	require.ErrorIs(t, err, runtime.ErrFenced)
	oldToken := renewed
	oldToken.Token--
	_, err = ls.RenewLease(ctx, oldToken, time.Hour)
	require.ErrorIs(t, err, runtime.ErrFenced)
	_, err = ls.RenewLease(ctx, runtime.Lease{RunID: "nope", Owner: "A", Token: 1}, time.Hour)
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	// Release frees the run at once and keeps the token.
	require.NoError(t, ls.ReleaseLease(ctx, renewed))
	require.Equal(t, a.Token, getRun(t, st, "r1").Token)
	b, err := ls.ClaimRun(ctx, "r1", "B", time.Hour)
	require.NoError(t, err)
	require.Greater(t, b.Token, a.Token)

	// The old holder can neither renew nor release B's lease.
	_, err = ls.RenewLease(ctx, renewed, time.Hour)
	require.ErrorIs(t, err, runtime.ErrFenced)
	require.ErrorIs(t, ls.ReleaseLease(ctx, renewed), runtime.ErrFenced)
	_, err = ls.ClaimRun(ctx, "r1", "C", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)

	// A released lease cannot be renewed.
	require.NoError(t, ls.ReleaseLease(ctx, b))
	_, err = ls.RenewLease(ctx, b, time.Hour)
	require.ErrorIs(t, err, runtime.ErrFenced)
}

// RenewLeases renews every live lease of the call and refuses each other
// one with RenewLease's error, without failing the rest.
func (s *suite) testLeaseRenewMany(t *testing.T) {
	st := s.open(t)
	lr := need[runtime.LeaseRenewer](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	var live []runtime.Lease
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		create(t, st, newRun(id))
		l, err := ls.ClaimRun(ctx, id, "A", time.Minute)
		require.NoError(t, err)
		live = append(live, l)
	}
	// r3's lease passes to B; r4's is released.
	b, err := ls.ClaimRun(ctx, "r3", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	require.NoError(t, ls.ReleaseLease(ctx, live[2]))
	b, err = ls.ClaimRun(ctx, "r3", "B", time.Hour)
	require.NoError(t, err)
	require.NoError(t, ls.ReleaseLease(ctx, live[3]))
	oldToken := live[1]
	oldToken.Token--
	leases := []runtime.Lease{live[0], live[2], {RunID: "nope", Owner: "A", Token: 1}, live[3], live[1], oldToken}

	renewed, errs, err := lr.RenewLeases(ctx, leases, time.Hour)
	require.NoError(t, err)
	require.Len(t, renewed, len(leases))
	require.Len(t, errs, len(leases))
	for _, i := range []int{0, 4} {
		require.NoError(t, errs[i], leases[i].RunID)
		require.Equal(t, leases[i].RunID, renewed[i].RunID)
		require.Equal(t, leases[i].Token, renewed[i].Token)
		require.Equal(t, "A", renewed[i].Owner)
		require.True(t, renewed[i].ExpiresAt.After(leases[i].ExpiresAt.Add(50*time.Minute)), "renewal extends the lease")
		require.Equal(t, leases[i].Token, getRun(t, st, leases[i].RunID).Token, "renewal keeps the token")
	}
	require.ErrorIs(t, errs[1], runtime.ErrFenced, "r3's lease is B's")
	require.ErrorIs(t, errs[2], runtime.ErrRunNotFound)
	require.ErrorIs(t, errs[3], runtime.ErrFenced, "r4's lease was released")
	require.ErrorIs(t, errs[5], runtime.ErrFenced, "an older token")

	// The renewal held: r1 is A's for an hour, and B's lease on r3 is
	// untouched (B still renews it; C cannot claim it).
	_, err = ls.ClaimRun(ctx, "r1", "C", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	_, err = ls.RenewLease(ctx, b, time.Hour)
	require.NoError(t, err)
	_, err = ls.ClaimRun(ctx, "r3", "C", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)

	// An empty call renews nothing.
	renewed, errs, err = lr.RenewLeases(ctx, nil, time.Hour)
	require.NoError(t, err)
	require.Empty(t, renewed)
	require.Empty(t, errs)
}

func (s *suite) testLeaseExpiry(t *testing.T) {
	st := s.open(t)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	create(t, st, newRun("r1"))
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 1, 1)))

	const ttl = 200 * time.Millisecond
	a, err := ls.ClaimRun(ctx, "r1", "A", ttl)
	require.NoError(t, err)
	require.NoError(t, st.AppendEvents(ctx, "r1", a.Token, mkEvents("r1", 2, 1)))

	// While A's lease is surely live, B is refused.
	_, err = ls.ClaimRun(ctx, "r1", "B", time.Hour)
	if time.Now().Before(a.ExpiresAt) {
		require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	}

	// Once it expired, B takes over.
	var b runtime.Lease
	deadline := time.Now().Add(wait)
	for {
		b, err = ls.ClaimRun(ctx, "r1", "B", time.Hour)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, runtime.ErrLeaseHeld)
		require.True(t, time.Now().Before(deadline), "lease of ttl %s never expired", ttl)
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, time.Now().Before(a.ExpiresAt), "claimed before the lease expired")
	require.Greater(t, b.Token, a.Token)

	// A, paused past its lease, is fenced off every write.
	up := newRun("r1")
	up.Token = a.Token
	up.Status = runtime.RunCompleted
	require.ErrorIs(t, st.UpdateRun(ctx, up), runtime.ErrFenced)
	require.ErrorIs(t, st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: "r1", NodeID: "n", Status: runtime.NodeSucceeded, Token: a.Token}), runtime.ErrFenced)
	require.ErrorIs(t, st.AppendEvents(ctx, "r1", a.Token, mkEvents("r1", 3, 1)), runtime.ErrFenced)
	_, err = ls.RenewLease(ctx, a, time.Hour)
	require.ErrorIs(t, err, runtime.ErrFenced)
	require.ErrorIs(t, ls.ReleaseLease(ctx, a), runtime.ErrFenced)

	// B writes; A's attempts left no trace.
	require.NoError(t, st.AppendEvents(ctx, "r1", b.Token, mkEvents("r1", 3, 1)))
	got := getRun(t, st, "r1")
	require.Equal(t, runtime.RunRunning, got.Status)
	require.Equal(t, b.Token, got.Token)
	require.Equal(t, int64(3), got.LastSeq)
	require.Empty(t, checkpoints(t, st, "r1"))
}

func (s *suite) testExpiredRuns(t *testing.T) {
	st := s.open(t)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()

	mk := func(id string, status runtime.RunStatus, created time.Duration) {
		r := newRun(id)
		r.Status = status
		r.CreatedAt = at(created)
		create(t, st, r)
	}
	// Created out of order: "oldest first" is by CreatedAt, not insertion.
	mk("no-lease-new", runtime.RunRunning, 5*time.Minute)
	mk("expired-old", runtime.RunRunning, 1*time.Minute)
	mk("live", runtime.RunRunning, 0)
	mk("released", runtime.RunRunning, 3*time.Minute)
	mk("no-lease-old", runtime.RunRunning, 2*time.Minute)
	mk("completed", runtime.RunCompleted, 0)
	mk("pending", runtime.RunPending, 0)
	mk("interrupted", runtime.RunInterrupted, 0)
	mk("failed-expired", runtime.RunFailed, 0)

	_, err := ls.ClaimRun(ctx, "expired-old", "A", time.Minute)
	require.NoError(t, err)
	_, err = ls.ClaimRun(ctx, "failed-expired", "A", time.Minute)
	require.NoError(t, err)
	_, err = ls.ClaimRun(ctx, "live", "A", 24*time.Hour)
	require.NoError(t, err)
	rel, err := ls.ClaimRun(ctx, "released", "A", 24*time.Hour)
	require.NoError(t, err)
	require.NoError(t, ls.ReleaseLease(ctx, rel))

	// Seen from an hour ahead, the one-minute leases have expired.
	later := time.Now().Add(time.Hour)
	ids, err := ls.ExpiredRuns(ctx, later, 100)
	require.NoError(t, err)
	require.Equal(t, []string{"expired-old", "no-lease-old", "released", "no-lease-new"}, ids)

	ids, err = ls.ExpiredRuns(ctx, later, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"expired-old", "no-lease-old"}, ids)

	// Now, the live leases still hold.
	ids, err = ls.ExpiredRuns(ctx, time.Now(), 100)
	require.NoError(t, err)
	require.Equal(t, []string{"no-lease-old", "released", "no-lease-new"}, ids)

	// Two days ahead, every running run is listed.
	ids, err = ls.ExpiredRuns(ctx, time.Now().Add(48*time.Hour), 0)
	require.NoError(t, err)
	require.Equal(t, []string{"live", "expired-old", "no-lease-old", "released", "no-lease-new"}, ids)

	// Running runs whose lease names A, expired or live; not released ones.
	ol, ok := st.(runtime.OwnerLister)
	require.True(t, ok, "a Leaser store implements OwnerLister")
	ids, err = ol.OwnedRuns(ctx, "A", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"live", "expired-old"}, ids)
	ids, err = ol.OwnedRuns(ctx, "A", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, ids)
	ids, err = ol.OwnedRuns(ctx, "B", 0)
	require.NoError(t, err)
	require.Empty(t, ids)
	ids, err = ol.OwnedRuns(ctx, "", 0)
	require.NoError(t, err)
	require.Empty(t, ids, "no lease is no owner")
}

func (s *suite) testReopen(t *testing.T) {
	if s.reopen == nil {
		t.Skip("store is not durable (no storetest.Durable option)")
	}
	st := s.open(t)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	r := newRun("r1")
	create(t, st, r)
	var tok int64
	for range 3 {
		l, err := ls.ClaimRun(ctx, "r1", "A", time.Hour)
		require.NoError(t, err)
		require.Greater(t, l.Token, tok)
		tok = l.Token
	}
	cp := fullCheckpoint("r1", "a")
	cp.Token = tok
	require.NoError(t, st.SaveCheckpoint(ctx, cp))
	evs := mkEvents("r1", 1, 3)
	require.NoError(t, st.AppendEvents(ctx, "r1", tok, evs))

	// Restart: close the first store, open another on its data.
	if c, ok := st.(io.Closer); ok {
		require.NoError(t, c.Close())
	}
	st2 := s.reopen(t, st)
	ls2 := need[runtime.Leaser](t, st2)

	want := *r
	want.Token, want.LastSeq = tok, 3
	requireRun(t, &want, getRun(t, st2, "r1"))
	requireCheckpoints(t, []*runtime.Checkpoint{cp}, checkpoints(t, st2, "r1"))
	requireEvents(t, evs, events(t, st2, "r1", 0, 0))

	// The lease survived the restart too, and the token keeps increasing.
	_, err := ls2.ClaimRun(ctx, "r1", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	l, err := ls2.ClaimRun(ctx, "r1", "A", time.Hour)
	require.NoError(t, err)
	require.Greater(t, l.Token, tok)
	require.ErrorIs(t, st2.AppendEvents(ctx, "r1", tok, mkEvents("r1", 4, 1)), runtime.ErrFenced)
	require.NoError(t, st2.AppendEvents(ctx, "r1", l.Token, mkEvents("r1", 4, 1)))
}

// --- inspection -----------------------------------------------------------

func (s *suite) testListRuns(t *testing.T) {
	st := s.open(t)
	in := need[runtime.Inspector](t, st)
	ctx := t.Context()

	mk := func(id, chat, graph string, status runtime.RunStatus, created time.Duration) *runtime.RunRecord {
		r := newRun(id)
		r.ChatID, r.GraphID, r.Status, r.CreatedAt = chat, graph, status, at(created)
		create(t, st, r)
		return r
	}
	r3 := mk("r3", "c2", "g1", runtime.RunFailed, 3*time.Minute)
	r1 := mk("r1", "c1", "g1", runtime.RunCompleted, 1*time.Minute)
	mk("r5", "", "g1", runtime.RunPending, 5*time.Minute)
	mk("r2", "c1", "g2", runtime.RunRunning, 2*time.Minute)
	mk("r4", "c2", "g1", runtime.RunInterrupted, 4*time.Minute)

	ids := func(f runtime.RunFilter) []string {
		t.Helper()
		runs, err := in.ListRuns(ctx, f)
		require.NoError(t, err)
		out := []string{}
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    runtime.RunFilter
		want []string
	}{
		{"all newest first", runtime.RunFilter{}, []string{"r5", "r4", "r3", "r2", "r1"}},
		{"status set", runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunCompleted, runtime.RunFailed}}, []string{"r3", "r1"}},
		{"one status", runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunRunning}}, []string{"r2"}},
		{"by chat id", runtime.RunFilter{ChatID: "c1"}, []string{"r2", "r1"}},
		{"graph", runtime.RunFilter{GraphID: "g1"}, []string{"r5", "r4", "r3", "r1"}},
		{"chat and status", runtime.RunFilter{ChatID: "c2", Status: []runtime.RunStatus{runtime.RunInterrupted}}, []string{"r4"}},
		{"after", runtime.RunFilter{After: at(150 * time.Second)}, []string{"r5", "r4", "r3"}},
		{"before", runtime.RunFilter{Before: at(210 * time.Second)}, []string{"r3", "r2", "r1"}},
		{"window", runtime.RunFilter{After: at(90 * time.Second), Before: at(270 * time.Second)}, []string{"r4", "r3", "r2"}},
		{"limit", runtime.RunFilter{Limit: 2}, []string{"r5", "r4"}},
		{"limit with filter", runtime.RunFilter{GraphID: "g1", Limit: 3}, []string{"r5", "r4", "r3"}},
		{"no match", runtime.RunFilter{ChatID: "nope"}, []string{}},
	} {
		require.Equal(t, tc.want, ids(tc.f), tc.name)
	}

	// Listed records are whole.
	runs, err := in.ListRuns(ctx, runtime.RunFilter{Status: []runtime.RunStatus{runtime.RunCompleted, runtime.RunFailed}})
	require.NoError(t, err)
	requireRun(t, r3, runs[0])
	requireRun(t, r1, runs[1])
}

func (s *suite) testListRunsDefaultLimit(t *testing.T) {
	st := s.open(t)
	in := need[runtime.Inspector](t, st)
	for i := range 101 {
		r := newRun(fmt.Sprintf("r%03d", i))
		r.CreatedAt = at(time.Duration(i) * time.Second)
		create(t, st, r)
	}
	runs, err := in.ListRuns(t.Context(), runtime.RunFilter{})
	require.NoError(t, err)
	require.Len(t, runs, 100)
	require.Equal(t, "r100", runs[0].ID)
	require.Equal(t, "r001", runs[99].ID)
}

func (s *suite) testDeleteRun(t *testing.T) {
	st := s.open(t)
	in := need[runtime.Inspector](t, st)
	ctx := t.Context()
	for _, id := range []string{"r1", "r2"} {
		create(t, st, newRun(id))
		require.NoError(t, st.SaveCheckpoint(ctx, fullCheckpoint(id, "a")))
		require.NoError(t, st.AppendEvents(ctx, id, 0, mkEvents(id, 1, 3)))
	}

	require.NoError(t, in.DeleteRun(ctx, "r1"))
	_, err := st.GetRun(ctx, "r1")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	_, err = st.Checkpoints(ctx, "r1")
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	_, err = st.Events(ctx, "r1", 0, 0)
	require.ErrorIs(t, err, runtime.ErrRunNotFound)
	require.ErrorIs(t, in.DeleteRun(ctx, "r1"), runtime.ErrRunNotFound)

	// The other run is untouched.
	require.Len(t, checkpoints(t, st, "r2"), 1)
	require.Len(t, events(t, st, "r2", 0, 0), 3)

	// The id can be used again and starts empty.
	create(t, st, newRun("r1"))
	require.Empty(t, checkpoints(t, st, "r1"))
	require.Empty(t, events(t, st, "r1", 0, 0))
	require.NoError(t, st.AppendEvents(ctx, "r1", 0, mkEvents("r1", 1, 1)))
}

func (s *suite) testDeleteFinishedBefore(t *testing.T) {
	st := s.open(t)
	in := need[runtime.Inspector](t, st)
	ctx := t.Context()

	cut := at(time.Hour)
	mk := func(id string, status runtime.RunStatus, updated time.Time) {
		r := newRun(id)
		r.Status, r.UpdatedAt = status, updated
		create(t, st, r)
		require.NoError(t, st.SaveCheckpoint(ctx, fullCheckpoint(id, "a")))
		require.NoError(t, st.AppendEvents(ctx, id, 0, mkEvents(id, 1, 2)))
	}
	old, recent := cut.Add(-time.Minute), cut.Add(time.Minute)
	mk("completed-old", runtime.RunCompleted, old)
	mk("failed-old", runtime.RunFailed, old)
	mk("cancelled-old", runtime.RunCancelled, old)
	mk("completed-recent", runtime.RunCompleted, recent)
	mk("interrupted-old", runtime.RunInterrupted, old)
	mk("running-old", runtime.RunRunning, old)
	mk("pending-old", runtime.RunPending, old)

	n, err := in.DeleteFinishedBefore(ctx, cut)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range []string{"completed-old", "failed-old", "cancelled-old"} {
		_, err := st.GetRun(ctx, id)
		require.ErrorIs(t, err, runtime.ErrRunNotFound, id)
		_, err = st.Events(ctx, id, 0, 0)
		require.ErrorIs(t, err, runtime.ErrRunNotFound, id)
	}
	for _, id := range []string{"completed-recent", "interrupted-old", "running-old", "pending-old"} {
		getRun(t, st, id)
		require.Len(t, checkpoints(t, st, id), 1, id)
		require.Len(t, events(t, st, id, 0, 0), 2, id)
	}
	// Nothing left to remove.
	n, err = in.DeleteFinishedBefore(ctx, cut)
	require.NoError(t, err)
	require.Zero(t, n)
}

// --- concurrency ----------------------------------------------------------

func (s *suite) testParallelAppends(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	const runs, perRun = 6, 30
	for i := range runs {
		create(t, st, newRun(fmt.Sprintf("r%d", i)))
	}
	errs := make(chan error, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", i)
			seq := int64(1)
			for b := 0; seq <= perRun; b++ {
				n := min(1+(b+i)%4, perRun-int(seq)+1)
				if err := st.AppendEvents(ctx, id, 0, mkEvents(id, seq, n)); err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", id, seq, err)
					return
				}
				cp := &runtime.Checkpoint{RunID: id, NodeID: fmt.Sprintf("n%d", b%5), Status: runtime.NodeSucceeded, Attempt: b}
				if err := st.SaveCheckpoint(ctx, cp); err != nil {
					errs <- fmt.Errorf("%s checkpoint: %w", id, err)
					return
				}
				seq += int64(n)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range runs {
		id := fmt.Sprintf("r%d", i)
		requireEvents(t, mkEvents(id, 1, perRun), events(t, st, id, 0, 0))
		require.Equal(t, int64(perRun), getRun(t, st, id).LastSeq)
		require.Len(t, checkpoints(t, st, id), 5)
	}
}

func (s *suite) testSameSeqRace(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, newRun("r1"))
	stores := []runtime.Store{st, s.second(t, st)}

	const writers = 8
	start := make(chan struct{})
	results := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			evs := mkEvents("r1", 1, 2)
			evs[0].Data = map[string]any{"writer": i}
			<-start
			results[i] = stores[i%2].AppendEvents(ctx, "r1", 0, evs)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range results {
		if err == nil {
			require.Equal(t, -1, winner, "two writers appended seq 1")
			winner = i
			continue
		}
		require.ErrorIs(t, err, runtime.ErrSeqConflict)
	}
	require.NotEqual(t, -1, winner)
	evs := events(t, st, "r1", 0, 0)
	require.Len(t, evs, 2)
	require.Equal(t, jsonValue(t, map[string]any{"writer": winner}), jsonValue(t, evs[0].Data))
	require.Equal(t, int64(2), getRun(t, st, "r1").LastSeq)
}

func (s *suite) testClaimRace(t *testing.T) {
	st := s.open(t)
	need[runtime.Leaser](t, st)
	other := s.second(t, st)
	ctx := t.Context()
	stores := []runtime.Leaser{st.(runtime.Leaser), need[runtime.Leaser](t, other)}
	owners := []string{"A", "B"}

	const rounds = 10
	for i := range rounds {
		create(t, st, newRun(fmt.Sprintf("r%d", i)))
	}
	for i := range rounds {
		id := fmt.Sprintf("r%d", i)
		start := make(chan struct{})
		var leases [2]runtime.Lease
		var errs [2]error
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Go(func() {
				<-start
				leases[j], errs[j] = stores[j].ClaimRun(ctx, id, owners[j], time.Hour)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for j := range 2 {
			if errs[j] == nil {
				won++
				require.Equal(t, leases[j].Token, getRun(t, st, id).Token)
				continue
			}
			require.True(t, errors.Is(errs[j], runtime.ErrLeaseHeld), "%s: %v", id, errs[j])
		}
		require.Equal(t, 1, won, "%s: exactly one claim wins", id)
	}
}

// testFencedWriterRace races a writer that keeps saving a checkpoint
// under the old token against a claim and the new holder's write of the
// same checkpoint: once the claim has returned, no old-token write may
// land, so the new holder's checkpoint is the one that stays.
func (s *suite) testFencedWriterRace(t *testing.T) {
	st := s.open(t)
	need[runtime.Leaser](t, st)
	other := s.second(t, st)
	ls := need[runtime.Leaser](t, other)
	ctx := t.Context()
	for round := range 10 {
		id := fmt.Sprintf("r%d", round)
		create(t, st, newRun(id))
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				err := st.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: id, NodeID: "x", Status: runtime.NodeRunning, Summary: "old holder", Attempt: i})
				if i == 0 {
					close(started)
				}
				if err != nil {
					if errors.Is(err, runtime.ErrFenced) {
						err = nil
					}
					done <- err
					return
				}
			}
		}()
		<-started
		l, err := ls.ClaimRun(ctx, id, "B", time.Hour)
		require.NoError(t, err)
		require.NoError(t, other.SaveCheckpoint(ctx, &runtime.Checkpoint{RunID: id, NodeID: "x", Status: runtime.NodeSucceeded, Summary: "new holder", Token: l.Token}))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(wait):
			t.Fatalf("the old holder was never fenced")
		}
		cps := checkpoints(t, st, id)
		require.Len(t, cps, 1)
		require.Equal(t, "new holder", cps[0].Summary, "round %d: an old-token write landed after the claim", round)
		require.Equal(t, l.Token, cps[0].Token)
	}
}

// --- benchmarks -------------------------------------------------------------

// BenchAppendEvent measures appending one event (a node_completed with a
// small output) per operation to one run's log.
func BenchAppendEvent(b *testing.B, open func(tb testing.TB) runtime.Store) {
	st := open(b)
	ctx := context.Background()
	require.NoError(b, st.CreateRun(ctx, newRun("bench")))
	ev := mkEvents("bench", 1, 1)[0]
	ev.Data = runtime.NodeCompletedData{Output: map[string]any{"text": "a short answer from the model", "tokens": 42}, DurationMs: 12.5}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ev.Seq = int64(i) + 1
		if err := st.AppendEvents(ctx, "bench", 0, []runtime.Event{ev}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchSaveCheckpoint measures one checkpoint upsert per operation, cycling
// over 50 nodes of one run (the first 50 insert, the rest overwrite), as a
// run's transitions do.
func BenchSaveCheckpoint(b *testing.B, open func(tb testing.TB) runtime.Store) {
	st := open(b)
	ctx := context.Background()
	require.NoError(b, st.CreateRun(ctx, newRun("bench")))
	nodes := make([]string, 50)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d", i)
	}
	cp := runtime.Checkpoint{
		RunID: "bench", Status: runtime.NodeSucceeded, PlanVersion: 1, InputsHash: "sha256:9f86d081884c7d65",
		Effect: runtime.EffectPure, Output: map[string]any{"text": "a short answer from the model", "tokens": 42},
		Attempt: 1, StartedAt: t0, UpdatedAt: t0,
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := cp
		c.NodeID = nodes[i%len(nodes)]
		c.AttemptID = c.NodeID + "-1"
		// Every write differs from the row it replaces, as real transitions
		// do (SQLite skips writing a row overwritten with identical bytes).
		c.UpdatedAt = t0.Add(time.Duration(i) * time.Microsecond)
		if err := st.SaveCheckpoint(ctx, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchWriteBatch measures one runtime.BatchWriter call per operation
// carrying what a node step writes in sync mode: its checkpoint and two
// events (node_started, node_completed). It skips stores that are not
// BatchWriters.
func BenchWriteBatch(b *testing.B, open func(tb testing.TB) runtime.Store) {
	st := open(b)
	bw, ok := st.(runtime.BatchWriter)
	if !ok {
		b.Skipf("%T does not implement runtime.BatchWriter", st)
	}
	ctx := context.Background()
	require.NoError(b, st.CreateRun(ctx, newRun("bench")))
	cp := runtime.Checkpoint{
		RunID: "bench", Status: runtime.NodeSucceeded, PlanVersion: 1, InputsHash: "sha256:9f86d081884c7d65",
		Effect: runtime.EffectPure, Output: map[string]any{"text": "a short answer from the model", "tokens": 42},
		Attempt: 1, StartedAt: t0, UpdatedAt: t0,
	}
	evs := mkEvents("bench", 1, 2)
	evs[0].Type, evs[0].Data = runtime.EventNodeStarted, runtime.NodeStartedData{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := cp
		c.NodeID = fmt.Sprintf("node-%02d", i%50)
		c.UpdatedAt = t0.Add(time.Duration(i) * time.Microsecond)
		evs[0].Seq, evs[1].Seq = 2*int64(i)+1, 2*int64(i)+2
		err := bw.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "bench", Checkpoints: []*runtime.Checkpoint{&c}, Events: evs}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchGroupCommit measures one runtime.BatchWriter call per operation
// shaped like the committer's group commit while many runs stream tokens:
// 20 batches, each one run's next token delta, cycling over 1,000 running
// runs; every fifth batch also carries its node's checkpoint. It reports
// µs/event and the p50 and p99 of the calls beside ns/op. It skips stores
// that are not BatchWriters.
func BenchGroupCommit(b *testing.B, open func(tb testing.TB) runtime.Store) {
	const runs, perCommit = 1000, 20
	st := open(b)
	bw, ok := st.(runtime.BatchWriter)
	if !ok {
		b.Skipf("%T does not implement runtime.BatchWriter", st)
	}
	ctx := context.Background()
	ids := make([]string, runs)
	last := make([]int64, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%04d", i)
		require.NoError(b, st.CreateRun(ctx, newRun(ids[i])))
	}
	type progress struct {
		Note string `json:"note"`
	}
	next := 0
	batches := make([]runtime.WriteBatch, perCommit)
	took := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range batches {
			r := next % runs
			next++
			last[r]++
			ev := runtime.Event{Seq: last[r], RunID: ids[r], Type: "progress", NodeID: "step",
				Attempt: 1, Time: t0.Add(time.Duration(i) * time.Millisecond), Data: &progress{Note: " word"}}
			batches[j] = runtime.WriteBatch{RunID: ids[r], Events: []runtime.Event{ev}}
			if j%5 == 0 {
				batches[j].Checkpoints = []*runtime.Checkpoint{{RunID: ids[r], NodeID: "step", Status: runtime.NodeRunning,
					PlanVersion: 1, Attempt: 1, AttemptID: "step-1", StartedAt: t0, UpdatedAt: ev.Time}}
			}
		}
		start := time.Now()
		if err := bw.WriteBatches(ctx, batches); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*perCommit), "µs/event")
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// BenchRenewLeases measures one renewal round of an engine with 256 runs
// per operation: "together" renews the 256 leases in one RenewLeases call
// (runtime.LeaseRenewer), "one-by-one" calls RenewLease 256 times, as
// engines did before they renewed together. It reports µs/lease. It skips
// stores that are not both Leaser and LeaseRenewer.
func BenchRenewLeases(b *testing.B, open func(tb testing.TB) runtime.Store) {
	const n = 256
	st := open(b)
	ls, ok := st.(runtime.Leaser)
	lr, ok2 := st.(runtime.LeaseRenewer)
	if !ok || !ok2 {
		b.Skipf("%T is not both a runtime.Leaser and a runtime.LeaseRenewer", st)
	}
	ctx := context.Background()
	leases := make([]runtime.Lease, n)
	for i := range leases {
		id := fmt.Sprintf("run-%04d", i)
		require.NoError(b, st.CreateRun(ctx, newRun(id)))
		l, err := ls.ClaimRun(ctx, id, "bench", time.Hour)
		require.NoError(b, err)
		leases[i] = l
	}
	b.Run("together", func(b *testing.B) {
		for b.Loop() {
			_, errs, err := lr.RenewLeases(ctx, leases, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/lease")
	})
	b.Run("one-by-one", func(b *testing.B) {
		for b.Loop() {
			for _, l := range leases {
				if _, err := ls.RenewLease(ctx, l, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/lease")
	})
}

// BenchStartsAndEnds measures what runs that start and end cost a
// store's group commits, as the sync committer sends them: a commit of
// perCommit runs starting (each created with its lease, with its first
// node's checkpoint, its second node's running checkpoint and five
// events), then one of the same runs ending (four events, two
// checkpoints, the final record and the lease's release). It reports
// µs/start and µs/end: the store's time per run in each, the commit's
// own cost shared. It skips stores that are not BatchFinishers.
func BenchStartsAndEnds(b *testing.B, open func(tb testing.TB) runtime.Store) {
	const perCommit = 16
	st := open(b)
	bw, ok := st.(runtime.BatchFinisher)
	if !ok {
		b.Skipf("%T is not a runtime.BatchFinisher", st)
	}
	ctx := context.Background()
	type text struct {
		Text string `json:"text"`
	}
	event := func(id string, seq int64, typ runtime.EventType, node string, data any) runtime.Event {
		return runtime.Event{Seq: seq, RunID: id, ChatID: "c-1", Type: typ, NodeID: node, Attempt: 1, Time: at(time.Duration(seq)), Data: data}
	}
	checkpoint := func(id, node string, status runtime.NodeStatus, output any) *runtime.Checkpoint {
		return &runtime.Checkpoint{RunID: id, NodeID: node, Status: status, PlanVersion: 3, InputsHash: "h-" + node,
			Effect: runtime.EffectExternal, Output: output, Attempt: 1, AttemptID: node + "-1", StartedAt: t0, UpdatedAt: t0, Token: 1}
	}
	var startTook, endTook time.Duration
	starts, ends := make([]runtime.WriteBatch, perCommit), make([]runtime.WriteBatch, perCommit)
	n := 0
	for b.Loop() {
		for j := range starts {
			n++
			id := fmt.Sprintf("run-%07d", n)
			r := newRun(id)
			r.Token = 0
			lease := &runtime.Lease{RunID: id, Owner: "bench", Token: 1, ExpiresAt: t0.Add(time.Hour)}
			starts[j] = runtime.WriteBatch{RunID: id, Token: 1, Create: r, Lease: lease,
				Checkpoints: []*runtime.Checkpoint{checkpoint(id, "first", runtime.NodeSucceeded, text{"hello"}), checkpoint(id, "stream", runtime.NodeRunning, nil)},
				Events: []runtime.Event{event(id, 1, runtime.EventRunStarted, "", nil), event(id, 2, runtime.EventNodeStarted, "first", nil),
					event(id, 3, runtime.EventNodeCompleted, "first", text{"hello"}), event(id, 4, runtime.EventNodeStarted, "stream", nil),
					event(id, 5, "progress", "stream", text{"hello"})}}
			fin := *r
			fin.Token, fin.Status, fin.UpdatedAt = 1, runtime.RunCompleted, t0.Add(time.Minute)
			ends[j] = runtime.WriteBatch{RunID: id, Token: 1, Finish: &fin, Release: lease,
				Checkpoints: []*runtime.Checkpoint{checkpoint(id, "stream", runtime.NodeSucceeded, text{"hello there"}), checkpoint(id, "last", runtime.NodeSucceeded, text{"hello there"})},
				Events: []runtime.Event{event(id, 6, runtime.EventNodeCompleted, "stream", text{"hello there"}), event(id, 7, runtime.EventNodeStarted, "last", nil),
					event(id, 8, runtime.EventNodeCompleted, "last", text{"hello there"}), event(id, 9, runtime.EventRunCompleted, "", nil)}}
		}
		t := time.Now()
		if err := bw.WriteBatches(ctx, starts); err != nil {
			b.Fatal(err)
		}
		startTook += time.Since(t)
		t = time.Now()
		if err := bw.WriteBatches(ctx, ends); err != nil {
			b.Fatal(err)
		}
		endTook += time.Since(t)
	}
	b.ReportMetric(float64(startTook.Microseconds())/float64(n), "µs/start")
	b.ReportMetric(float64(endTook.Microseconds())/float64(n), "µs/end")
}
