package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// Open returns a fresh, empty chat store and the run store it was opened
// with (same database), and registers their cleanup with t.Cleanup.
type Open func(t *testing.T) (chat.Store, runtime.Store)

// Option tunes Run.
type Option func(*suite)

// Durable tells the suite how to open a second chat store, with its own
// run store, on the database cs and runs use — what another process, or
// the same process after a restart, would see. reopen must leave cs and
// runs usable and register the new stores' cleanup. It enables the
// restart test and races between two instances; without it the races
// run goroutines on one instance.
func Durable(reopen func(t *testing.T, cs chat.Store, runs runtime.Store) (chat.Store, runtime.Store)) Option {
	return func(s *suite) { s.reopen = reopen }
}

// ReplacesNUL tells the suite that the store writes U+0000 in text (and
// the escape \u0000 in a graph's JSON) as U+FFFD, as one on PostgreSQL
// must; without it the suite expects them back as written.
func ReplacesNUL() Option {
	return func(s *suite) { s.replacesNUL = true }
}

// Expiry tells the suite how to set the clock of a chat store open
// returned — setNow makes it read the time from now instead of time.Now,
// and is called before the store is used — and how to count the
// tombstones it keeps for a chat's deleted messages, expired or not. The
// test of their expiry (TombstonesExpire) needs both, and is skipped
// without them.
func Expiry(setNow func(cs chat.Store, now func() time.Time), tombstones func(t *testing.T, cs chat.Store, chatID string) int) Option {
	return func(s *suite) { s.setNow, s.tombstones = setNow, tombstones }
}

type suite struct {
	open        Open
	reopen      func(t *testing.T, cs chat.Store, runs runtime.Store) (chat.Store, runtime.Store)
	replacesNUL bool
	setNow      func(cs chat.Store, now func() time.Time)
	tombstones  func(t *testing.T, cs chat.Store, chatID string) int
}

// Run runs the conformance suite against the stores open returns.
// Subtests are parallel.
func Run(t *testing.T, open Open, opts ...Option) {
	s := &suite{open: open}
	for _, o := range opts {
		o(s)
	}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Graphs", s.testGraphs},
		{"GraphsNamed", s.testGraphsNamed},
		{"ChatsAndMessageTrees", s.testChats},
		{"ChatGraphReadTogether", s.testChatGraph},
		{"BeginTurnWritesMessagesAndReservation", s.testBeginTurn},
		{"BeginTurnRefusedWritesNothing", s.testBeginTurnAtomic},
		{"BeginTurnClaim", s.testClaim},
		{"ClaimRace", s.testClaimRace},
		{"FinishMessageComparesRun", s.testFinishMessage},
		{"TextWithNUL", s.testTextWithNUL},
		{"RequestsKeptOncePerChat", s.testRequests},
		{"UnsettledListsOpenAnswers", s.testUnsettled},
		{"ListsPage", s.testPages},
		{"MessagesPage", s.testMessagePages},
		{"ChatsPerOwner", s.testChatsPerOwner},
		{"UpdateMessage", s.testUpdateMessage},
		{"DeleteMessagesKeepsTheTree", s.testDeleteKeepsTree},
		{"DeleteRacesChildInsert", s.testDeleteRacesInsert},
		{"TombstonesExpire", s.testTombstonesExpire},
		{"CloseKeepsRunStore", s.testClose},
		{"ReopenKeepsData", s.testReopen},
		{"HistoryMigrationBatches", s.testHistoryMigration},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// second returns another pair of stores on the same database when the
// stores are durable, else the same ones.
func (s *suite) second(t *testing.T, cs chat.Store, runs runtime.Store) (chat.Store, runtime.Store) {
	if s.reopen == nil {
		return cs, runs
	}
	return s.reopen(t, cs, runs)
}

// reservation is a run's pending record as a chat call writes it.
func reservation(id, chatID string) *runtime.RunRecord {
	now := time.Now()
	return &runtime.RunRecord{ID: id, RootID: id, ChatID: chatID, GraphID: "g1", PlanVersion: 2, Kind: "stream_chat",
		Attrs: map[string]any{"messageId": "a-" + id}, EntryNodeIDs: []string{"start"}, Input: map[string]any{"text": "hi"},
		Status: runtime.RunPending, CreatedAt: now, UpdatedAt: now}
}

func newChat(t *testing.T, cs chat.Store, id string) {
	t.Helper()
	require.NoError(t, cs.CreateChat(t.Context(), &chat.Chat{ID: id, GraphID: "g1"}, 0))
}

// turn begins a turn of chatID writing a user message and its pending
// answer (ids u-<run>, a-<run>) under run runID, the answer becoming the
// active leaf.
func turn(t *testing.T, cs chat.Store, chatID, parentID, runID string) (*chat.Message, *chat.Message) {
	t.Helper()
	u := &chat.Message{ID: "u-" + runID, ParentID: parentID, Role: chat.RoleUser, Content: "hi", RunID: runID,
		TurnRunID: runID, Status: chat.StatusCompleted}
	a := &chat.Message{ID: "a-" + runID, ParentID: u.ID, Role: chat.RoleAssistant, RunID: runID, TurnRunID: runID,
		Status: chat.StatusPending}
	require.NoError(t, cs.BeginTurn(t.Context(), chat.Turn{ChatID: chatID, ActiveLeafID: a.ID,
		Messages: []*chat.Message{u, a}, Run: reservation(runID, chatID)}))
	return u, a
}

func getMessage(t *testing.T, cs chat.Store, chatID, id string) *chat.Message {
	t.Helper()
	m, err := cs.GetMessage(t.Context(), chatID, id)
	require.NoError(t, err)
	return m
}

func messageIDs(t *testing.T, cs chat.Store, chatID string) []string {
	t.Helper()
	msgs, err := cs.Messages(t.Context(), chatID)
	require.NoError(t, err)
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func requireNoRun(t *testing.T, runs runtime.Store, id string) {
	t.Helper()
	_, err := runs.GetRun(t.Context(), id)
	require.ErrorIs(t, err, runtime.ErrRunNotFound, "run %s was not reserved", id)
}

func (s *suite) testGraphs(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	g := &chat.Graph{ID: "g1", Name: "one", Body: json.RawMessage(`{"id":"g1","nodes":[]}`)}
	require.NoError(t, cs.CreateGraph(ctx, g))
	require.EqualValues(t, 1, g.PlanVersion)
	require.False(t, g.CreatedAt.IsZero())
	require.ErrorIs(t, cs.CreateGraph(ctx, &chat.Graph{ID: "g1", Body: json.RawMessage(`{}`)}), chat.ErrConflict)
	got, err := cs.GetGraph(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, "one", got.Name)
	require.JSONEq(t, `{"id":"g1","nodes":[]}`, string(got.Body))

	g2 := &chat.Graph{ID: "g1", Name: "two", Body: json.RawMessage(`{"x":2}`)}
	require.NoError(t, cs.UpdateGraph(ctx, g2, 0))
	require.EqualValues(t, 2, g2.PlanVersion)
	require.ErrorIs(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "g1", Body: json.RawMessage(`{}`)}, 1), chat.ErrConflict)
	require.NoError(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "g1", Name: "three", Body: json.RawMessage(`{}`)}, 2))
	got, err = cs.GetGraph(ctx, "g1")
	require.NoError(t, err)
	require.EqualValues(t, 3, got.PlanVersion)
	require.Equal(t, "three", got.Name)

	v1, err := cs.GetGraphVersion(ctx, "g1", 1)
	require.NoError(t, err)
	require.Equal(t, "one", v1.Name)
	require.JSONEq(t, `{"id":"g1","nodes":[]}`, string(v1.Body))
	_, err = cs.GetGraphVersion(ctx, "g1", 9)
	require.ErrorIs(t, err, chat.ErrNotFound)

	require.ErrorIs(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "nope", Body: json.RawMessage(`{}`)}, 0), chat.ErrNotFound)
	_, err = cs.GetGraph(ctx, "nope")
	require.ErrorIs(t, err, chat.ErrNotFound)

	require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: "g2", Body: json.RawMessage(`{}`)}))
	list, err := cs.ListGraphs(ctx, chat.Page{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "g2", list[0].ID, "most recently updated first")

	require.NoError(t, cs.DeleteGraph(ctx, "g1"))
	require.ErrorIs(t, cs.DeleteGraph(ctx, "g1"), chat.ErrNotFound)
	_, err = cs.GetGraph(ctx, "g1")
	require.ErrorIs(t, err, chat.ErrNotFound)
	_, err = cs.GetGraphVersion(ctx, "g1", 3)
	require.NoError(t, err, "old versions outlive a delete")
	// A re-created id continues its versions: cached plans never apply.
	g3 := &chat.Graph{ID: "g1", Body: json.RawMessage(`{}`)}
	require.NoError(t, cs.CreateGraph(ctx, g3))
	require.EqualValues(t, 4, g3.PlanVersion)
}

// testGraphsNamed: GraphsNamed finds live graphs by their exact name (no
// case folding, no trimming, the current name only), whole and in
// ListGraphs' order, at most limit of them; deleted graphs never match.
func (s *suite) testGraphsNamed(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	create := func(id, name string) {
		t.Helper()
		require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: id, Name: name,
			Body: json.RawMessage(`{"id":"` + id + `","nodes":[]}`)}))
	}
	create("solo", "alpha")
	create("case", "Alpha")
	create("space", "alpha ")
	create("t1", "twin")
	create("t2", "twin")
	create("t3", "twin")
	// t2 saved last: ListGraphs' order is not the order of the ids.
	require.NoError(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "t2", Name: "twin", Body: json.RawMessage(`{}`)}, 0))
	create("gone", "alpha")
	require.NoError(t, cs.DeleteGraph(ctx, "gone"))
	create("renamed", "before")
	require.NoError(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "renamed", Name: "after", Body: json.RawMessage(`{"v":2}`)}, 0))

	ids := func(name string, limit int) []string {
		t.Helper()
		gs, err := cs.GraphsNamed(ctx, name, limit)
		require.NoError(t, err)
		out := []string{}
		for _, g := range gs {
			require.Equal(t, name, g.Name)
			out = append(out, g.ID)
		}
		return out
	}
	require.Equal(t, []string{"solo"}, ids("alpha", 2), "exact name; the deleted graph does not match")
	require.Equal(t, []string{"case"}, ids("Alpha", 2))
	require.Equal(t, []string{"space"}, ids("alpha ", 2))
	require.Empty(t, ids("alph", 2))
	require.Empty(t, ids("nobody", 2), "no match is an empty list, not an error")
	require.Empty(t, ids("before", 2), "a graph answers to its current name only")
	require.Equal(t, []string{"renamed"}, ids("after", 2))

	all, err := cs.ListGraphs(ctx, chat.Page{})
	require.NoError(t, err)
	var twins []string
	for _, g := range all {
		if g.Name == "twin" {
			twins = append(twins, g.ID)
		}
	}
	require.Len(t, twins, 3)
	require.Equal(t, twins, ids("twin", 0), "limit 0: all of them, in ListGraphs' order")
	require.Equal(t, twins[:2], ids("twin", 2), "at most limit, the first in that order")
	require.Equal(t, twins[:1], ids("twin", 1))

	gs, err := cs.GraphsNamed(ctx, "after", 1)
	require.NoError(t, err)
	got, err := cs.GetGraph(ctx, "renamed")
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.EqualValues(t, 2, gs[0].PlanVersion)
	require.JSONEq(t, string(got.Body), string(gs[0].Body), "the whole graph, as GetGraph reads it")
	require.True(t, got.CreatedAt.Equal(gs[0].CreatedAt))
	require.True(t, got.UpdatedAt.Equal(gs[0].UpdatedAt))

	// A deleted id created again under the name matches again.
	create("gone", "alpha")
	require.ElementsMatch(t, []string{"solo", "gone"}, ids("alpha", 0))
}

// GetChatGraph reads what GetChat and GetGraph read, the graph's latest
// version, and no graph when it is absent or deleted.
func (s *suite) testChatGraph(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: "g1", Name: "one", Body: json.RawMessage(`{"v":1}`)}))
	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "c1", GraphID: "g1", Title: "first", Owner: "o1"}, 0))
	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "c2", GraphID: "nowhere"}, 0))
	turn(t, cs, "c1", "", "r1")
	both := func(id string) (*chat.Chat, *chat.Graph) {
		t.Helper()
		c, g, err := cs.GetChatGraph(ctx, id)
		require.NoError(t, err)
		alone, err := cs.GetChat(ctx, id)
		require.NoError(t, err)
		require.Equal(t, alone, c)
		return c, g
	}
	c, g := both("c1")
	require.Equal(t, "a-r1", c.ActiveLeafID)
	want, err := cs.GetGraph(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, want, g)

	require.NoError(t, cs.UpdateGraph(ctx, &chat.Graph{ID: "g1", Name: "two", Body: json.RawMessage(`{"v":2}`)}, 1))
	_, g = both("c1")
	require.EqualValues(t, 2, g.PlanVersion)
	require.Equal(t, "two", g.Name)
	require.JSONEq(t, `{"v":2}`, string(g.Body))

	_, g = both("c2")
	require.Nil(t, g, "a chat whose graph was never saved")
	require.NoError(t, cs.DeleteGraph(ctx, "g1"))
	_, g = both("c1")
	require.Nil(t, g, "a deleted graph")

	_, _, err = cs.GetChatGraph(ctx, "nope")
	require.ErrorIs(t, err, chat.ErrNotFound)
}

func (s *suite) testChats(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	c := &chat.Chat{ID: "c1", GraphID: "g1", Title: "first"}
	require.NoError(t, cs.CreateChat(ctx, c, 0))
	require.ErrorIs(t, cs.CreateChat(ctx, &chat.Chat{ID: "c1", GraphID: "g1"}, 0), chat.ErrConflict)
	require.False(t, c.CreatedAt.IsZero())

	u1, a1 := turn(t, cs, "c1", "", "r1")
	got, err := cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, a1.ID, got.ActiveLeafID)
	require.Equal(t, "first", got.Title)

	// A sibling answer (retry) never overwrites.
	a2 := &chat.Message{ID: "a2", ParentID: u1.ID, Role: chat.RoleAssistant, RunID: "r9", TurnRunID: "r9", Status: chat.StatusPending}
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: "a2", Messages: []*chat.Message{a2},
		Run: reservation("r9", "c1")}))
	require.Equal(t, []string{u1.ID, a1.ID, "a2"}, messageIDs(t, cs, "c1"), "creation order")

	require.NoError(t, cs.SetActiveLeaf(ctx, "c1", a1.ID))
	got, err = cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, a1.ID, got.ActiveLeafID)
	require.ErrorIs(t, cs.SetActiveLeaf(ctx, "c1", "zz"), chat.ErrNotFound)
	require.ErrorIs(t, cs.SetActiveLeaf(ctx, "nope", a1.ID), chat.ErrNotFound)
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{"a2"}, a1.ID))
	require.Equal(t, []string{u1.ID, a1.ID}, messageIDs(t, cs, "c1"))
	_, err = cs.GetMessage(ctx, "c1", "a2")
	require.ErrorIs(t, err, chat.ErrNotFound)

	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "c2", GraphID: "g2"}, 0))
	list, err := cs.ListChats(ctx, "g1", chat.Page{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	list, err = cs.ListChats(ctx, "", chat.Page{})
	require.NoError(t, err)
	require.Len(t, list, 2)

	require.NoError(t, cs.DeleteChat(ctx, "c1"))
	require.ErrorIs(t, cs.DeleteChat(ctx, "c1"), chat.ErrNotFound)
	_, err = cs.GetChat(ctx, "c1")
	require.ErrorIs(t, err, chat.ErrNotFound)
	_, err = cs.Messages(ctx, "c1")
	require.ErrorIs(t, err, chat.ErrNotFound)
	_, err = cs.GetMessage(ctx, "c1", u1.ID)
	require.ErrorIs(t, err, chat.ErrNotFound)
	// A chat re-created with the id starts empty.
	newChat(t, cs, "c1")
	require.Empty(t, messageIDs(t, cs, "c1"))
	require.NoError(t, cs.Ping(ctx))
}

// testBeginTurn: a turn's messages and its run's reservation are both
// there afterwards; the engine's creation of the run then replaces the
// reservation.
func (s *suite) testBeginTurn(t *testing.T) {
	cs, runs := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	created := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	u := &chat.Message{ID: "u1", Role: chat.RoleUser, Content: "hello", RunID: "r1", TurnRunID: "r1",
		Status: chat.StatusCompleted, UserTools: []string{"calculator", "search"}, CreatedAt: created}
	a := &chat.Message{ID: "a1", ParentID: "u1", Role: chat.RoleAssistant, RunID: "r1", TurnRunID: "r1",
		Status: chat.StatusPending, AgentNodeID: "agent-1"}
	res := reservation("r1", "c1")
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: "a1", Messages: []*chat.Message{u, a}, Run: res}))
	require.Equal(t, "c1", a.ChatID)
	require.False(t, a.CreatedAt.IsZero())

	got := getMessage(t, cs, "c1", "u1")
	require.Equal(t, chat.RoleUser, got.Role)
	require.Equal(t, "hello", got.Content)
	require.Equal(t, []string{"calculator", "search"}, got.UserTools)
	require.Equal(t, chat.StatusCompleted, got.Status)
	require.True(t, created.Equal(got.CreatedAt), "a given CreatedAt is kept: %s", got.CreatedAt)
	got = getMessage(t, cs, "c1", "a1")
	require.Equal(t, "c1", got.ChatID)
	require.Equal(t, "u1", got.ParentID)
	require.Equal(t, chat.RoleAssistant, got.Role)
	require.Equal(t, "r1", got.RunID)
	require.Equal(t, "r1", got.TurnRunID)
	require.Equal(t, "agent-1", got.AgentNodeID)
	require.Equal(t, chat.StatusPending, got.Status)
	require.Empty(t, got.UserTools)
	c, err := cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, "a1", c.ActiveLeafID)

	rec, err := runs.GetRun(ctx, "r1")
	require.NoError(t, err, "the reservation is in the run store")
	require.Equal(t, runtime.RunPending, rec.Status)
	require.Equal(t, "c1", rec.ChatID)
	require.Equal(t, "g1", rec.GraphID)
	require.EqualValues(t, 2, rec.PlanVersion)
	require.Equal(t, "a-r1", rec.Attrs["messageId"])

	// The engine creates the run over its reservation.
	run := *res
	run.Status = runtime.RunRunning
	require.NoError(t, runs.CreateRun(ctx, &run))
	rec, err = runs.GetRun(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunRunning, rec.Status)

	// A turn with no new message (a bare reservation) and one leaving the
	// active leaf alone.
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Run: reservation("r2", "c1")}))
	c, err = cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, "a1", c.ActiveLeafID)
	_, err = runs.GetRun(ctx, "r2")
	require.NoError(t, err)
}

// testBeginTurnAtomic: every way a turn is refused leaves nothing of it —
// no message, no claim, no reservation, the chat's active leaf as it was.
func (s *suite) testBeginTurnAtomic(t *testing.T) {
	cs, runs := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	_, a1 := turn(t, cs, "c1", "", "r1")
	require.NoError(t, runs.CreateRun(ctx, &runtime.RunRecord{ID: "taken", RootID: "taken", GraphID: "g1", Status: runtime.RunRunning}))
	before := messageIDs(t, cs, "c1")

	msgs := func(ids ...string) []*chat.Message {
		out := make([]*chat.Message, len(ids))
		for i, id := range ids {
			out[i] = &chat.Message{ID: id, ParentID: a1.ID, Role: chat.RoleUser, Content: "x", Status: chat.StatusCompleted}
		}
		return out
	}
	running := reservation("x-running", "c1")
	running.Status = runtime.RunRunning
	for _, tc := range []struct {
		name string
		turn chat.Turn
		is   []error // errors.Is targets; none: any error
	}{
		{"run id taken by a run", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1", "x2"),
			Run: reservation("taken", "c1")}, []error{chat.ErrConflict, runtime.ErrRunExists}},
		{"run id taken by a reservation", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1"),
			Run: reservation("r1", "c1")}, []error{chat.ErrConflict, runtime.ErrRunExists}},
		{"message id taken", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1", a1.ID),
			Run: reservation("x-msg", "c1")}, []error{chat.ErrConflict}},
		{"message id twice", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1", "x1"),
			Run: reservation("x-twice", "c1")}, []error{chat.ErrConflict}},
		{"claim lost", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1"),
			Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r0"}, Run: reservation("x-claim", "c1")}, []error{chat.ErrConflict}},
		{"claimed message absent", chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: msgs("x1"),
			Claim: &chat.Claim{MessageID: "zz", FromRunID: "r1"}, Run: reservation("x-absent", "c1")}, []error{chat.ErrNotFound}},
		{"claim and run id taken", chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r1"},
			Run: reservation("taken", "c1")}, []error{chat.ErrConflict, runtime.ErrRunExists}},
		{"chat absent", chat.Turn{ChatID: "nope", Messages: msgs("x1"), Run: reservation("x-chat", "nope")},
			[]error{chat.ErrNotFound}},
		{"no reservation", chat.Turn{ChatID: "c1", Messages: msgs("x1")}, nil},
		{"reservation not pending", chat.Turn{ChatID: "c1", Messages: msgs("x1"), Run: running}, nil},
	} {
		err := cs.BeginTurn(ctx, tc.turn)
		require.Error(t, err, tc.name)
		for _, target := range tc.is {
			require.ErrorIs(t, err, target, tc.name)
		}
		require.Equal(t, before, messageIDs(t, cs, "c1"), "%s: no message written", tc.name)
		m := getMessage(t, cs, "c1", a1.ID)
		require.Equal(t, "r1", m.RunID, "%s: no claim", tc.name)
		require.Equal(t, chat.StatusPending, m.Status, "%s: no claim", tc.name)
		c, err := cs.GetChat(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, a1.ID, c.ActiveLeafID, "%s: active leaf unchanged", tc.name)
		if tc.turn.Run != nil && tc.turn.Run.ID != "taken" && tc.turn.Run.ID != "r1" {
			requireNoRun(t, runs, tc.turn.Run.ID)
		}
	}
	rec, err := runs.GetRun(ctx, "taken")
	require.NoError(t, err)
	require.Equal(t, runtime.RunRunning, rec.Status, "the run holding the id is untouched")
}

// testClaim: a continue takes an assistant message over from the run that
// wrote it: pending again, no error, under the new run, whose
// reservation the same transaction writes.
func (s *suite) testClaim(t *testing.T) {
	cs, runs := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	_, a1 := turn(t, cs, "c1", "", "r1")
	a1.Content, a1.Status, a1.Error = "half an answer", chat.StatusInterrupted, "waiting for approval"
	require.NoError(t, cs.FinishMessage(ctx, a1))

	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r1"},
		Run: reservation("r2", "c1")}))
	m := getMessage(t, cs, "c1", a1.ID)
	require.Equal(t, "r2", m.RunID)
	require.Equal(t, chat.StatusPending, m.Status)
	require.Empty(t, m.Error)
	require.Equal(t, "half an answer", m.Content, "the content stays for the continue to extend")
	require.Equal(t, "r1", m.TurnRunID, "the turn that created it does not change")
	rec, err := runs.GetRun(ctx, "r2")
	require.NoError(t, err)
	require.Equal(t, runtime.RunPending, rec.Status)

	// From the old run again: lost.
	err = cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r1"}, Run: reservation("r3", "c1")})
	require.ErrorIs(t, err, chat.ErrConflict)
	requireNoRun(t, runs, "r3")
	// Absent chat or message.
	err = cs.BeginTurn(ctx, chat.Turn{ChatID: "nope", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r2"}, Run: reservation("r4", "nope")})
	require.ErrorIs(t, err, chat.ErrNotFound)
	err = cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: "zz", FromRunID: "r2"}, Run: reservation("r4", "c1")})
	require.ErrorIs(t, err, chat.ErrNotFound)
	requireNoRun(t, runs, "r4")

	// A claim with new messages (an edit that continues) writes both.
	x := &chat.Message{ID: "x1", ParentID: a1.ID, Role: chat.RoleUser, Content: "go on", Status: chat.StatusCompleted}
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: "x1", Messages: []*chat.Message{x},
		Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r2"}, Run: reservation("r5", "c1")}))
	require.Equal(t, "r5", getMessage(t, cs, "c1", a1.ID).RunID)
	require.Equal(t, "go on", getMessage(t, cs, "c1", "x1").Content)
}

// testClaimRace: continues racing from one run — over two instances when
// the stores are durable — exactly one wins, five times; the losers
// reserve nothing.
func (s *suite) testClaimRace(t *testing.T) {
	cs, runs := s.open(t)
	cs2, runs2 := s.second(t, cs, runs)
	stores := []chat.Store{cs, cs2}
	ctx := t.Context()
	newChat(t, cs, "c1")
	_, a1 := turn(t, cs, "c1", "", "r0")
	from := "r0"
	for round := range 5 {
		const n = 6
		start := make(chan struct{})
		var errs [n]error
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = stores[i%2].BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: from},
					Run: reservation(fmt.Sprintf("r%d-%d", round+1, i), "c1")})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: claims %d and %d both won", round, winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, chat.ErrConflict, "round %d", round)
		}
		require.NotEqual(t, -1, winner, "round %d: no claim won", round)
		won := fmt.Sprintf("r%d-%d", round+1, winner)
		m := getMessage(t, cs2, "c1", a1.ID)
		require.Equal(t, won, m.RunID, "round %d", round)
		require.Equal(t, chat.StatusPending, m.Status)
		for i := range n {
			id := fmt.Sprintf("r%d-%d", round+1, i)
			if i == winner {
				_, err := runs2.GetRun(ctx, id)
				require.NoError(t, err, "round %d: the winner's reservation", round)
				continue
			}
			requireNoRun(t, runs, id)
		}
		from = won
	}
}

// testFinishMessage: a run settles its message only while the message is
// still its own.
func (s *suite) testFinishMessage(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	u1, a1 := turn(t, cs, "c1", "", "r1")

	fin := &chat.Message{ID: a1.ID, ChatID: "c1", RunID: "r1", Content: "the answer", Status: chat.StatusFailed,
		Error: "model timed out", ParentID: "ignored"}
	require.NoError(t, cs.FinishMessage(ctx, fin))
	require.False(t, fin.UpdatedAt.IsZero())
	m := getMessage(t, cs, "c1", a1.ID)
	require.Equal(t, "the answer", m.Content)
	require.Equal(t, chat.StatusFailed, m.Status)
	require.Equal(t, "model timed out", m.Error)
	require.Equal(t, u1.ID, m.ParentID, "FinishMessage writes content, status and error only")
	require.Equal(t, "r1", m.RunID)

	// Another run's result is refused.
	other := &chat.Message{ID: a1.ID, ChatID: "c1", RunID: "r0", Content: "stale", Status: chat.StatusCompleted}
	require.ErrorIs(t, cs.FinishMessage(ctx, other), chat.ErrConflict)
	require.Equal(t, "the answer", getMessage(t, cs, "c1", a1.ID).Content)

	// After a continue took the message over, the old run is refused and
	// the new one settles it.
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a1.ID, FromRunID: "r1"},
		Run: reservation("r2", "c1")}))
	late := &chat.Message{ID: a1.ID, ChatID: "c1", RunID: "r1", Content: "late", Status: chat.StatusCancelled}
	require.ErrorIs(t, cs.FinishMessage(ctx, late), chat.ErrConflict)
	m = getMessage(t, cs, "c1", a1.ID)
	require.Equal(t, chat.StatusPending, m.Status)
	require.Equal(t, "the answer", m.Content)
	require.NoError(t, cs.FinishMessage(ctx, &chat.Message{ID: a1.ID, ChatID: "c1", RunID: "r2", Content: "the whole answer",
		Status: chat.StatusCompleted}))
	m = getMessage(t, cs, "c1", a1.ID)
	require.Equal(t, chat.StatusCompleted, m.Status)
	require.Equal(t, "the whole answer", m.Content)
	require.Empty(t, m.Error)

	require.ErrorIs(t, cs.FinishMessage(ctx, &chat.Message{ID: "zz", ChatID: "c1", RunID: "r2"}), chat.ErrNotFound)
	require.ErrorIs(t, cs.FinishMessage(ctx, &chat.Message{ID: a1.ID, ChatID: "nope", RunID: "r2"}), chat.ErrNotFound)
}

// A turn's request (Turn.Request) is kept with the turn, read back by
// any instance, and taken once per chat: a second turn with the id is
// refused and writes nothing, also when it claims a message instead; the
// same id in another chat is another request. Deleting the turn's
// messages (a rollback) or the chat forgets it.
func (s *suite) testRequests(t *testing.T) {
	cs, runs := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	newChat(t, cs, "c2")
	req := func(runID string) *chat.RequestRecord {
		return &chat.RequestRecord{ID: "req-1", Fingerprint: "fp-" + runID,
			Ticket: chat.Ticket{RunID: runID, MessageID: "a-" + runID, UserMessageID: "u-" + runID, ChatID: "c1"}}
	}
	_, err := cs.GetRequest(ctx, "c1", "req-1")
	require.ErrorIs(t, err, chat.ErrNotFound)
	u := &chat.Message{ID: "u-r1", Role: chat.RoleUser, Content: "hi", RunID: "r1", TurnRunID: "r1", Status: chat.StatusCompleted}
	a := &chat.Message{ID: "a-r1", ParentID: u.ID, Role: chat.RoleAssistant, RunID: "r1", TurnRunID: "r1", Status: chat.StatusPending}
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: a.ID, Messages: []*chat.Message{u, a},
		Run: reservation("r1", "c1"), Request: req("r1")}))
	other, _ := s.second(t, cs, runs)
	got, err := other.GetRequest(ctx, "c1", "req-1")
	require.NoError(t, err)
	require.Equal(t, "fp-r1", got.Fingerprint)
	require.Equal(t, chat.Ticket{RunID: "r1", MessageID: "a-r1", UserMessageID: "u-r1", ChatID: "c1"}, got.Ticket)
	require.False(t, got.CreatedAt.IsZero())

	// Taken: a new turn, and a claim, are refused with nothing written.
	u2 := &chat.Message{ID: "u-r2", Role: chat.RoleUser, Content: "hi", RunID: "r2", TurnRunID: "r2", Status: chat.StatusCompleted}
	a2 := &chat.Message{ID: "a-r2", ParentID: u2.ID, Role: chat.RoleAssistant, RunID: "r2", TurnRunID: "r2", Status: chat.StatusPending}
	err = other.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: a2.ID, Messages: []*chat.Message{u2, a2},
		Run: reservation("r2", "c1"), Request: req("r2")})
	require.ErrorIs(t, err, chat.ErrRequestTaken)
	err = cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a.ID, FromRunID: "r1"},
		Run: reservation("r3", "c1"), Request: req("r3")})
	require.ErrorIs(t, err, chat.ErrRequestTaken)
	_, err = cs.GetMessage(ctx, "c1", "u-r2")
	require.ErrorIs(t, err, chat.ErrNotFound)
	require.Equal(t, "r1", getMessage(t, cs, "c1", a.ID).RunID, "the refused claim took nothing")
	for _, id := range []string{"r2", "r3"} {
		_, err = runs.GetRun(ctx, id)
		require.ErrorIs(t, err, runtime.ErrRunNotFound, "no reservation of %s", id)
	}
	c, err := cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, a.ID, c.ActiveLeafID)
	got, err = cs.GetRequest(ctx, "c1", "req-1")
	require.NoError(t, err)
	require.Equal(t, "r1", got.Ticket.RunID, "the first turn's request is kept")

	// Another chat's request of the same id.
	u4 := &chat.Message{ID: "u-r4", Role: chat.RoleUser, Content: "hi", RunID: "r4", TurnRunID: "r4", Status: chat.StatusCompleted}
	r4 := req("r4")
	r4.Ticket.ChatID = "c2"
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c2", Messages: []*chat.Message{u4}, Run: reservation("r4", "c2"), Request: r4}))
	got, err = cs.GetRequest(ctx, "c2", "req-1")
	require.NoError(t, err)
	require.Equal(t, "r4", got.Ticket.RunID)

	// A rollback of the turn forgets it; so does deleting the chat.
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{u.ID, a.ID}, ""))
	_, err = cs.GetRequest(ctx, "c1", "req-1")
	require.ErrorIs(t, err, chat.ErrNotFound)
	require.NoError(t, cs.DeleteChat(ctx, "c2"))
	_, err = cs.GetRequest(ctx, "c2", "req-1")
	require.ErrorIs(t, err, chat.ErrNotFound)
}

// Text holding U+0000 — a client's message, a tool's error in an answer,
// a graph's name or JSON — is written and read back, or with U+FFFD in
// its place (ReplacesNUL); so is a graph holding a lone surrogate escape;
// an id holding U+0000 is simply not found.
func (s *suite) testTextWithNUL(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	const nul = "a\x00b"
	// A lone surrogate escape (\ud800), which jsonb refuses too, reads
	// as U+FFFD in Go wherever it is kept.
	want, wantJSON := nul, `{"name":"a\u0000b","x":"\\u0000","s":"\ufffd"}`
	if s.replacesNUL {
		want, wantJSON = "a\uFFFDb", `{"name":"a\ufffdb","x":"\\u0000","s":"\ufffd"}`
	}
	require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: "g1", Name: nul,
		Body: json.RawMessage(`{"name":"a\u0000b","x":"\\u0000","s":"\ud800"}`)}))
	g, err := cs.GetGraph(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, want, g.Name)
	require.JSONEq(t, wantJSON, string(g.Body))

	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "c1", GraphID: "g1", Title: nul}, 0))
	c, err := cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, want, c.Title)
	u := &chat.Message{ID: "u-r1", Role: chat.RoleUser, Content: nul, RunID: "r1", TurnRunID: "r1", Status: chat.StatusCompleted}
	a := &chat.Message{ID: "a-r1", ParentID: u.ID, Role: chat.RoleAssistant, RunID: "r1", TurnRunID: "r1", Status: chat.StatusPending}
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: a.ID, Messages: []*chat.Message{u, a},
		Run: reservation("r1", "c1")}))
	require.Equal(t, want, getMessage(t, cs, "c1", u.ID).Content)
	require.NoError(t, cs.FinishMessage(ctx, &chat.Message{ID: a.ID, ChatID: "c1", RunID: "r1", Content: "echo: " + nul,
		Status: chat.StatusFailed, Error: "tool: " + nul}))
	m := getMessage(t, cs, "c1", a.ID)
	require.Equal(t, "echo: "+want, m.Content)
	require.Equal(t, "tool: "+want, m.Error)

	_, err = cs.GetChat(ctx, "c1\x00")
	require.ErrorIs(t, err, chat.ErrNotFound)
	_, err = cs.GetMessage(ctx, "c1", "u-r1\x00")
	require.ErrorIs(t, err, chat.ErrNotFound)
	_, err = cs.GetGraph(ctx, "g1\x00")
	require.ErrorIs(t, err, chat.ErrNotFound)
}

func (s *suite) testUnsettled(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	newChat(t, cs, "c2")
	_, a1 := turn(t, cs, "c1", "", "r1")
	_, a2 := turn(t, cs, "c2", "", "r2")
	_, a3 := turn(t, cs, "c1", a1.ID, "r3")
	ids := func(limit int) []string {
		ms, err := cs.Unsettled(ctx, limit)
		require.NoError(t, err)
		out := []string{}
		for _, m := range ms {
			require.Equal(t, chat.RoleAssistant, m.Role)
			out = append(out, m.ID)
		}
		return out
	}
	require.Equal(t, []string{a1.ID, a2.ID, a3.ID}, ids(10), "assistant messages only, least recently updated first")
	require.Equal(t, []string{a1.ID}, ids(1))

	// Running still counts; an answer settles out; a continue's claim
	// brings one back.
	a2.Status = chat.StatusRunning
	require.NoError(t, cs.FinishMessage(ctx, a2))
	a1.Status, a1.Content = chat.StatusCompleted, "done"
	require.NoError(t, cs.FinishMessage(ctx, a1))
	require.Equal(t, []string{a3.ID, a2.ID}, ids(10))
	a3.Status = chat.StatusInterrupted
	require.NoError(t, cs.FinishMessage(ctx, a3))
	require.Equal(t, []string{a2.ID}, ids(10))
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Claim: &chat.Claim{MessageID: a3.ID, FromRunID: "r3"},
		Run: reservation("r4", "c1")}))
	require.Equal(t, []string{a2.ID, a3.ID}, ids(10))
}

// testPages: pages of graphs and chats cover each list once, in order,
// also with ties in time, and a page never repeats what came before.
func (s *suite) testPages(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	const n = 7
	for i := range n {
		require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: fmt.Sprintf("g%d", i), Body: json.RawMessage(`{}`)}))
		require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: fmt.Sprintf("c%d", i), GraphID: "g0"}, 0))
	}
	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "other", GraphID: "g1"}, 0))
	all, err := cs.ListGraphs(ctx, chat.Page{})
	require.NoError(t, err)
	require.Len(t, all, n)
	var paged []string
	var after chat.Cursor
	for {
		got, err := cs.ListGraphs(ctx, chat.Page{Limit: 3, After: after})
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), 3)
		if len(got) == 0 {
			break
		}
		for _, g := range got {
			paged = append(paged, g.ID)
		}
		last := got[len(got)-1]
		after = chat.Cursor{At: last.UpdatedAt, ID: last.ID}
	}
	want := []string{}
	for _, g := range all {
		want = append(want, g.ID)
	}
	require.Equal(t, want, paged, "the pages are the list")

	allChats, err := cs.ListChats(ctx, "g0", chat.Page{})
	require.NoError(t, err)
	require.Len(t, allChats, n)
	paged, after = nil, chat.Cursor{}
	for {
		got, err := cs.ListChats(ctx, "g0", chat.Page{Limit: 2, After: after})
		require.NoError(t, err)
		if len(got) == 0 {
			break
		}
		for _, c := range got {
			require.Equal(t, "g0", c.GraphID)
			paged = append(paged, c.ID)
		}
		last := got[len(got)-1]
		after = chat.Cursor{At: last.CreatedAt, ID: last.ID}
	}
	want = []string{}
	for _, c := range allChats {
		want = append(want, c.ID)
	}
	require.Equal(t, want, paged)

	// A cursor inside a run of equal times continues by id.
	got, err := cs.ListChats(ctx, "g0", chat.Page{After: chat.Cursor{At: allChats[0].CreatedAt, ID: allChats[0].ID}})
	require.NoError(t, err)
	require.Len(t, got, n-1)
}

// testMessagePages: pages of a chat's messages cover it once, in
// creation order, never reach into another chat, and keep their place
// when messages before the cursor are deleted.
func (s *suite) testMessagePages(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	newChat(t, cs, "c2")
	parent := ""
	for i := range 4 {
		_, a := turn(t, cs, "c1", parent, fmt.Sprintf("r%d", i))
		parent = a.ID
		turn(t, cs, "c2", "", fmt.Sprintf("other%d", i))
	}
	all := messageIDs(t, cs, "c1")
	require.Len(t, all, 8)

	var paged []string
	var after int64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging must end")
		got, err := cs.ListMessages(ctx, "c1", after, 3)
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), 3)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			require.Equal(t, "c1", m.ChatID)
			require.Greater(t, m.Seq, after, "seqs rise")
			after = m.Seq
			paged = append(paged, m.ID)
		}
	}
	require.Equal(t, all, paged, "the pages are the chat")

	first, err := cs.ListMessages(ctx, "c1", 0, 2)
	require.NoError(t, err)
	require.Equal(t, all[:2], []string{first[0].ID, first[1].ID})
	// Deleting what came before the cursor moves nothing after it.
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{all[0], all[1]}, ""))
	rest, err := cs.ListMessages(ctx, "c1", first[1].Seq, 0)
	require.NoError(t, err)
	require.Len(t, rest, 6)
	require.Equal(t, all[2], rest[0].ID)

	got, err := cs.GetMessage(ctx, "c1", all[2])
	require.NoError(t, err)
	require.Equal(t, rest[0].Seq, got.Seq, "GetMessage gives the same seq")

	empty, err := cs.ListMessages(ctx, "c1", rest[len(rest)-1].Seq, 5)
	require.NoError(t, err)
	require.Empty(t, empty, "past the last message: an empty page")
	_, err = cs.ListMessages(ctx, "nope", 0, 5)
	require.ErrorIs(t, err, chat.ErrNotFound)
}

// testChatsPerOwner: an owner's chats are bounded by maxOwned, other
// owners and chats of no owner are not counted, deleting a chat frees its
// place, and concurrent creations never pass the bound.
func (s *suite) testChatsPerOwner(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	create := func(id, owner string) error {
		return cs.CreateChat(ctx, &chat.Chat{ID: id, GraphID: "g1", Owner: owner}, 2)
	}
	require.NoError(t, create("a1", "alice"))
	require.NoError(t, create("a2", "alice"))
	require.ErrorIs(t, create("a3", "alice"), chat.ErrTooManyChats)
	require.ErrorIs(t, create("a1", "alice"), chat.ErrConflict, "a taken id is a conflict, also at the bound")
	_, err := cs.GetChat(ctx, "a3")
	require.ErrorIs(t, err, chat.ErrNotFound, "a refused chat is not written")
	require.NoError(t, create("b1", "bob"), "another owner has its own count")
	require.NoError(t, create("n1", ""), "a chat of no known client is not counted")
	require.NoError(t, create("n2", ""))
	require.NoError(t, create("n3", ""))
	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "a4", GraphID: "g1", Owner: "alice"}, 0), "maxOwned 0: no bound")

	got, err := cs.GetChat(ctx, "a1")
	require.NoError(t, err)
	require.Equal(t, "alice", got.Owner, "the owner is kept")

	require.ErrorIs(t, create("a5", "alice"), chat.ErrTooManyChats, "alice has 3")
	require.NoError(t, cs.DeleteChat(ctx, "a1"))
	require.NoError(t, cs.DeleteChat(ctx, "a2"))
	require.NoError(t, create("a5", "alice"), "deleting chats frees their places")
	require.ErrorIs(t, create("a6", "alice"), chat.ErrTooManyChats)

	// Concurrent creations: exactly the bound get through.
	var wg sync.WaitGroup
	var mu sync.Mutex
	made, refused := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cs.CreateChat(ctx, &chat.Chat{ID: fmt.Sprintf("carol%d", i), GraphID: "g1", Owner: "carol"}, 3)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made++
			case errors.Is(err, chat.ErrTooManyChats):
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 3, made)
	require.Equal(t, 5, refused)
}

// requireTree requires chatID's message tree whole: every parent, and
// the active leaf, is a message of the chat. It returns the messages by id.
func requireTree(t *testing.T, cs chat.Store, chatID, when string) map[string]*chat.Message {
	t.Helper()
	msgs, err := cs.Messages(t.Context(), chatID)
	require.NoError(t, err)
	byID := make(map[string]*chat.Message, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for _, m := range msgs {
		if m.ParentID != "" {
			require.Contains(t, byID, m.ParentID, "%s: message %s hangs from %s, which is gone", when, m.ID, m.ParentID)
		}
	}
	c, err := cs.GetChat(t.Context(), chatID)
	require.NoError(t, err)
	if c.ActiveLeafID != "" {
		require.Contains(t, byID, c.ActiveLeafID, "%s: the active leaf is gone", when)
	}
	return byID
}

// testDeleteKeepsTree: DeleteMessages moves the children of what it
// deletes, and the active leaf, onto the nearest ancestor that remains,
// and remembers where each deleted id leads (Remains), so a turn written
// under one of them afterwards hangs there too; a parent never there
// refuses the turn.
func (s *suite) testDeleteKeepsTree(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	u1, a1 := turn(t, cs, "c1", "", "r1")
	u2, a2 := turn(t, cs, "c1", a1.ID, "r2") // the turn rolled back
	u3, _ := turn(t, cs, "c1", a2.ID, "r3")  // a turn written under it
	x := &chat.Message{ID: "x-r4", ParentID: u2.ID, Role: chat.RoleAssistant, RunID: "r4", TurnRunID: "r4", Status: chat.StatusPending}
	require.NoError(t, cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Messages: []*chat.Message{x}, Run: reservation("r4", "c1")}))
	require.NoError(t, cs.SetActiveLeaf(ctx, "c1", a2.ID))

	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{a2.ID, u2.ID, "absent"}, ""))
	byID := requireTree(t, cs, "c1", "after the delete")
	require.Equal(t, a1.ID, byID[u3.ID].ParentID, "a child of a deleted message hangs from what remains")
	require.Equal(t, a1.ID, byID[x.ID].ParentID, "so does one two deleted generations down")
	c, err := cs.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, a1.ID, c.ActiveLeafID, "a deleted active leaf moves too")
	for id, want := range map[string]string{a2.ID: a1.ID, u2.ID: a1.ID, u3.ID: u3.ID} {
		got, err := cs.Remains(ctx, "c1", id)
		require.NoError(t, err)
		require.Equal(t, want, got, "Remains(%s)", id)
	}
	_, err = cs.Remains(ctx, "c1", "zz")
	require.ErrorIs(t, err, chat.ErrNotFound, "never there")
	_, err = cs.Remains(ctx, "nope", a1.ID)
	require.ErrorIs(t, err, chat.ErrNotFound, "no chat")

	// A turn whose writer read its parent before the delete.
	u5, _ := turn(t, cs, "c1", a2.ID, "r5")
	require.Equal(t, a1.ID, u5.ParentID, "BeginTurn says where it hung the message")
	require.Equal(t, a1.ID, getMessage(t, cs, "c1", u5.ID).ParentID)

	// Deleting where tombstones lead: they lead on.
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{a1.ID}, ""))
	byID = requireTree(t, cs, "c1", "after the second delete")
	for _, id := range []string{u3.ID, x.ID, u5.ID} {
		require.Equal(t, u1.ID, byID[id].ParentID)
	}
	got, err := cs.Remains(ctx, "c1", a2.ID)
	require.NoError(t, err)
	require.Equal(t, u1.ID, got)
	u6, _ := turn(t, cs, "c1", a2.ID, "r6")
	require.Equal(t, u1.ID, u6.ParentID)

	// Deleting the root's child: its children become roots.
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{u1.ID}, ""))
	byID = requireTree(t, cs, "c1", "after deleting the root")
	require.Empty(t, byID[u3.ID].ParentID)
	got, err = cs.Remains(ctx, "c1", a2.ID)
	require.NoError(t, err)
	require.Empty(t, got, "the root")

	before := messageIDs(t, cs, "c1")
	err = cs.BeginTurn(ctx, chat.Turn{ChatID: "c1", Messages: []*chat.Message{{ID: "y", ParentID: "zz", Role: chat.RoleUser}},
		Run: reservation("r7", "c1")})
	require.ErrorIs(t, err, chat.ErrNotFound, "a parent never there")
	require.Equal(t, before, messageIDs(t, cs, "c1"), "nothing of it written")

	require.NoError(t, cs.DeleteChat(ctx, "c1"))
	newChat(t, cs, "c1")
	_, err = cs.Remains(ctx, "c1", a2.ID)
	require.ErrorIs(t, err, chat.ErrNotFound, "a deleted chat's tombstones go with it")
}

// testDeleteRacesInsert: turns written, by this instance and (durable
// stores) another, under the messages a DeleteMessages deletes at the
// same moment are all kept, hung from what remains, and the tree never
// holds an orphan, whichever commits first.
func (s *suite) testDeleteRacesInsert(t *testing.T) {
	cs, runs := s.open(t)
	cs2, _ := s.second(t, cs, runs)
	ctx := t.Context()
	newChat(t, cs, "c1")
	_, base := turn(t, cs, "c1", "", "base")
	const rounds, writers = 30, 3
	var hung, moved atomic.Int64 // turns BeginTurn hung from what remains, turns DeleteMessages moved
	defer func() {
		t.Logf("of the racing turns, BeginTurn hung %d, DeleteMessages moved %d", hung.Load(), moved.Load())
	}()
	for round := range rounds {
		vu, va := turn(t, cs, "c1", base.ID, fmt.Sprintf("v%d", round))
		start := make(chan struct{})
		errs := make(chan error, writers+1)
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			errs <- cs.DeleteMessages(ctx, "c1", []string{vu.ID, va.ID}, base.ID)
		})
		var kids []string
		for i := range writers {
			w, parent := cs, va.ID
			if i%2 == 1 {
				w, parent = cs2, vu.ID
			}
			run := fmt.Sprintf("k%d-%d", round, i)
			kids = append(kids, "u-"+run)
			wg.Go(func() {
				u := &chat.Message{ID: "u-" + run, ParentID: parent, Role: chat.RoleUser, Content: "hi", RunID: run, TurnRunID: run,
					Status: chat.StatusCompleted}
				a := &chat.Message{ID: "a-" + run, ParentID: u.ID, Role: chat.RoleAssistant, RunID: run, TurnRunID: run,
					Status: chat.StatusPending}
				<-start
				err := w.BeginTurn(ctx, chat.Turn{ChatID: "c1", ActiveLeafID: a.ID, Messages: []*chat.Message{u, a},
					Run: reservation(run, "c1")})
				if err == nil && u.ParentID != parent {
					hung.Add(1)
				} else if err == nil {
					moved.Add(1)
				}
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		byID := requireTree(t, cs, "c1", fmt.Sprintf("round %d", round))
		require.NotContains(t, byID, va.ID, "round %d: deleted", round)
		for _, id := range kids {
			require.Contains(t, byID, id, "round %d: the turn is kept", round)
			require.Equal(t, base.ID, byID[id].ParentID, "round %d: %s hangs from what remains", round, id)
		}
	}
}

// clock is a store's time in a test: it stands still until set.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *clock) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
}

// testTombstonesExpire: a tombstone leads for chat.TombstoneTTL after its
// delete, and from then on (exactly TombstoneTTL after it included) no
// longer: its id is then as a message never there — Remains answers
// ErrNotFound and a turn written under it is refused with ErrNotFound,
// writing no message and reserving no run — while the tombstones of a
// later delete of the chat still lead, and lead on when where they lead
// is deleted (an expired one is not revived by that). A later
// DeleteMessages, of any chat, deletes the expired tombstones from the
// store, every chat's, and keeps the live ones.
func (s *suite) testTombstonesExpire(t *testing.T) {
	if s.setNow == nil || s.tombstones == nil {
		t.Skip("the store's clock is not given (storetest.Expiry)")
	}
	cs, runs := s.open(t)
	ctx := t.Context()
	t0 := time.Now().UTC().Truncate(time.Second)
	clk := &clock{at: t0}
	s.setNow(cs, clk.now)
	requireRemains := func(chatID, id, want, when string) {
		t.Helper()
		got, err := cs.Remains(ctx, chatID, id)
		require.NoError(t, err, "%s: Remains(%s)", when, id)
		require.Equal(t, want, got, "%s: Remains(%s)", when, id)
	}
	requireExpired := func(chatID, id, when string) {
		t.Helper()
		_, err := cs.Remains(ctx, chatID, id)
		require.ErrorIs(t, err, chat.ErrNotFound, "%s: Remains(%s) of an expired tombstone", when, id)
	}
	// requireRefused: a turn under id is refused as one under a parent
	// never there, and leaves nothing.
	requireRefused := func(chatID, id, runID, when string) {
		t.Helper()
		before := messageIDs(t, cs, chatID)
		err := cs.BeginTurn(ctx, chat.Turn{ChatID: chatID, Messages: []*chat.Message{{ID: "u-" + runID, ParentID: id, Role: chat.RoleUser,
			Content: "hi", RunID: runID, TurnRunID: runID, Status: chat.StatusCompleted}}, Run: reservation(runID, chatID)})
		require.ErrorIs(t, err, chat.ErrNotFound, "%s: a turn under %s", when, id)
		require.Equal(t, before, messageIDs(t, cs, chatID), "%s: nothing of it written", when)
		requireNoRun(t, runs, runID)
	}

	// At t0: a rollback in c1 and one in c2.
	newChat(t, cs, "c1")
	newChat(t, cs, "c2")
	u1, a1 := turn(t, cs, "c1", "", "r1")
	u2, a2 := turn(t, cs, "c1", a1.ID, "r2")
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{u2.ID, a2.ID}, ""))
	_, q1 := turn(t, cs, "c2", "", "q1")
	q2u, q2a := turn(t, cs, "c2", q1.ID, "q2")
	require.NoError(t, cs.DeleteMessages(ctx, "c2", []string{q2u.ID, q2a.ID}, ""))
	require.Equal(t, 2, s.tombstones(t, cs, "c1"))
	require.Equal(t, 2, s.tombstones(t, cs, "c2"))

	// At t0 + TTL/2: another rollback in c1.
	clk.set(t0.Add(chat.TombstoneTTL / 2))
	u3, a3 := turn(t, cs, "c1", a1.ID, "r3")
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{u3.ID, a3.ID}, ""))
	require.Equal(t, 4, s.tombstones(t, cs, "c1"))

	clk.set(t0.Add(chat.TombstoneTTL - time.Microsecond))
	requireRemains("c1", a2.ID, a1.ID, "just before TTL")
	requireRemains("c2", q2a.ID, q1.ID, "just before TTL")

	// At t0 + TTL the first tombstones no longer lead; the later still do.
	clk.set(t0.Add(chat.TombstoneTTL))
	const at = "TTL after the first delete"
	for _, id := range []string{u2.ID, a2.ID} {
		requireExpired("c1", id, at)
	}
	requireExpired("c2", q2a.ID, at)
	requireRefused("c1", a2.ID, "x1", at)
	requireRefused("c2", q2u.ID, "x2", at)
	requireRemains("c1", a3.ID, a1.ID, at)
	u4, _ := turn(t, cs, "c1", a3.ID, "r4")
	require.Equal(t, a1.ID, u4.ParentID, "%s: a turn under a live tombstone hangs where it leads", at)

	// Deleting where the live tombstones lead: they lead on, the expired
	// ones stay expired, and the expired tombstones of both chats are
	// deleted (c2's by a delete in c1).
	require.NoError(t, cs.DeleteMessages(ctx, "c1", []string{a1.ID}, ""))
	requireTree(t, cs, "c1", "after deleting a1")
	for _, id := range []string{u3.ID, a3.ID, a1.ID} {
		requireRemains("c1", id, u1.ID, "after deleting a1")
	}
	requireExpired("c1", a2.ID, "after deleting a1")
	requireRefused("c1", a2.ID, "x3", "after deleting a1")
	u5, _ := turn(t, cs, "c1", a3.ID, "r5")
	require.Equal(t, u1.ID, u5.ParentID)
	require.Equal(t, 3, s.tombstones(t, cs, "c1"), "the live tombstones of c1 (u3, a3, a1) are kept, the expired deleted")
	require.Equal(t, 0, s.tombstones(t, cs, "c2"), "a delete in c1 deletes c2's expired tombstones too")

	// At t0 + TTL/2 + TTL the second rollback's tombstones expire in
	// their turn; a1's (deleted at t0 + TTL) still leads, and a delete in
	// c2 deletes c1's expired ones.
	clk.set(t0.Add(chat.TombstoneTTL/2 + chat.TombstoneTTL))
	const later = "TTL after the second delete"
	requireExpired("c1", a3.ID, later)
	requireRefused("c1", u3.ID, "x4", later)
	requireRemains("c1", a1.ID, u1.ID, later)
	require.NoError(t, cs.DeleteMessages(ctx, "c2", []string{q1.ID}, ""))
	require.Equal(t, 1, s.tombstones(t, cs, "c1"), "a1's tombstone is kept")
	require.Equal(t, 1, s.tombstones(t, cs, "c2"), "q1's")
	requireTree(t, cs, "c1", "at the end")
	requireTree(t, cs, "c2", "at the end")
}

func (s *suite) testUpdateMessage(t *testing.T) {
	cs, _ := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	u1, a1 := turn(t, cs, "c1", "", "r1")
	up := &chat.Message{ID: a1.ID, ChatID: "c1", ParentID: "elsewhere", Content: "echo: hi", Status: chat.StatusInterrupted,
		RunID: "r7", Error: "paused", Role: chat.RoleUser, TurnRunID: "r9", AgentNodeID: "other"}
	require.NoError(t, cs.UpdateMessage(ctx, up))
	require.False(t, up.UpdatedAt.IsZero())
	m := getMessage(t, cs, "c1", a1.ID)
	require.Equal(t, u1.ID, m.ParentID, "the parent is not UpdateMessage's")
	require.Equal(t, "echo: hi", m.Content)
	require.Equal(t, chat.StatusInterrupted, m.Status)
	require.Equal(t, "r7", m.RunID)
	require.Equal(t, "paused", m.Error)
	require.Equal(t, chat.RoleAssistant, m.Role, "the role is not UpdateMessage's")
	require.Equal(t, "r1", m.TurnRunID, "the turn run id never changes")
	require.Empty(t, m.AgentNodeID, "the agent is not UpdateMessage's")
	require.Equal(t, []string{u1.ID, a1.ID}, messageIDs(t, cs, "c1"), "an update keeps the order")
	require.ErrorIs(t, cs.UpdateMessage(ctx, &chat.Message{ID: "zz", ChatID: "c1"}), chat.ErrNotFound)
	require.ErrorIs(t, cs.UpdateMessage(ctx, &chat.Message{ID: a1.ID, ChatID: "nope"}), chat.ErrNotFound)
}

// testClose: closing a chat store leaves its run store open.
func (s *suite) testClose(t *testing.T) {
	cs, runs := s.open(t)
	ctx := t.Context()
	newChat(t, cs, "c1")
	turn(t, cs, "c1", "", "r1")
	require.NoError(t, cs.Close())
	require.NoError(t, cs.Close(), "Close twice")
	rec, err := runs.GetRun(ctx, "r1")
	require.NoError(t, err)
	run := *rec
	run.Status = runtime.RunRunning
	require.NoError(t, runs.CreateRun(ctx, &run), "the run store still writes")
}

// testReopen: a durable store's data survives a restart.
func (s *suite) testReopen(t *testing.T) {
	if s.reopen == nil {
		t.Skip("the store is not durable")
	}
	cs, runs := s.open(t)
	ctx := t.Context()
	require.NoError(t, cs.CreateGraph(ctx, &chat.Graph{ID: "g1", Name: "one", Body: json.RawMessage(`{"nodes":[]}`)}))
	newChat(t, cs, "c1")
	_, a1 := turn(t, cs, "c1", "", "r1")

	// Restart: the first process goes away before the second reads.
	require.NoError(t, cs.Close())
	if c, ok := runs.(io.Closer); ok {
		require.NoError(t, c.Close())
	}
	cs2, runs2 := s.reopen(t, cs, runs)
	g, err := cs2.GetGraph(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, "one", g.Name)
	c, err := cs2.GetChat(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, a1.ID, c.ActiveLeafID)
	require.Equal(t, []string{"u-r1", a1.ID}, messageIDs(t, cs2, "c1"))
	rec, err := runs2.GetRun(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunPending, rec.Status)
}

// testHistoryMigration: a store that migrates inline histories
// (chat.HistoryMigrator) reads only chat runs whose input has a history,
// in id order, a batch at a time past the runs it kept, hands each the
// messages of its chat, writes only the input it is given, and once done
// is done.
func (s *suite) testHistoryMigration(t *testing.T) {
	cs, runs := s.open(t)
	m, ok := cs.(chat.HistoryMigrator)
	if !ok {
		t.Skip("the store does not migrate run inputs")
	}
	ctx := t.Context()
	newChat(t, cs, "c1")
	newChat(t, cs, "c2")
	inline := map[string]any{"history": []any{map[string]any{"role": "user", "content": "earlier"}}, "content": "now"}
	finish := func(id string, input any) {
		rec := reservation(id, "")
		if r, err := runs.GetRun(ctx, id); err == nil {
			rec = r
		}
		rec.Status, rec.Input, rec.LastSeq = runtime.RunCompleted, input, 0
		require.NoError(t, runs.CreateRun(ctx, rec))
	}
	_, a1 := turn(t, cs, "c1", "", "h1")
	turn(t, cs, "c1", a1.ID, "h2")
	turn(t, cs, "c1", "", "h3")
	turn(t, cs, "c2", "", "h4")
	finish("h1", inline)
	finish("h2", inline)
	finish("h3", map[string]any{"content": "no history"})
	finish("h4", inline)
	finish("h0", inline) // not a chat run
	var seen []string
	rewrite := func(r chat.InlineRun, msgs []*chat.Message) (any, bool) {
		seen = append(seen, fmt.Sprintf("%s/%s/%d/%v", r.ID, r.ChatID, len(msgs), r.Attrs["messageId"]))
		require.Equal(t, inline, r.Input)
		if r.ID == "h2" {
			return nil, false
		}
		return map[string]any{"rewritten": r.ID}, true
	}
	var batches []chat.HistoryBatch
	for after := ""; ; {
		b, err := m.MigrateInlineHistory(ctx, after, 1, rewrite)
		require.NoError(t, err)
		batches = append(batches, b)
		if b.Done {
			break
		}
		require.Less(t, len(batches), 10, "the batches come to an end")
		after = b.Last
	}
	require.Equal(t, []string{"h1/c1/6/a-h1", "h2/c1/6/a-h2", "h4/c2/2/a-h4"}, seen)
	require.Equal(t, []chat.HistoryBatch{{Last: "h1", Rewritten: 1}, {Last: "h2", Kept: 1}, {Last: "h4", Rewritten: 1}, {Last: "h4", Done: true}}, batches)
	for id, want := range map[string]any{"h1": map[string]any{"rewritten": "h1"}, "h2": inline, "h3": map[string]any{"content": "no history"},
		"h4": map[string]any{"rewritten": "h4"}, "h0": inline} {
		rec, err := runs.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, rec.Input, id)
		require.Equal(t, runtime.RunCompleted, rec.Status, "only the input changes")
	}

	// Done is done: the next start reads nothing.
	rec, err := runs.GetRun(ctx, "h3")
	require.NoError(t, err)
	rec.Input = inline
	require.NoError(t, runs.UpdateRun(ctx, rec))
	b, err := m.MigrateInlineHistory(ctx, "", 1, rewrite)
	require.NoError(t, err)
	require.Equal(t, chat.HistoryBatch{Done: true}, b)
	require.Len(t, seen, 3)
}
