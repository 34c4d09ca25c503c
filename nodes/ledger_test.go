package nodes_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
	"chatgraph/runtime/store/sqlite"
)

func TestStoreLedger(t *testing.T) {
	t.Parallel()
	st := memory.New()
	l := nodes.NewStoreLedger(st)
	ctx := context.Background()
	k := nodes.IdempotencyKey("root", "node", "call")
	_, ok, err := l.Get(ctx, k)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, l.Put(ctx, nodes.LedgerRecord{Key: k, RootRunID: "root", NodeID: "a", Kind: nodes.LedgerToolCall, Value: json.RawMessage(`1`)}))
	require.NoError(t, l.Put(ctx, nodes.LedgerRecord{Key: k, RootRunID: "root", NodeID: "a", Kind: nodes.LedgerToolCall, Value: json.RawMessage(`2`)}))
	rec, ok, err := l.Get(ctx, k)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `1`, string(rec.Value), "first write wins")
	require.Equal(t, "a", rec.NodeID)
	require.Equal(t, nodes.LedgerToolCall, rec.Kind)
	require.False(t, rec.CreatedAt.IsZero())

	// The records are the store's.
	eff, ok, err := st.GetEffect(ctx, k)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "root", eff.RootRunID)

	require.NoError(t, l.DeleteRoot(ctx, "root"))
	_, ok, err = l.Get(ctx, k)
	require.NoError(t, err)
	require.False(t, ok)
	require.Error(t, l.Put(ctx, nodes.LedgerRecord{Key: k, RootRunID: "root", Value: json.RawMessage(`{`)}), "store errors reach the agent")
}

// TestApprovalResumeAfterRestart is issue 5's point: a run interrupts at
// a tool approval after a sibling call of the same step completed; the
// server restarts (a new store handle on the same SQLite file, a new node
// registry, a new engine); the resume is approved. With the store-backed
// ledger the sibling ran once in all; the in-memory ledger, which the
// restart empties, runs it again — the control that shows the test can
// see a double execution.
func TestApprovalResumeAfterRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		durable     bool
		siblingRuns int32
		modelCalls  int32
	}{
		{"store ledger", true, 1, 2},
		{"memory ledger (lost on restart)", false, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "chatgraph.db")
			var sibling, guarded atomic.Int32 // invocations across both processes
			script := &scripted{}
			script.set(twoCalls(
				llm.ToolCall{ID: "c_sib", Name: "sibling", Arguments: `{}`},
				llm.ToolCall{ID: "c_guard", Name: "guarded", Arguments: `{"amount":5}`}))
			g := approvalGraph("restart")

			// process starts a "server": its own store handle, tools, models,
			// node registry, ledger and engine.
			process := func() (*runtime.Engine, *sqlite.Store) {
				st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, st.Close()) })
				treg := tools.NewRegistry()
				for name, n := range map[string]*atomic.Int32{"sibling": &sibling, "guarded": &guarded} {
					require.NoError(t, treg.Register(tools.New(tools.Spec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)},
						func(context.Context, tools.Call) (string, error) {
							n.Add(1)
							return name + " ok", nil
						})))
				}
				models := llm.NewModels()
				require.NoError(t, models.Register("script", script))
				var ledger nodes.Ledger = nodes.NewMemoryLedger()
				if tc.durable {
					ledger = nodes.NewStoreLedger(st)
				}
				reg := runtime.NewRegistry()
				require.NoError(t, nodes.Register(reg, nodes.Deps{Models: models, Tools: treg, Ledger: ledger}))
				eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: st})
				require.NoError(t, err)
				t.Cleanup(eng.Close)
				return eng, st
			}

			eng1, st1 := process()
			p, err := eng1.Compile(g)
			require.NoError(t, err)
			services := &nodes.Services{Scope: chatscope.New(p, nil)}
			s1 := &sink{}
			res, err := eng1.Invoke(t.Context(), runtime.RunRequest{Graph: g, Input: nodes.ChatInput{Content: "go"}.Value(),
				Services: services, Sink: s1})
			require.NoError(t, err)
			require.Equal(t, runtime.RunInterrupted, res.Status, "%v", res.Err)
			require.Equal(t, "guarded", res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.Name)
			require.EqualValues(t, 1, sibling.Load())
			require.Zero(t, guarded.Load())
			if tc.durable {
				// The sibling's outcome is in the file, under the key the tool got.
				var key string
				for _, e := range s1.of(nodes.EventToolCall, "a") {
					if d := e.Data.(*nodes.ToolCallData); d.Name == "sibling" {
						key = d.IdempotencyKey
					}
				}
				rec, ok, err := st1.GetEffect(t.Context(), key)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, nodes.LedgerToolCall, rec.Kind)
				require.Equal(t, res.RunID, rec.RootRunID)
				require.JSONEq(t, `{"result":"sibling ok"}`, string(rec.Value))
			}

			// Restart.
			eng1.Close()
			require.NoError(t, st1.Close())
			eng2, _ := process()
			defer eng2.Close()
			s2 := &sink{}
			res2, err := eng2.Resume(t.Context(), runtime.ResumeRequest{RunID: res.RunID, Graph: g,
				Value: map[string]any{"approved": true}, Services: services, Sink: s2})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res2.Status, "%v", res2.Err)
			checkLifecycle(t, s2.events())
			require.Equal(t, "done: sibling ok | guarded ok", output(t, res2, "o").Content)

			require.Equal(t, tc.siblingRuns, sibling.Load(), "sibling invocations in all")
			require.EqualValues(t, 1, guarded.Load(), "the approved call ran once")
			require.Equal(t, tc.modelCalls, script.n.Load(), "model calls in all")
			if tc.durable {
				for _, e := range s2.of(nodes.EventToolResult, "a") {
					d := e.Data.(*nodes.ToolResultData)
					require.Equal(t, d.Name == "sibling", d.Replayed, "%s replayed", d.Name)
				}
			}
		})
	}
}
