package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// reservation is a pending record whose fields all differ from
// newRun(id)'s, so a test sees that creating the run replaced every one.
func reservation(id string) *runtime.RunRecord {
	return &runtime.RunRecord{
		ID: id, RootID: "reserved-root", ChatID: "chat-r", GraphID: "graph-r", PlanVersion: 1, Kind: "reserved",
		Attrs: map[string]any{"reserved": true}, EntryNodeIDs: []string{"r"}, Input: "reserved input",
		Answers: map[string]any{"int-r": "r"}, Error: "reserved", Status: runtime.RunPending,
		CreatedAt: at(-time.Minute), UpdatedAt: at(-time.Minute),
	}
}

// testCreateOverReservation: CreateRun replaces a pending record (a
// reservation) whole, lease included, and refuses any other.
func (s *suite) testCreateOverReservation(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	create(t, st, reservation("r1"))
	ls, leases := st.(runtime.Leaser)
	if leases {
		// A lease on the reservation goes with it.
		_, err := ls.ClaimRun(ctx, "r1", "X", time.Hour)
		require.NoError(t, err)
	}
	r := newRun("r1")
	r.Answers = nil
	r.Token = 2
	create(t, st, r)
	requireRun(t, r, getRun(t, st, "r1"))
	require.Empty(t, checkpoints(t, st, "r1"))
	require.Empty(t, events(t, st, "r1", 0, 0))
	require.NoError(t, st.AppendEvents(ctx, "r1", 2, mkEvents("r1", 1, 2)), "the log starts at seq 1")
	if leases {
		l, err := ls.ClaimRun(ctx, "r1", "A", time.Hour)
		require.NoError(t, err, "the reservation's lease is gone")
		require.Equal(t, int64(3), l.Token, "the created record's token counts")
	}

	// Over a record in any other status: ErrRunExists, and it stays.
	for _, status := range []runtime.RunStatus{runtime.RunRunning, runtime.RunCompleted, runtime.RunFailed,
		runtime.RunCancelled, runtime.RunInterrupted} {
		id := "over-" + string(status)
		kept := newRun(id)
		kept.Status = status
		create(t, st, kept)
		require.ErrorIs(t, st.CreateRun(ctx, newRun(id)), runtime.ErrRunExists, "over %s", status)
		require.ErrorIs(t, st.CreateRun(ctx, reservation(id)), runtime.ErrRunExists, "a reservation over %s", status)
		requireRun(t, kept, getRun(t, st, id))
	}
	// The record that replaced the reservation is running: a second
	// creation is refused like any other.
	require.ErrorIs(t, st.CreateRun(ctx, newRun("r1")), runtime.ErrRunExists)
	require.Equal(t, int64(2), getRun(t, st, "r1").LastSeq)
}

// testCreateClaimedOverReservation: a RunStarter's CreateClaimed replaces
// a reservation as CreateRun does, and its lease is live.
func (s *suite) testCreateClaimedOverReservation(t *testing.T) {
	st := s.open(t)
	rs := need[runtime.RunStarter](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	create(t, st, reservation("rc"))
	r := newRun("rc")
	r.Answers = nil
	l, err := rs.CreateClaimed(ctx, r, "A", time.Hour)
	require.NoError(t, err)
	require.Equal(t, r.Token+1, l.Token)
	want := *r
	want.Token = l.Token
	requireRun(t, &want, getRun(t, st, "rc"))
	_, err = ls.ClaimRun(ctx, "rc", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the lease came with the record")
	_, err = rs.CreateClaimed(ctx, newRun("rc"), "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrRunExists, "the run is running now")

	done := newRun("done")
	done.Status = runtime.RunCompleted
	create(t, st, done)
	_, err = rs.CreateClaimed(ctx, newRun("done"), "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrRunExists)
	requireRun(t, done, getRun(t, st, "done"))
}

// testWriteBatchCreateOverReservation: a BatchFinisher's Create replaces
// a reservation inside the batch; a refused Create rolls back the whole
// call, reservations it replaced included.
func (s *suite) testWriteBatchCreateOverReservation(t *testing.T) {
	st := s.open(t)
	bf := need[runtime.BatchFinisher](t, st)
	ls := need[runtime.Leaser](t, st)
	ctx := t.Context()
	lease := func(id string) *runtime.Lease {
		return &runtime.Lease{RunID: id, Owner: "A", Token: 1, ExpiresAt: time.Now().Add(time.Hour)}
	}
	create(t, st, reservation("b1"))
	r := newRun("b1")
	r.Answers, r.Token = nil, 1
	cp := &runtime.Checkpoint{RunID: "b1", NodeID: "n", Status: runtime.NodeRunning, Attempt: 1, Token: 1, UpdatedAt: at(0)}
	ev := runtime.Event{Seq: 1, RunID: "b1", Type: runtime.EventRunStarted, Time: at(0)}
	require.NoError(t, bf.WriteBatches(ctx, []runtime.WriteBatch{{RunID: "b1", Token: 1, Create: r, Lease: lease("b1"),
		Checkpoints: []*runtime.Checkpoint{cp}, Events: []runtime.Event{ev}}}))
	want := *r
	want.LastSeq = 1
	requireRun(t, &want, getRun(t, st, "b1"))
	require.Len(t, checkpoints(t, st, "b1"), 1)
	_, err := ls.ClaimRun(ctx, "b1", "B", time.Hour)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld, "the lease came with the record")

	// b2's reservation is replaced in the call, then b1's create is
	// refused: the call writes nothing, b2 stays reserved.
	create(t, st, reservation("b2"))
	b2 := newRun("b2")
	b2.Token = 1
	err = bf.WriteBatches(ctx, []runtime.WriteBatch{
		{RunID: "b2", Token: 1, Create: b2, Lease: lease("b2")},
		{RunID: "b1", Token: 1, Create: newRun("b1"), Lease: lease("b1")}})
	require.ErrorIs(t, err, runtime.ErrRunExists)
	requireRun(t, reservation("b2"), getRun(t, st, "b2"))
	requireRun(t, &want, getRun(t, st, "b1"))
}

// testReservationRace: creators racing over one reservation — from two
// store instances when the store is durable — exactly one wins, eight
// times.
func (s *suite) testReservationRace(t *testing.T) {
	st := s.open(t)
	stores := []runtime.Store{st, s.second(t, st)}
	ctx := t.Context()
	const rounds = 8
	for i := range rounds {
		id := fmt.Sprintf("r%d", i)
		create(t, st, reservation(id))
		start := make(chan struct{})
		var errs [4]error
		var wg sync.WaitGroup
		for j := range errs {
			wg.Go(func() {
				r := newRun(id)
				r.Kind = fmt.Sprintf("creator-%d", j)
				<-start
				errs[j] = stores[j%2].CreateRun(ctx, r)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for j, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: creators %d and %d both won", i, winner, j)
				winner = j
				continue
			}
			require.ErrorIs(t, err, runtime.ErrRunExists, "round %d", i)
		}
		require.NotEqual(t, -1, winner, "round %d: nobody won", i)
		require.Equal(t, fmt.Sprintf("creator-%d", winner), getRun(t, st, id).Kind, "round %d: the winner's record stands", i)
	}
}
