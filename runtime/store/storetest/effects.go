package storetest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// The runtime.EffectLedger section: first write wins (also between two
// store instances), values round-trip as JSON, DeleteEffects removes one
// lineage, records survive a restart, and retention keeps a lineage's
// effects while any of its runs remains.

func (s *suite) ledger(t *testing.T, st runtime.Store) runtime.EffectLedger {
	t.Helper()
	l, ok := st.(runtime.EffectLedger)
	if !ok {
		t.Skipf("%T does not implement runtime.EffectLedger", st)
	}
	return l
}

func effect(key, root string, value string) runtime.EffectRecord {
	return runtime.EffectRecord{Key: key, RootRunID: root, NodeID: "agent-1", Kind: "tool_call",
		Value: json.RawMessage(value), CreatedAt: at(time.Minute)}
}

// requireEffect compares records with times at millisecond precision and
// values as JSON.
func requireEffect(t *testing.T, want, got runtime.EffectRecord) {
	t.Helper()
	require.Equal(t, want.Key, got.Key)
	require.Equal(t, want.RootRunID, got.RootRunID, "root run id of %s", want.Key)
	require.Equal(t, want.NodeID, got.NodeID, "node id of %s", want.Key)
	require.Equal(t, want.Kind, got.Kind, "kind of %s", want.Key)
	require.JSONEq(t, string(want.Value), string(got.Value), "value of %s", want.Key)
	require.Equal(t, ms(want.CreatedAt), ms(got.CreatedAt), "createdAt of %s", want.Key)
}

func getEffect(t *testing.T, l runtime.EffectLedger, key string) (runtime.EffectRecord, bool) {
	t.Helper()
	rec, ok, err := l.GetEffect(t.Context(), key)
	require.NoError(t, err)
	return rec, ok
}

func putEffect(t *testing.T, l runtime.EffectLedger, rec runtime.EffectRecord) runtime.EffectRecord {
	t.Helper()
	kept, err := l.PutEffect(t.Context(), rec)
	require.NoError(t, err)
	return kept
}

func (s *suite) testEffectPutGet(t *testing.T) {
	st := s.open(t)
	l := s.ledger(t, st)
	ctx := t.Context()

	rec, ok, err := l.GetEffect(ctx, "missing")
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, rec)

	first := effect("k1", "root-1", `{"result":"ok"}`)
	requireEffect(t, first, putEffect(t, l, first))
	got, ok := getEffect(t, l, "k1")
	require.True(t, ok)
	requireEffect(t, first, got)

	// A second write of the key keeps every field of the first.
	second := runtime.EffectRecord{Key: "k1", RootRunID: "root-2", NodeID: "other", Kind: "model_step",
		Value: json.RawMessage(`{"result":"again"}`), CreatedAt: at(time.Hour)}
	requireEffect(t, first, putEffect(t, l, second))
	got, _ = getEffect(t, l, "k1")
	requireEffect(t, first, got)

	// The store dates a record without CreatedAt; an empty value is null.
	before := time.Now().Add(-time.Minute)
	kept := putEffect(t, l, runtime.EffectRecord{Key: "k2", RootRunID: "root-1"})
	require.True(t, kept.CreatedAt.After(before) && kept.CreatedAt.Before(time.Now().Add(time.Minute)), "createdAt %s", kept.CreatedAt)
	require.JSONEq(t, `null`, string(kept.Value))
	got, _ = getEffect(t, l, "k2")
	requireEffect(t, kept, got)

	// Records handed out are copies.
	kept.Value[0] = 'x'
	got.Value[0] = 'x'
	got, _ = getEffect(t, l, "k2")
	require.JSONEq(t, `null`, string(got.Value))

	// Invalid records are refused and leave nothing behind.
	for _, tc := range []struct {
		name string
		rec  runtime.EffectRecord
	}{
		{"no key", runtime.EffectRecord{RootRunID: "root-1", Value: json.RawMessage(`1`)}},
		{"no root run id", runtime.EffectRecord{Key: "bad-root", Value: json.RawMessage(`1`)}},
		{"value not JSON", runtime.EffectRecord{Key: "bad-value", RootRunID: "root-1", Value: json.RawMessage(`{"a":`)}},
	} {
		_, err := l.PutEffect(ctx, tc.rec)
		require.Error(t, err, tc.name)
		_, ok := getEffect(t, l, tc.rec.Key)
		require.False(t, ok, tc.name)
	}
}

func (s *suite) testEffectValues(t *testing.T) {
	st := s.open(t)
	l := s.ledger(t, st)
	other := s.ledger(t, s.second(t, st))
	for i, v := range []string{
		`{"result":"42","error":"","decision":{"approved":true,"reason":"fine"}}`,
		`{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"calc","arguments":"{\"expression\":\"6*7\"}"}]}`,
		`[1,"two",null,{"x":[]},[[]],-0.5,1e300]`,
		`"text with \"quotes\", \\ backslashes, tabs\t, unicode ✓ 😀 and \u0000"`,
		`3.25`, `-17`, `true`, `false`, `null`, `{}`, `[]`,
		` { "spaced" : [ 1 , 2 ] } `,
		`{"big":"` + strings.Repeat("0123456789", 6554) + `"}`, // 64 KiB
	} {
		key := fmt.Sprintf("v%d", i)
		rec := effect(key, "root-1", v)
		requireEffect(t, rec, putEffect(t, l, rec))
		got, ok := getEffect(t, l, key)
		require.True(t, ok, key)
		requireEffect(t, rec, got)
		got, ok = getEffect(t, other, key)
		require.True(t, ok, key)
		requireEffect(t, rec, got)
	}
}

// testEffectFirstWriteWins races writers of one key, spread over two
// store instances when the store is durable: exactly one value is kept,
// and every writer gets that record back.
func (s *suite) testEffectFirstWriteWins(t *testing.T) {
	st := s.open(t)
	ledgers := []runtime.EffectLedger{s.ledger(t, st), s.ledger(t, s.second(t, st))}
	const writers, rounds = 16, 5
	for round := range rounds {
		key := fmt.Sprintf("race-%d", round)
		start := make(chan struct{})
		kept := make([]runtime.EffectRecord, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				rec := runtime.EffectRecord{Key: key, RootRunID: "root-1", NodeID: fmt.Sprintf("n%d", i), Kind: "tool_call",
					Value: json.RawMessage(fmt.Sprintf(`{"writer":%d}`, i)), CreatedAt: at(time.Duration(i) * time.Second)}
				<-start
				kept[i], errs[i] = ledgers[i%2].PutEffect(t.Context(), rec)
			})
		}
		close(start)
		wg.Wait()
		for i := range writers {
			require.NoError(t, errs[i], "writer %d", i)
		}
		var winner struct{ Writer int }
		require.NoError(t, json.Unmarshal(kept[0].Value, &winner))
		require.Equal(t, fmt.Sprintf("n%d", winner.Writer), kept[0].NodeID, "the kept record is one writer's, whole")
		require.Equal(t, ms(at(time.Duration(winner.Writer)*time.Second)), ms(kept[0].CreatedAt))
		for i := range writers {
			requireEffect(t, kept[0], kept[i])
		}
		for _, l := range ledgers {
			got, ok := getEffect(t, l, key)
			require.True(t, ok)
			requireEffect(t, kept[0], got)
		}
	}
}

func (s *suite) testDeleteEffects(t *testing.T) {
	st := s.open(t)
	l := s.ledger(t, st)
	ctx := t.Context()
	putEffect(t, l, effect("a1", "root-a", `1`))
	putEffect(t, l, effect("a2", "root-a", `2`))
	putEffect(t, l, effect("b1", "root-b", `3`))

	require.NoError(t, l.DeleteEffects(ctx, "root-a"))
	for _, k := range []string{"a1", "a2"} {
		_, ok := getEffect(t, l, k)
		require.False(t, ok, k)
	}
	got, ok := getEffect(t, l, "b1")
	require.True(t, ok)
	requireEffect(t, effect("b1", "root-b", `3`), got)

	require.NoError(t, l.DeleteEffects(ctx, "root-a"), "deleting twice")
	require.NoError(t, l.DeleteEffects(ctx, "no-such-root"))

	// A deleted key can be recorded again.
	requireEffect(t, effect("a1", "root-a", `10`), putEffect(t, l, effect("a1", "root-a", `10`)))
}

func (s *suite) testEffectsReopen(t *testing.T) {
	if s.reopen == nil {
		t.Skip("store is not durable (no storetest.Durable option)")
	}
	st := s.open(t)
	l := s.ledger(t, st)
	rec := effect("k1", "root-1", `{"result":"sent","decision":{"approved":true}}`)
	putEffect(t, l, rec)

	if c, ok := st.(io.Closer); ok {
		require.NoError(t, c.Close())
	}
	l2 := s.ledger(t, s.reopen(t, st))
	got, ok := getEffect(t, l2, "k1")
	require.True(t, ok, "the effect survived the restart")
	requireEffect(t, rec, got)
	requireEffect(t, rec, putEffect(t, l2, effect("k1", "root-1", `{"result":"sent twice"}`)))
}

// testEffectsRetention: retention removes a lineage's effects with its
// last run, never while a run of it remains. DeleteRun leaves effects;
// the next DeleteFinishedBefore removes those it orphaned.
func (s *suite) testEffectsRetention(t *testing.T) {
	st := s.open(t)
	l := s.ledger(t, st)
	in := need[runtime.Inspector](t, st)
	ctx := t.Context()

	cut := at(time.Hour)
	old, recent := cut.Add(-time.Minute), cut.Add(time.Minute)
	mk := func(id, root string, status runtime.RunStatus, updated time.Time) {
		r := newRun(id)
		r.RootID, r.Status, r.UpdatedAt = root, status, updated
		create(t, st, r)
	}
	// L1: the root run finished long ago, its continuation is interrupted.
	mk("L1", "L1", runtime.RunCompleted, old)
	mk("L1-resumed", "L1", runtime.RunInterrupted, old)
	// L2: one old finished run.
	mk("L2", "L2", runtime.RunFailed, old)
	// L3: a running run that names no root (its id is the lineage).
	mk("L3", "", runtime.RunRunning, old)
	// L4: finished recently.
	mk("L4", "L4", runtime.RunCompleted, recent)
	for _, root := range []string{"L1", "L2", "L3", "L4", "stray"} {
		putEffect(t, l, effect(root+"-x", root, `1`))
		putEffect(t, l, effect(root+"-y", root, `2`))
	}
	has := func(root string) bool {
		t.Helper()
		_, x := getEffect(t, l, root+"-x")
		_, y := getEffect(t, l, root+"-y")
		require.Equal(t, x, y, root)
		return x
	}

	n, err := in.DeleteFinishedBefore(ctx, cut)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, has("L1"), "a lineage with a run left keeps its effects")
	require.False(t, has("L2"), "a lineage's last run takes its effects along")
	require.True(t, has("L3"))
	require.True(t, has("L4"))
	require.False(t, has("stray"), "effects of no run at all are removed")

	require.NoError(t, in.DeleteRun(ctx, "L1-resumed"))
	require.True(t, has("L1"), "DeleteRun leaves effects")
	n, err = in.DeleteFinishedBefore(ctx, cut)
	require.NoError(t, err)
	require.Zero(t, n)
	require.False(t, has("L1"), "the next retention pass removes what DeleteRun orphaned")
	require.True(t, has("L3"))
	require.True(t, has("L4"))
}

// testEffectsRetentionManyLineages has more lineages than one retention
// chunk holds, live ones among them at the start, in the middle and at
// the end of the order.
func (s *suite) testEffectsRetentionManyLineages(t *testing.T) {
	st := s.open(t)
	l := s.ledger(t, st)
	in := need[runtime.Inspector](t, st)
	const lineages = 1100
	live := map[int]bool{0: true, 500: true, 501: true, 999: true, lineages - 1: true}
	for i := range live {
		id := fmt.Sprintf("L%04d", i)
		r := newRun(id)
		r.RootID = id
		create(t, st, r)
	}
	var wg sync.WaitGroup
	errs := make(chan error, lineages)
	sem := make(chan struct{}, 8)
	for i := range lineages {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := l.PutEffect(t.Context(), effect(fmt.Sprintf("k%04d", i), fmt.Sprintf("L%04d", i), `1`)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	n, err := in.DeleteFinishedBefore(t.Context(), at(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
	for i := range lineages {
		_, ok := getEffect(t, l, fmt.Sprintf("k%04d", i))
		require.Equal(t, live[i], ok, "lineage %d", i)
	}
}
