package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// testCreateClaimed: a RunStarter creates the record and its first lease
// in one write, as CreateRun then ClaimRun would.
func (s *suite) testCreateClaimed(t *testing.T) {
	st := s.open(t)
	rs := need[runtime.RunStarter](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	r := newRun("rc")
	l, err := rs.CreateClaimed(ctx, r, "A", time.Hour)
	require.NoError(t, err)
	require.Equal(t, "rc", l.RunID)
	require.Equal(t, "A", l.Owner)
	require.Equal(t, r.Token+1, l.Token)
	got := getRun(t, st, "rc")
	require.Equal(t, l.Token, got.Token)
	require.Equal(t, r.Answers, got.Answers)
	_, err = rs.CreateClaimed(ctx, newRun("rc"), "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrRunExists)
	_, err = ls.ClaimRun(ctx, "rc", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the lease is live from the start")
	expired, err := ls.ExpiredRuns(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.NotContains(t, expired, "rc", "a freshly started run is not up for recovery")
}

// testWriteBatchFinish: a BatchFinisher ends runs inside the batch: the
// record is replaced (fenced) and the lease released, atomically with the
// batch's other writes.
func (s *suite) testWriteBatchFinish(t *testing.T) {
	st := s.open(t)
	bf := need[runtime.BatchFinisher](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	create(t, st, newRun("f1"))
	l, err := ls.ClaimRun(ctx, "f1", "A", time.Hour)
	require.NoError(t, err)
	final := getRun(t, st, "f1")
	final.Status, final.Error, final.Token = runtime.RunCompleted, "", l.Token
	ev := runtime.Event{Seq: 1, RunID: "f1", Type: runtime.EventRunCompleted, Time: at(0)}
	require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "f1", Token: l.Token, Events: []runtime.Event{ev},
		Finish: final, Release: &l}}))
	got := getRun(t, st, "f1")
	require.Equal(t, runtime.RunCompleted, got.Status)
	require.Equal(t, int64(1), got.LastSeq, "the events' seq stands")
	_, err = ls.ClaimRun(ctx, "f1", "B", time.Hour)
	require.NoError(t, err, "the lease was released")

	// A fenced Finish rejects the whole batch.
	create(t, st, newRun("f2"))
	old, err := ls.ClaimRun(ctx, "f2", "A", time.Millisecond)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	_, err = ls.ClaimRun(ctx, "f2", "B", time.Hour)
	require.NoError(t, err)
	stale := getRun(t, st, "f2")
	stale.Status, stale.Token = runtime.RunFailed, old.Token
	err = bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "f2", Token: old.Token, Finish: stale, Release: &old}})
	require.ErrorIs(t, err, runtime.ErrFenced)
	require.Equal(t, runtime.RunRunning, getRun(t, st, "f2").Status)
	_, err = ls.ClaimRun(ctx, "f2", "C", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "B's lease is untouched")

	// The stored record is the finish's whole record, whichever columns
	// it changed — those a run's end changes, or any other — with the
	// log's last seq of a log longer than a store's segments, and the
	// lease released in the same write.
	for i, tc := range []struct {
		name   string
		change func(r *runtime.RunRecord)
	}{
		{"the end's columns", func(r *runtime.RunRecord) {
			r.Status, r.Error, r.UpdatedAt = runtime.RunInterrupted, "waiting", at(time.Hour)
			r.Attrs = map[string]any{"messageId": "m-2", "more": true}
			r.Answers = map[string]any{"int-1": "yes"}
			r.Interrupts = []runtime.InterruptInfo{{ID: "int-2", NodeID: "wait", Reason: "input"}}
		}},
		{"every column", func(r *runtime.RunRecord) {
			r.Status, r.UpdatedAt = runtime.RunFailed, at(2*time.Hour)
			r.ParentID, r.RootID, r.ChatID, r.GraphID = "p-2", "root-2", "c-2", "graph-2"
			r.PlanVersion, r.Kind, r.CreatedAt = 9, "background", at(-time.Hour)
			r.EntryNodeIDs = []string{"other"}
			r.Input = map[string]any{"text": "changed"}
			r.Options.MaxParallel = 9
		}},
		{"nothing but the status", func(r *runtime.RunRecord) { r.Status = runtime.RunCompleted }},
	} {
		id := fmt.Sprintf("fx%d", i)
		r := newRun(id)
		r.Token = 1
		l := runtime.Lease{RunID: id, Owner: "A", Token: 1, ExpiresAt: time.Now().Add(time.Hour)}
		require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: id, Token: 1, Create: r, Lease: &l, Events: mkEvents(id, 1, 40)}}), tc.name)
		require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: id, Token: 1, Events: mkEvents(id, 41, 40)}}), tc.name)
		final := getRun(t, st, id)
		tc.change(final)
		require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: id, Token: 1, Events: mkEvents(id, 81, 3),
			Finish: final, Release: &l}}), tc.name)
		final.LastSeq = 83
		requireRun(t, final, getRun(t, st, id))
		requireEvents(t, mkEvents(id, 1, 83), events(t, st, id, 0, 0))
		_, err = ls.ClaimRun(ctx, id, "B", time.Hour)
		require.NoError(t, err, "%s: the lease was released", tc.name)
	}
}

// testWriteBatchCreate: a BatchFinisher creates a run with its first
// lease inside a batch, before the batch's own writes to it.
func (s *suite) testWriteBatchCreate(t *testing.T) {
	st := s.open(t)
	bf := need[runtime.BatchFinisher](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	r := newRun("bc")
	r.Token = 1
	l := runtime.Lease{RunID: "bc", Owner: "A", Token: 1, ExpiresAt: time.Now().Add(time.Hour)}
	cp := &runtime.Checkpoint{RunID: "bc", NodeID: "n", Status: runtime.NodeRunning, Attempt: 1, Token: 1, UpdatedAt: at(0)}
	ev := runtime.Event{Seq: 1, RunID: "bc", Type: runtime.EventRunStarted, Time: at(0)}
	require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "bc", Token: 1, Create: r, Lease: &l,
		Checkpoints: []*runtime.Checkpoint{cp}, Events: []runtime.Event{ev}}}))
	got := getRun(t, st, "bc")
	require.Equal(t, int64(1), got.Token)
	require.Equal(t, int64(1), got.LastSeq)
	_, err := ls.ClaimRun(ctx, "bc", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the lease came with the record")
	// A second create of the id rejects its whole batch.
	other := newRun("bd")
	err = bf.WriteBatches(ctx, []runtime.WriteBatch{
		{RunID: "bd", Token: 1, Create: other, Lease: &runtime.Lease{RunID: "bd", Owner: "A", Token: 1, ExpiresAt: time.Now().Add(time.Hour)}},
		{RunID: "bc", Token: 1, Create: newRun("bc"), Lease: &l}})
	require.ErrorIs(t, err, runtime.ErrRunExists)
	_, err = st.GetRun(ctx, "bd")
	require.ErrorIs(t, err, runtime.ErrRunNotFound, "nothing of the rejected call was written")
}

// testClaimExpired: a BulkClaimer claims exactly the runs ExpiredRuns
// would list, each with a new token and a live lease.
func (s *suite) testClaimExpired(t *testing.T) {
	st := s.open(t)
	bc, ok := st.(runtime.BulkClaimer)
	if !ok {
		t.Skipf("%T does not implement runtime.BulkClaimer", st)
	}
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	for i, id := range []string{"x1", "x2", "x3", "held", "done"} {
		r := newRun(id)
		r.CreatedAt = at(time.Duration(i) * time.Second)
		if id == "done" {
			r.Status = runtime.RunCompleted
		}
		create(t, st, r)
	}
	_, err := ls.ClaimRun(ctx, "held", "other", time.Hour)
	require.NoError(t, err)
	got, err := bc.ClaimExpired(ctx, "me", time.Hour, time.Now(), 2)
	require.NoError(t, err)
	require.Len(t, got, 2, "limited")
	ids := map[string]bool{}
	for _, l := range got {
		ids[l.RunID] = true
		require.Equal(t, "me", l.Owner)
		require.Equal(t, l.Token, getRun(t, st, l.RunID).Token)
		_, err := ls.ClaimRun(ctx, l.RunID, "third", time.Hour)
		require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the bulk claim's leases are live")
	}
	require.True(t, ids["x1"] && ids["x2"], "oldest first: %v", ids)
	rest, err := bc.ClaimExpired(ctx, "me", time.Hour, time.Now(), 0)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, "x3", rest[0].RunID, "neither a held nor a finished run is claimed")
}
