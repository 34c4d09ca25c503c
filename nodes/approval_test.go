package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// twoCalls scripts a model that asks for the given calls in one step,
// then answers "done: " + the tool results joined by " | ".
func twoCalls(calls ...llm.ToolCall) func(llm.Request) (llm.Response, error) {
	return func(req llm.Request) (llm.Response, error) {
		var results []string
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role == llm.RoleTool; i-- {
			results = append([]string{req.Messages[i].Content}, results...)
		}
		if len(results) == 0 {
			return llm.Response{ToolCalls: calls}, nil
		}
		return llm.Response{Content: "done: " + strings.Join(results, " | ")}, nil
	}
}

func approvalGraph(id string) *runtime.Graph {
	return newGraph(id).node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"script/x"}`).
		node("sib", nodes.TypeTool, `{"name":"sibling"}`).
		node("guard", nodes.TypeTool, `{"name":"guarded","requireApproval":true}`).
		node("o", nodes.TypeChatOutput).
		flow("s", "a").link("sib", "a").link("guard", "a").flow("a", "o").build()
}

// interruptFor runs g and checks it stopped at a's approval of tool guarded.
func interruptFor(t *testing.T, h *harness, g *runtime.Graph) (*runtime.RunResult, *sink) {
	t.Helper()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunInterrupted, res.Status)
	require.Len(t, res.Interrupts, 1)
	in := res.Interrupts[0]
	require.Equal(t, "a", in.NodeID)
	require.Equal(t, nodes.ReasonToolApproval, in.Reason)
	p := in.Payload.(*nodes.ApprovalRequiredData)
	require.Equal(t, nodes.ApprovalKindToolCall, p.Kind)
	require.Equal(t, "guarded", p.ToolCall.Name)
	require.True(t, p.ToolCall.RequiresApproval)

	ar := s.of(nodes.EventApprovalRequired, "a")
	require.Len(t, ar, 1)
	require.Equal(t, "guarded", ar[0].Data.(*nodes.ApprovalRequiredData).ToolCall.Name)
	require.Len(t, s.of(runtime.EventNodeInterrupted, "a"), 1)
	require.Less(t, ar[0].Seq, s.of(runtime.EventNodeInterrupted, "a")[0].Seq)
	// The sibling ran before the interrupt; the guarded call did not.
	require.Len(t, h.toolCalls("sibling"), 1)
	require.Empty(t, h.toolCalls("guarded"))
	return res, s
}

func TestToolApprovalApproved(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.script.set(twoCalls(
		llm.ToolCall{ID: "c_sib", Name: "sibling", Arguments: `{}`},
		llm.ToolCall{ID: "c_guard", Name: "guarded", Arguments: `{"amount":5}`}))
	g := approvalGraph("approve")
	res, s1 := interruptFor(t, h, g)
	guardKey := res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.IdempotencyKey

	res2, s2 := h.resume(t, g, res.RunID, map[string]any{"approved": true})
	require.Equal(t, runtime.RunCompleted, res2.Status, "%v", res2.Err)
	require.Equal(t, "done: sibling ok | guarded ok", output(t, res2, "o").Content)

	// No double execution (LangGraph #6208): the sibling ran once, in
	// the first run; the approved call once, in the resumed one.
	require.Len(t, h.toolCalls("sibling"), 1)
	guarded := h.toolCalls("guarded")
	require.Len(t, guarded, 1)
	require.Equal(t, guardKey, guarded[0].IdempotencyKey)
	require.JSONEq(t, `{"amount":5}`, string(guarded[0].Arguments))
	require.EqualValues(t, 2, h.script.n.Load(), "the first model step is replayed from the ledger")

	// The resumed run replays chat_start and reports the sibling as replayed.
	require.Equal(t, true, data(t, s2.of(runtime.EventNodeStarted, "s")[0])["replayed"])
	results := map[string]*nodes.ToolResultData{}
	for _, e := range s2.of(nodes.EventToolResult, "a") {
		d := e.Data.(*nodes.ToolResultData)
		results[d.ID] = d
	}
	require.True(t, results["c_sib"].Replayed)
	require.False(t, results["c_guard"].Replayed)
	require.Equal(t, &nodes.ApprovalDecision{Approved: true}, results["c_guard"].Approval)
	require.Equal(t, "guarded ok", results["c_guard"].Result)
	require.Empty(t, s2.of(nodes.EventApprovalRequired, ""))
	_ = s1
}

func TestToolApprovalDenied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.script.set(twoCalls(
		llm.ToolCall{ID: "c_sib", Name: "sibling", Arguments: `{}`},
		llm.ToolCall{ID: "c_guard", Name: "guarded", Arguments: `{}`}))
	g := approvalGraph("deny")
	res, _ := interruptFor(t, h, g)

	res2, s2 := h.resume(t, g, res.RunID, map[string]any{"approved": false, "reason": "too risky"})
	require.Equal(t, runtime.RunCompleted, res2.Status)
	require.Equal(t, "done: sibling ok | error: the user refused this call: too risky", output(t, res2, "o").Content)
	require.Len(t, h.toolCalls("sibling"), 1)
	require.Empty(t, h.toolCalls("guarded"))
	var refused *nodes.ToolResultData
	for _, e := range s2.of(nodes.EventToolResult, "a") {
		if d := e.Data.(*nodes.ToolResultData); d.ID == "c_guard" {
			refused = d
		}
	}
	require.NotNil(t, refused)
	require.Equal(t, "the user refused this call: too risky", refused.Error)
	require.Equal(t, &nodes.ApprovalDecision{Approved: false, Reason: "too risky"}, refused.Approval)
}

func TestTwoApprovalsInOneStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.script.set(twoCalls(
		llm.ToolCall{ID: "g1", Name: "guarded", Arguments: `{"n":1}`},
		llm.ToolCall{ID: "c_sib", Name: "sibling", Arguments: `{}`},
		llm.ToolCall{ID: "g2", Name: "guarded", Arguments: `{"n":2}`}))
	g := approvalGraph("two")
	res, _ := interruptFor(t, h, g)
	require.Equal(t, "g1", res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.ID)

	res2, _ := h.resume(t, g, res.RunID, true) // a bare bool works too
	require.Equal(t, runtime.RunInterrupted, res2.Status)
	require.Equal(t, "g2", res2.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.ID)
	require.NotEqual(t, res.Interrupts[0].ID, res2.Interrupts[0].ID)
	require.Len(t, h.toolCalls("guarded"), 1)

	res3, _ := h.resume(t, g, res2.RunID, map[string]any{"approved": false})
	require.Equal(t, runtime.RunCompleted, res3.Status)
	require.Equal(t, "done: guarded ok | sibling ok | error: the user refused this call", output(t, res3, "o").Content)
	require.Len(t, h.toolCalls("guarded"), 1)
	require.JSONEq(t, `{"n":1}`, string(h.toolCalls("guarded")[0].Arguments))
	require.Len(t, h.toolCalls("sibling"), 1)
}

func TestToolApprovalBadResumeValue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.script.set(twoCalls(llm.ToolCall{ID: "c_guard", Name: "guarded", Arguments: `{}`}))
	g := approvalGraph("bad")
	res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunInterrupted, res.Status)
	res2, _ := h.resume(t, g, res.RunID, map[string]any{"yes": 1})
	require.Equal(t, runtime.RunFailed, res2.Status)
	require.Equal(t, nodes.CodeInvalidResume, runtime.ErrorCode(res2.Err))
	require.Empty(t, h.toolCalls("guarded"))
}

// A guarded tool of a member agent interrupts the calling agent; the
// resume reaches the member's call, which runs once.
func TestMemberAgentApproval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("member").node("s", nodes.TypeChatStart).node("boss", nodes.TypeAgent).
		node("helper", nodes.TypeAgent, `{"name":"helper"}`).
		node("guard", nodes.TypeTool, `{"name":"guarded","requireApproval":true}`).
		node("sib", nodes.TypeTool, `{"name":"sibling"}`).
		flow("s", "boss").link("helper", "boss").link("guard", "helper").link("sib", "boss").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool helper {"input":"/tool guarded {\"x\":1}"}`})
	require.Equal(t, runtime.RunInterrupted, res.Status)
	p := res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData)
	require.Equal(t, "guarded", p.ToolCall.Name)
	require.Equal(t, "helper", p.ToolCall.AgentNodeID)
	require.NotEmpty(t, s.of(nodes.EventApprovalRequired, "boss"))
	require.Empty(t, h.toolCalls("guarded"))

	res2, _ := h.resume(t, g, res.RunID, map[string]any{"approved": true})
	require.Equal(t, runtime.RunCompleted, res2.Status, "%v", res2.Err)
	require.Equal(t, "tool helper returned: tool guarded returned: guarded ok", output(t, res2, "boss").Content)
	require.Len(t, h.toolCalls("guarded"), 1)
}

func TestApprovalNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("gate").node("s", nodes.TypeChatStart).node("ap", nodes.TypeApproval, `{"prompt":"Send it?"}`).
		node("o", nodes.TypeChatOutput).
		node("why", nodes.TypeTemplate, `{"template":"not sent ({{.code}})"}`).node("o2", nodes.TypeChatOutput).
		flow("s", "ap").flow("ap", "o").flow("ap", "why", "on_failure").flow("why", "o2").build()

	start := func() *runtime.RunResult {
		res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "hi"})
		require.Equal(t, runtime.RunInterrupted, res.Status)
		ar := s.of(nodes.EventApprovalRequired, "ap")
		require.Len(t, ar, 1)
		d := ar[0].Data.(*nodes.ApprovalRequiredData)
		require.Equal(t, nodes.ApprovalKindNode, d.Kind)
		require.Equal(t, "Send it?", d.Prompt)
		require.Equal(t, map[string]any{"role": "user", "content": "hi"}, d.Input)
		require.Equal(t, nodes.ReasonApproval, res.Interrupts[0].Reason)
		return res
	}

	res, _ := h.resume(t, g, start().RunID, map[string]any{"approved": true})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, nodes.Message{Role: nodes.RoleAssistant, Content: "hi"}, output(t, res, "o"))
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("o2"))

	res, _ = h.resume(t, g, start().RunID, map[string]any{"approved": false, "reason": "no"})
	require.Equal(t, runtime.RunCompleted, res.Status, "the failure edge handles a rejection")
	require.Equal(t, runtime.NodeFailed, res.NodeStatus("ap"))
	require.Equal(t, "not sent (approval_denied)", output(t, res, "o2").Content)
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("o"))

	res, _ = h.resume(t, g, start().RunID, "maybe")
	require.Equal(t, runtime.NodeFailed, res.NodeStatus("ap"))
	require.Equal(t, "not sent (invalid_resume)", output(t, res, "o2").Content)
}

// Cancelling a resumed run while the approved call runs: the call is not
// recorded, a later resume asks again, and the sibling still ran once.
func TestCancelDuringApprovedCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	startedCh := h.blockOnce(t, "slow")
	h.script.set(twoCalls(
		llm.ToolCall{ID: "c_sib", Name: "sibling", Arguments: `{}`},
		llm.ToolCall{ID: "c_slow", Name: "slow", Arguments: `{}`}))
	g := newGraph("cancel").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"script/x"}`).
		node("sib", nodes.TypeTool, `{"name":"sibling"}`).
		node("slow", nodes.TypeTool, `{"name":"slow","requireApproval":true}`).
		flow("s", "a").link("sib", "a").link("slow", "a").build()
	res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunInterrupted, res.Status)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st, err := h.eng.StreamResume(ctx, runtime.ResumeRequest{RunID: res.RunID, Graph: g, Value: map[string]any{"approved": true},
		Services: &nodes.Services{Scope: h.scope(t, g, nil)}})
	require.NoError(t, err)
	go func() {
		<-startedCh
		cancel(errors.New("user cancelled"))
	}()
	res2, err := st.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res2.Status)

	res3, _ := h.resume(t, g, res2.RunID, nil)
	require.Equal(t, runtime.RunInterrupted, res3.Status, "the unrecorded call needs approval again")
	require.Equal(t, "slow", res3.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.Name)

	res4, _ := h.resume(t, g, res3.RunID, map[string]any{"approved": true})
	require.Equal(t, runtime.RunCompleted, res4.Status)
	require.Equal(t, "done: sibling ok | slow ok", output(t, res4, "a").Content)
	require.Len(t, h.toolCalls("sibling"), 1)
	require.Len(t, h.toolCalls("slow"), 2, "the cancelled call, then the approved one")
}

// blockOnce registers tool name: its first call blocks until cancelled
// (startedCh is closed when it starts), later calls answer "<name> ok".
func (h *harness) blockOnce(t *testing.T, name string) <-chan struct{} {
	startedCh := make(chan struct{})
	var blocked atomic.Bool
	require.NoError(t, h.tools.Register(tools.New(tools.Spec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, c tools.Call) (string, error) {
			h.mu.Lock()
			h.calls[name] = append(h.calls[name], c)
			h.mu.Unlock()
			if blocked.CompareAndSwap(false, true) {
				close(startedCh)
				<-ctx.Done()
				return "", context.Cause(ctx)
			}
			return name + " ok", nil
		})))
	return startedCh
}

// A run cancelled between two approvals of one agent: the next approval
// is still matched to its own call (interrupts are told apart by run, not
// by the node's resume count, which restarts after a cancelled run).
func TestApprovalAfterCancelledResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	startedCh := h.blockOnce(t, "slow")
	h.script.set(func(req llm.Request) (llm.Response, error) {
		n := 0
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				n++
			}
		}
		switch n {
		case 0:
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "x", Name: "guarded", Arguments: `{"n":1}`}}}, nil
		case 1:
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "b", Name: "slow", Arguments: `{}`}}}, nil
		case 2:
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "y", Name: "guarded", Arguments: `{"n":2}`}}}, nil
		}
		return llm.Response{Content: "done"}, nil
	})
	g := newGraph("cancel2").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"script/x"}`).
		node("guard", nodes.TypeTool, `{"name":"guarded","requireApproval":true}`).
		node("slow", nodes.TypeTool, `{"name":"slow"}`).
		flow("s", "a").link("guard", "a").link("slow", "a").build()
	res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunInterrupted, res.Status)
	require.Equal(t, "x", res.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.ID)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st, err := h.eng.StreamResume(ctx, runtime.ResumeRequest{RunID: res.RunID, Graph: g, Value: true,
		Services: &nodes.Services{Scope: h.scope(t, g, nil)}})
	require.NoError(t, err)
	go func() {
		<-startedCh
		cancel(errors.New("user cancelled"))
	}()
	res2, err := st.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res2.Status)
	require.Len(t, h.toolCalls("guarded"), 1)

	res3, _ := h.resume(t, g, res2.RunID, nil)
	require.Equal(t, runtime.RunInterrupted, res3.Status)
	require.Equal(t, "y", res3.Interrupts[0].Payload.(*nodes.ApprovalRequiredData).ToolCall.ID)

	res4, _ := h.resume(t, g, res3.RunID, true)
	require.Equal(t, runtime.RunCompleted, res4.Status, "%v", res4.Interrupts)
	require.Equal(t, "done", output(t, res4, "a").Content)
	g2 := h.toolCalls("guarded")
	require.Len(t, g2, 2)
	require.JSONEq(t, `{"n":2}`, string(g2[1].Arguments))
}
