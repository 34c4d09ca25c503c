package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runtime"
)

func TestFlakyWithRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	build := func(id string, attempts int) *runtime.Graph {
		return newGraph(id).node("s", nodes.TypeChatStart).
			node("f", nodes.TypeFlaky, map[string]any{"failTimes": 2, "errorCode": "boom",
				"retry": map[string]any{"maxAttempts": attempts, "retryableErrors": []string{"boom"}}}).
			node("o", nodes.TypeChatOutput).flow("s", "f").flow("f", "o").build()
	}
	res, s := h.run(t, context.Background(), build("flaky3", 3), nodes.ChatInput{Content: "hi"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "hi", output(t, res, "o").Content)
	retries := s.of(runtime.EventNodeRetrying, "f")
	require.Len(t, retries, 2)
	require.Equal(t, "boom", retries[0].Data.(*runtime.NodeRetryingData).Code)

	res, s = h.run(t, context.Background(), build("flaky2", 2), nodes.ChatInput{Content: "hi"})
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, "boom", runtime.ErrorCode(res.Err))
	failed := s.of(runtime.EventNodeFailed, "f")
	require.Len(t, failed, 1)
	require.Equal(t, 2, failed[0].Data.(*runtime.NodeFailedData).Attempts)
}

func TestDelayPassesInputAndHonoursCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	quick := newGraph("quick").node("s", nodes.TypeChatStart).node("d", nodes.TypeDelay, `{"ms":5}`).
		node("o", nodes.TypeChatOutput).flow("s", "d").flow("d", "o").build()
	res, _ := h.run(t, context.Background(), quick, nodes.ChatInput{Content: "later"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "later", output(t, res, "o").Content)

	slow := newGraph("slow").node("s", nodes.TypeChatStart).node("d", nodes.TypeDelay, `{"ms":3600000}`).
		node("o", nodes.TypeChatOutput).flow("s", "d").flow("d", "o").build()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st, err := h.eng.Stream(ctx, runtime.RunRequest{Graph: slow, Input: nodes.ChatInput{Content: "x"}.Value()})
	require.NoError(t, err)
	var evs []runtime.Event
	for e := range st.Events() {
		evs = append(evs, e)
		if e.Type == runtime.EventNodeStarted && e.NodeID == "d" {
			cancel(errors.New("stop waiting"))
		}
	}
	res, err = st.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	checkLifecycle(t, evs)
	var cancelled bool
	for _, e := range evs {
		if e.Type == runtime.EventNodeCancelled && e.NodeID == "d" {
			cancelled = true
			require.Contains(t, e.Data.(*runtime.NodeCancelledData).Cause, "stop waiting")
		}
	}
	require.True(t, cancelled)
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("tpl").node("s", nodes.TypeChatStart).
		node("t", nodes.TypeTemplate, `{"template":"Q: {{upper .content}} ({{.role}}, {{json .content}})"}`).
		node("o", nodes.TypeChatOutput).flow("s", "t").flow("t", "o").build()
	res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: "hello"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, `Q: HELLO (user, "hello")`, output(t, res, "o").Content)

	bad := newGraph("tplbad").node("s", nodes.TypeChatStart).
		node("t", nodes.TypeTemplate, `{"template":"{{.content.deeper}}"}`).flow("s", "t").build()
	res, _ = h.run(t, context.Background(), bad, nodes.ChatInput{Content: "x"})
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, nodes.CodeTemplate, runtime.ErrorCode(res.Err))
}

func TestRouterWithEdgeConditions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("route").node("s", nodes.TypeChatStart).node("r", nodes.TypeRouter).
		node("weather", nodes.TypeTemplate, `{"template":"forecast for: {{.content}}"}`).
		node("other", nodes.TypeAgent).
		node("o", nodes.TypeChatOutput, `{"join":"any"}`).
		flow("s", "r").
		flow("r", "weather", `output.content.contains("weather")`).
		flow("r", "other", `!output.content.contains("weather")`).
		flow("weather", "o").flow("other", "o").build()

	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "weather in Paris"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "forecast for: weather in Paris", output(t, res, "o").Content)
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("other"))
	require.Len(t, s.of(runtime.EventNodeSkipped, "other"), 1)

	res, _ = h.run(t, context.Background(), g, nodes.ChatInput{Content: "tell a joke"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "echo: tell a joke", output(t, res, "o").Content)
	require.Equal(t, runtime.NodeSkipped, res.NodeStatus("weather"))
	// The router's output is the message, for the agent after it, which is
	// an entry agent (no agent upstream).
	require.True(t, h.scope(t, g, nil).IsEntryAgent("other"))
}

func TestDataValidationNamesNodeAndField(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		typ, data, field, msg string
	}{
		{nodes.TypeAgent, `{"temperature":5}`, "temperature", "at most 2"},
		{nodes.TypeAgent, `{"maxSteps":"many"}`, "maxSteps", "expected an integer"},
		{nodes.TypeAgent, `{"model":"nope/x"}`, "model", "unknown model"},
		{nodes.TypeAgent, `{"tokenDelayMs":-1}`, "tokenDelayMs", "at least 0"},
		{nodes.TypeAgent, `{"name":"` + strings.Repeat("n", 65) + `"}`, "name", "at most 64 characters"},
		{nodes.TypeTemplate, `{}`, "template", "is required"},
		{nodes.TypeTemplate, `{"template":"{{.x"}`, "template", "unclosed action"},
		{nodes.TypeDelay, `{"ms":-5}`, "ms", "at least 0"},
		{nodes.TypeFlaky, `{"failTimes":101}`, "failTimes", "at most 100"},
		{nodes.TypeApproval, `{"prompt":7}`, "prompt", "expected a string"},
		{nodes.TypeChatStart, `{"includeUserTools":"yes"}`, "includeUserTools", "expected a boolean"},
	} {
		g := newGraph("v").node("s", nodes.TypeChatStart).node("bad", tc.typ, tc.data).flow("s", "bad").build()
		if tc.typ == nodes.TypeChatStart {
			g = newGraph("v").node("bad", tc.typ, tc.data).build()
		}
		assertFieldError(t, h, g, "bad", tc.field, tc.msg)
	}
	// Tool nodes are checked where an agent uses them.
	for _, tc := range []struct{ data, msg string }{
		{`{}`, "is required"},
		{`{"name":"teleport"}`, `no registered tool "teleport"`},
	} {
		g := newGraph("vt").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).node("bad", nodes.TypeTool, tc.data).
			flow("s", "a").link("bad", "a").build()
		assertFieldError(t, h, g, "bad", "name", tc.msg)
	}
}

func assertFieldError(t *testing.T, h *harness, g *runtime.Graph, node, field, msg string) {
	t.Helper()
	_, err := h.eng.Compile(g)
	var ge *runtime.GraphError
	require.ErrorAs(t, err, &ge, "%s %s", node, field)
	for _, d := range ge.Diagnostics {
		if d.ID == node && d.Code == runtime.CodeInvalidData {
			require.True(t, strings.HasSuffix(d.Path, ".data."+field), "path %q names field %s", d.Path, field)
			require.Contains(t, d.Message, msg)
			require.Equal(t, runtime.SeverityError, d.Severity)
			return
		}
	}
	t.Fatalf("no invalid_data diagnostic for %s: %v", node, ge.Diagnostics)
}

func TestNodeTypesPublishMetadata(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{}))
	require.Error(t, nodes.Register(reg, nodes.Deps{}), "registering twice fails")
	var names []string
	for _, nt := range reg.Types() {
		names = append(names, nt.Name)
		require.NotEmpty(t, nt.Label, nt.Name)
		require.NotEmpty(t, nt.Description, nt.Name)
		var s struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		require.NoError(t, json.Unmarshal(nt.DataSchema, &s), nt.Name)
		require.Equal(t, "object", s.Type, nt.Name)
		for _, r := range s.Required {
			require.Contains(t, s.Properties, r, nt.Name)
		}
		for p, raw := range s.Properties {
			require.True(t, json.Valid(raw), "%s.%s", nt.Name, p)
		}
	}
	want := []string{nodes.TypeAgent, nodes.TypeApproval, nodes.TypeChatOutput, nodes.TypeChatStart, nodes.TypeDelay,
		nodes.TypeFlaky, nodes.TypeRouter, nodes.TypeTemplate, nodes.TypeTool}
	sort.Strings(want)
	require.Equal(t, want, names)
	cs, _ := reg.Lookup(nodes.TypeChatStart)
	require.True(t, cs.Entry)
	agent, _ := reg.Lookup(nodes.TypeAgent)
	in, _ := agent.Port(nodes.PortInput, runtime.In)
	require.True(t, in.Many)
	require.False(t, in.Required, "an agent can be a run's entry")
	self, _ := agent.Port(nodes.PortSelf, runtime.Out)
	require.Equal(t, runtime.ChannelLink, self.Channel)

	// chatscope reads the same names.
	require.Equal(t, nodes.TypeAgent, chatscope.AgentType)
	require.Equal(t, nodes.TypeChatStart, chatscope.ChatStartType)
	require.Equal(t, nodes.InputChatHistory, chatscope.ModeChatHistory)
	require.Equal(t, nodes.InputFlowPayload, chatscope.ModeFlowPayload)
	var _ nodes.ChatScope = chatscope.New(nil, nil)
}

func TestAsMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want nodes.Message
	}{
		{nil, nodes.Message{Role: "user"}},
		{"hi", nodes.Message{Role: "user", Content: "hi"}},
		{nodes.Message{Role: "assistant", Content: "a"}, nodes.Message{Role: "assistant", Content: "a"}},
		{map[string]any{"role": "assistant", "content": "x", "name": "n", "metadata": map[string]any{"k": 1.0}},
			nodes.Message{Role: "assistant", Content: "x", Name: "n", Metadata: map[string]any{"k": 1.0}}},
		{map[string]any{"content": map[string]any{"a": 1.0}}, nodes.Message{Role: "user", Content: `{"a":1}`}},
		{map[string]any{"error": "boom"}, nodes.Message{Role: "user", Content: `{"error":"boom"}`}},
		{nodes.ChatInput{Content: "c", History: []nodes.Message{{Role: "user", Content: "h"}}}, nodes.Message{Role: "user", Content: "c"}},
		{42.0, nodes.Message{Role: "user", Content: "42"}},
		{struct {
			Content string `json:"content"`
		}{"s"}, nodes.Message{Role: "user", Content: "s"}},
	} {
		require.Equal(t, tc.want, nodes.AsMessage(tc.in), "%#v", tc.in)
	}
	ci := nodes.ChatInput{History: []nodes.Message{{Role: "user", Content: "h"}}, Content: "c", UserTools: []string{"x"}}
	require.Equal(t, ci, nodes.AsChatInput(ci.Value()))
	require.Equal(t, nodes.ChatInput{Content: "plain"}, nodes.AsChatInput("plain"))
	require.True(t, reflect.DeepEqual(map[string]any{"role": "user", "content": "x"}, nodes.Message{Role: "user", Content: "x"}.Value()))
}

func TestParseApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want nodes.ApprovalDecision
		ok   bool
	}{
		{map[string]any{"approved": true}, nodes.ApprovalDecision{Approved: true}, true},
		{map[string]any{"approved": false, "reason": "r"}, nodes.ApprovalDecision{Reason: "r"}, true},
		{json.RawMessage(`{"approved":true,"reason":"ok"}`), nodes.ApprovalDecision{Approved: true, Reason: "ok"}, true},
		{false, nodes.ApprovalDecision{}, true},
		{map[string]any{"reason": "no decision"}, nodes.ApprovalDecision{}, false},
		{map[string]any{"approved": "yes"}, nodes.ApprovalDecision{}, false},
		{"approved", nodes.ApprovalDecision{}, false},
		{nil, nodes.ApprovalDecision{}, false},
	} {
		got, err := nodes.ParseApproval(tc.in)
		if !tc.ok {
			require.ErrorIs(t, err, nodes.ErrInvalidDecision, "%#v", tc.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestMemoryLedger(t *testing.T) {
	t.Parallel()
	l := nodes.NewMemoryLedger()
	ctx := context.Background()
	k := nodes.IdempotencyKey("root", "node", "call")
	require.NotEqual(t, k, nodes.IdempotencyKey("roo", "tnode", "call"), "parts are length-prefixed")
	_, ok, err := l.Get(ctx, k)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, l.Put(ctx, nodes.LedgerRecord{Key: k, RootRunID: "root", Kind: nodes.LedgerToolCall, Value: json.RawMessage(`1`)}))
	require.NoError(t, l.Put(ctx, nodes.LedgerRecord{Key: k, RootRunID: "root", Kind: nodes.LedgerToolCall, Value: json.RawMessage(`2`)}))
	rec, ok, err := l.Get(ctx, k)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `1`, string(rec.Value), "first write wins")
	require.False(t, rec.CreatedAt.IsZero())
	require.Equal(t, 1, l.DeleteRoot("root"))
	require.Equal(t, 0, l.Len())
}
