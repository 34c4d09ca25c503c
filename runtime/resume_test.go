package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

func TestInterruptAndResume(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := newMem()
	e := k.engine(t, st)
	// Two parallel interrupts plus work before and beside them.
	g := newGraph("g").node("s", "start").node("pre", "step").node("ask1", "step", `{"interrupt":"approval"}`).
		node("ask2", "step", `{"interrupt":"approval"}`).node("side", "step").node("post", "step").
		flow("s", "pre").flow("pre", "ask1").flow("pre", "ask2").flow("s", "side").flow("ask1", "post").flow("ask2", "post").build()
	res, c := invoke(t, e, g, func(r *runtime.RunRequest) { r.RunID = "r1" })
	require.Equal(t, runtime.RunInterrupted, res.Status)
	require.Len(t, res.Interrupts, 2)
	require.NotEqual(t, res.Interrupts[0].ID, res.Interrupts[1].ID, "parallel interrupts never collide")
	require.Equal(t, runtime.NodeSucceeded, res.NodeStatus("side"), "other branches finish")
	require.Equal(t, runtime.NodePending, res.NodeStatus("post"))
	require.Empty(t, c.types("post"), "nodes after an interrupt stay pending, with no event")
	last := c.events()[len(c.events())-1]
	require.Equal(t, runtime.EventRunInterrupted, last.Type)
	rec, err := st.GetRun(context.Background(), "r1")
	require.NoError(t, err)
	require.Equal(t, runtime.RunInterrupted, rec.Status)
	require.Equal(t, rec.LastSeq, last.Seq)

	// Several pending: a value without an id is ambiguous; an unknown id is refused.
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "r1", Graph: g, Value: "x"})
	require.ErrorIs(t, err, runtime.ErrInterruptNotFound)
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "r1", Graph: g, InterruptID: "int_nope", Value: "x"})
	require.ErrorIs(t, err, runtime.ErrInterruptNotFound)
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "missing", Graph: g})
	require.ErrorIs(t, err, runtime.ErrRunNotFound)

	byNode := map[string]string{}
	for _, in := range res.Interrupts {
		byNode[in.NodeID] = in.ID
	}
	// Answer ask1 only: ask2 interrupts again, post still waits.
	var c2 collect
	res2, err := e.Resume(context.Background(), runtime.ResumeRequest{RunID: "r1", NewRunID: "r2", Graph: g,
		InterruptID: byNode["ask1"], Value: "yes", Sink: &c2, Kind: "answer"})
	require.NoError(t, err)
	checkLifecycle(t, c2.events())
	require.Equal(t, runtime.RunInterrupted, res2.Status)
	start := c2.events()[0].Data.(*runtime.RunStartedData)
	require.Equal(t, "r1", start.ParentRunID)
	require.True(t, start.Resumed)
	require.Equal(t, "answer", start.Kind, "a continuation may name its own kind")
	require.Equal(t, 1, k.execCount("pre"), "succeeded nodes replay, not execute")
	require.Equal(t, 1, k.execCount("side"))
	require.Equal(t, 2, k.execCount("ask1"))
	for _, ev := range c2.events() {
		if ev.NodeID == "pre" && ev.Type == runtime.EventNodeStarted {
			require.True(t, ev.Data.(*runtime.NodeStartedData).Replayed)
		}
		if ev.NodeID == "pre" && ev.Type == runtime.EventNodeCompleted {
			require.True(t, ev.Data.(*runtime.NodeCompletedData).Replayed)
		}
	}
	out, _ := res2.Output("ask1")
	require.Equal(t, map[string]any{"answer": "yes"}, out)
	require.Len(t, res2.Interrupts, 1)
	require.Equal(t, byNode["ask2"], res2.Interrupts[0].ID, "an unanswered interrupt keeps its id across continuations")

	// Answer the rest: the run completes; ask1 replays from r2.
	res3, err := e.Resume(context.Background(), runtime.ResumeRequest{RunID: "r2", NewRunID: "r3", Graph: g, Value: "ok"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res3.Status)
	require.Equal(t, 2, k.execCount("ask1"))
	require.Equal(t, 3, k.execCount("ask2"))
	require.Equal(t, 1, k.execCount("post"))
	require.Equal(t, 1, k.execCount("pre"))
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "r3", Graph: g})
	require.ErrorIs(t, err, runtime.ErrRunNotResumable, "a completed run is not resumed")
}

func TestResumeAfterCancelSkipsFinishedWork(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := newMem()
	e := k.engine(t, st)
	g := newGraph("g").node("s", "start").node("a", "step").node("b", "step").node("c", "step").
		flow("s", "a").flow("a", "b").flow("b", "c").build()
	started, release := k.hold("b")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { <-started; cancel(errors.New("stop")) }()
	res, err := e.Invoke(ctx, runtime.RunRequest{Graph: g, RunID: "c1", Input: "x"})
	release()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Equal(t, 1, k.execCount("a"))

	var c collect
	res, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "c1", NewRunID: "c2", Graph: g, Sink: &c})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, res.Status)
	checkLifecycle(t, c.events())
	require.Equal(t, 1, k.execCount("s"))
	require.Equal(t, 1, k.execCount("a"), "a succeeded before the cancel: replayed")
	require.Equal(t, 2, k.execCount("b"), "b was cancelled: executed again")
	out, _ := res.Output("c")
	require.Equal(t, "c(b(a(s(x))))", out)

	// A new planVersion reruns everything, except sticky effects.
	g2 := newGraph("g").node("s", "start").node("a", "step", `{"effect":"external"}`).node("b", "step", `{"fail":99}`).
		node("c", "step").flow("s", "a").flow("a", "b").flow("b", "c").build()
	g2.PlanVersion = 2
	res, err = e.Invoke(context.Background(), runtime.RunRequest{Graph: g2, RunID: "v1"})
	require.NoError(t, err)
	require.Equal(t, runtime.RunFailed, res.Status)
	before := map[string]int{"s": k.execCount("s"), "a": k.execCount("a"), "b": k.execCount("b")}
	g3 := *g2
	g3.PlanVersion = 3
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "v1", Graph: &g3})
	require.NoError(t, err)
	require.Equal(t, before["s"]+1, k.execCount("s"), "changed planVersion reruns a pure node")
	require.Equal(t, before["a"], k.execCount("a"), "a succeeded external node never runs again")
	require.Equal(t, before["b"]+1, k.execCount("b"))
}

func TestResumeNeedsStore(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	_, err := e.Resume(context.Background(), runtime.ResumeRequest{RunID: "x"})
	require.ErrorIs(t, err, runtime.ErrRunNotResumable)
}

func TestStoredEventsMatchLiveEvents(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := newMem()
	e := k.engine(t, st)
	g := newGraph("g").node("s", "start").node("a", "step").node("b", "step").flow("s", "a").flow("s", "b").build()
	res, c := invoke(t, e, g, func(r *runtime.RunRequest) { r.RunID = "ev1" })
	stored, err := st.Events(context.Background(), "ev1", 0, 0)
	require.NoError(t, err)
	require.Equal(t, c.events(), stored)
	require.Equal(t, res.LastSeq, int64(len(stored)))
	page, err := st.Events(context.Background(), "ev1", 3, 2)
	require.NoError(t, err)
	require.Equal(t, stored[3:5], page)
}

// Forking from a checkpoint (time travel) reuses what had succeeded by that
// seq and re-executes the rest; the original run is untouched.
func TestForkFromCheckpoint(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := newMem()
	e := k.engine(t, st)
	g := newGraph("fork").node("s", "start").node("a", "step").node("b", "step").node("c", "step").
		flow("s", "a").flow("a", "b").flow("b", "c").build()
	res, c := invoke(t, e, g, func(r *runtime.RunRequest) { r.RunID = "orig" })
	require.Equal(t, runtime.RunCompleted, res.Status)
	var aDone int64
	for _, ev := range c.events() {
		if ev.Type == runtime.EventNodeCompleted && ev.NodeID == "a" {
			aDone = ev.Seq
		}
	}
	var fc collect
	fork, err := e.Resume(context.Background(), runtime.ResumeRequest{RunID: "orig", NewRunID: "fork1", Graph: g, AtSeq: aDone, Sink: &fc})
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, fork.Status)
	checkLifecycle(t, fc.events())
	require.Equal(t, 1, k.execCount("s"), "s succeeded before the checkpoint: replayed")
	require.Equal(t, 1, k.execCount("a"))
	require.Equal(t, 2, k.execCount("b"), "b came after the checkpoint: executed again")
	require.Equal(t, 2, k.execCount("c"))
	orig, err := st.GetRun(context.Background(), "orig")
	require.NoError(t, err)
	require.Equal(t, runtime.RunCompleted, orig.Status, "the original run is untouched")
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "orig", Graph: g, AtSeq: 10_000})
	require.ErrorIs(t, err, runtime.ErrCheckpointNotFound)
}

// Cancelling a run that waits for a human ends the wait: the run is
// cancelled, and a resume value for its old interrupt is refused.
func TestCancelInterruptedRun(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	st := newMem()
	e := k.engine(t, st)
	g := newGraph("wait").node("s", "start").node("ask", "step", `{"interrupt":"approval"}`).flow("s", "ask").build()
	res, _ := invoke(t, e, g, func(r *runtime.RunRequest) { r.RunID = "w1" })
	require.Equal(t, runtime.RunInterrupted, res.Status)
	before, _ := st.Events(context.Background(), "w1", 0, 0)

	rec, err := e.CancelInterrupted(context.Background(), "w1", errors.New("user pressed stop"))
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
	stored, _ := st.GetRun(context.Background(), "w1")
	require.Equal(t, runtime.RunCancelled, stored.Status)
	require.Empty(t, stored.Interrupts)
	require.Equal(t, "user pressed stop", stored.Error)
	after, _ := st.Events(context.Background(), "w1", 0, 0)
	require.Equal(t, before, after, "the closed log is not touched")

	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "w1", Graph: g, Value: "yes"})
	require.ErrorIs(t, err, runtime.ErrInterruptNotFound, "a resume value after the cancel is refused")
	_, err = e.Resume(context.Background(), runtime.ResumeRequest{RunID: "w1", Graph: g, InterruptID: res.Interrupts[0].ID, Value: "yes"})
	require.ErrorIs(t, err, runtime.ErrInterruptNotFound)
	_, err = e.CancelInterrupted(context.Background(), "w1", nil)
	require.ErrorIs(t, err, runtime.ErrRunNotResumable, "only a waiting run can have its wait cancelled")
}
