package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/ssetest"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/runtime"
)

var history = []nodes.Message{
	{Role: nodes.RoleUser, Content: "earlier question"},
	{Role: nodes.RoleAssistant, Content: "earlier answer"},
}

func started(t *testing.T, s *sink, node string) map[string]any {
	t.Helper()
	evs := s.of(runtime.EventNodeStarted, node)
	require.Len(t, evs, 1, "node_started of %s", node)
	return data(t, evs[0])
}

func TestChatStreamsEchoTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("echo").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"name":"Helper"}`).
		node("o", nodes.TypeChatOutput).flow("s", "a").flow("a", "o").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{History: history, Content: "hello big world"})
	require.Equal(t, runtime.RunCompleted, res.Status)

	var deltas []string
	for _, e := range s.of(nodes.EventNodeDelta, "a") {
		deltas = append(deltas, e.Data.(*nodes.NodeDeltaData).Text)
	}
	// One delta per chunk, or chunks joined while the previous delta
	// waited for its commit: whole chunks, in order, either way.
	require.NoError(t, ssetest.WholeChunks([]string{"echo:", " hello", " big", " world"}, deltas))
	out := output(t, res, "o")
	require.Equal(t, nodes.Message{Role: nodes.RoleAssistant, Content: "echo: hello big world", Name: "Helper",
		Metadata: map[string]any{"nodeId": "a", "model": "echo"}}, out)

	d := started(t, s, "a")
	require.Equal(t, nodes.InputChatHistory, d["inputMode"])
	require.EqualValues(t, 3, d["messageCount"])
	require.Equal(t, []any{}, d["tools"])
	require.Equal(t, "echo", d["model"])
}

func TestPipelineAgentToAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("pipe").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).node("b", nodes.TypeAgent).
		node("o", nodes.TypeChatOutput).flow("s", "a").flow("a", "b").flow("b", "o").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{History: history, Content: "hi"})
	require.Equal(t, runtime.RunCompleted, res.Status)

	a, b := started(t, s, "a"), started(t, s, "b")
	require.Equal(t, nodes.InputChatHistory, a["inputMode"])
	require.EqualValues(t, len(history)+1, a["messageCount"])
	require.Equal(t, nodes.InputFlowPayload, b["inputMode"])
	require.EqualValues(t, 1, b["messageCount"])
	// B saw only A's answer, as its (last) message.
	require.Equal(t, "echo: echo: hi", output(t, res, "o").Content)
	require.Equal(t, "echo: echo: hi", s.texts("b"))
}

func TestToolCallThroughEcho(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("calc").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("calc", nodes.TypeTool, `{"name":"calculator"}`).node("o", nodes.TypeChatOutput).
		flow("s", "a").link("calc", "a").flow("a", "o").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool calculator {"expression":"6*7"}`})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "tool calculator returned: 42", output(t, res, "o").Content)
	require.Equal(t, []any{"calculator"}, started(t, s, "a")["tools"])

	calls, results := s.of(nodes.EventToolCall, "a"), s.of(nodes.EventToolResult, "a")
	require.Len(t, calls, 1)
	require.Len(t, results, 1)
	c := data(t, calls[0])
	require.Equal(t, "calculator", c["name"])
	require.Equal(t, map[string]any{"expression": "6*7"}, c["arguments"])
	require.NotEmpty(t, c["id"])
	r := data(t, results[0])
	require.Equal(t, c["id"], r["id"])
	require.Equal(t, "42", r["result"])
	require.Nil(t, r["error"])
	// Events come in order: call, result, then the answer's deltas.
	require.Less(t, calls[0].Seq, results[0].Seq)
	require.Less(t, results[0].Seq, s.of(nodes.EventNodeDelta, "a")[0].Seq)
	require.Equal(t, "tool calculator returned: 42", s.texts("a"))
}

func TestToolErrorsAreToldToTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("bad").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).
		node("calc", nodes.TypeTool, `{"name":"calculator"}`).flow("s", "a").link("calc", "a").build()
	for content, want := range map[string]string{
		`/tool calculator {"expression":"1/0"}`: "tool calculator returned: error: result is not a finite number (division by zero?)",
		`/tool nope {}`:                         `tool nope returned: error: unknown tool "nope"`,
		`/tool calculator {oops`:                "tool calculator returned: error: arguments are not valid JSON",
	} {
		res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: content})
		require.Equal(t, runtime.RunCompleted, res.Status, content)
		require.Equal(t, want, output(t, res, "a").Content)
	}
}

func TestMaxSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("steps").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"maxSteps":1}`).
		node("calc", nodes.TypeTool, `{"name":"calculator"}`).flow("s", "a").link("calc", "a").build()
	res, _ := h.run(t, context.Background(), g, nodes.ChatInput{Content: `/tool calculator {"expression":"1"}`})
	require.Equal(t, runtime.RunFailed, res.Status)
	require.Equal(t, nodes.CodeMaxSteps, runtime.ErrorCode(res.Err))
}

func TestUserToolsFollowTheChatScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	build := func(include bool) *runtime.Graph {
		return newGraph(fmt.Sprintf("ut-%v", include)).
			node("s", nodes.TypeChatStart, map[string]any{"includeUserTools": include}).
			node("t", nodes.TypeTemplate, `{"template":"{{.content}}"}`).
			node("a", nodes.TypeAgent).node("b", nodes.TypeAgent).
			node("fwd", nodes.TypeTemplate, `{"template":"/tool calculator {\"expression\":\"2+2\"}"}`).
			flow("s", "t").flow("t", "a").flow("a", "fwd").flow("fwd", "b").build()
	}
	in := nodes.ChatInput{Content: `/tool calculator {"expression":"6*7"}`, UserTools: []string{"calculator", "not_registered"}}

	res, s := h.run(t, context.Background(), build(true), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{"calculator"}, started(t, s, "a")["tools"])
	require.Equal(t, "tool calculator returned: 42", output(t, res, "a").Content)
	// The downstream agent never gets user tools.
	require.Equal(t, []any{}, started(t, s, "b")["tools"])
	require.Equal(t, `tool calculator returned: error: unknown tool "calculator"`, output(t, res, "b").Content)

	res, s = h.run(t, context.Background(), build(false), in)
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, []any{}, started(t, s, "a")["tools"])
	require.Equal(t, `tool calculator returned: error: unknown tool "calculator"`, output(t, res, "a").Content)
}

func TestPipelineAndCompositionInOneGraph(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// s -> A -> ask -> B (flow); C is linked into B's tools and has the
	// calculator; C runs only when B calls it.
	g := newGraph("team").node("s", nodes.TypeChatStart).node("A", nodes.TypeAgent).
		node("ask", nodes.TypeTemplate, `{"template":"{{if eq .content \"echo: delegate\"}}/tool researcher {\"input\":\"/tool calculator {\\\"expression\\\":\\\"6*7\\\"}\"}{{else}}{{.content}}{{end}}"}`).
		node("B", nodes.TypeAgent).
		node("C", nodes.TypeAgent, `{"name":"researcher","description":"Researches things."}`).
		node("calc", nodes.TypeTool, `{"name":"calculator"}`).node("o", nodes.TypeChatOutput).
		flow("s", "A").flow("A", "ask").flow("ask", "B").flow("B", "o").link("C", "B").link("calc", "C").build()

	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "delegate"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "tool researcher returned: tool calculator returned: 42", output(t, res, "o").Content)
	require.Equal(t, []any{"researcher"}, started(t, s, "B")["tools"])
	require.Empty(t, s.of(runtime.EventNodeStarted, "C"), "a member agent is not a node of the run")
	// C's own tool call is reported through B, tagged with C.
	var byC []map[string]any
	for _, e := range s.of(nodes.EventToolCall, "B") {
		if d := data(t, e); d["agentNodeId"] == "C" {
			byC = append(byC, d)
		}
	}
	require.Len(t, byC, 1)
	require.Equal(t, "calculator", byC[0]["name"])

	// Without the request B does not call C: no tool events at all.
	res, s = h.run(t, context.Background(), g, nodes.ChatInput{Content: "just chat"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	require.Equal(t, "echo: echo: just chat", output(t, res, "o").Content)
	require.Empty(t, s.of(nodes.EventToolCall, ""))
}

func TestAgentAsRunEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("direct").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent).node("b", nodes.TypeAgent).
		flow("s", "a").flow("a", "b").build()
	// stream_agent_chat at b: b is the entry, with the history.
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{History: history, Content: "direct"}, entries("b"))
	require.Equal(t, runtime.RunCompleted, res.Status)
	d := started(t, s, "b")
	require.Equal(t, nodes.InputChatHistory, d["inputMode"])
	require.EqualValues(t, 3, d["messageCount"])
	require.Equal(t, "echo: direct", output(t, res, "b").Content)
	require.Empty(t, s.of(runtime.EventNodeStarted, "a"))
}

// A retry replays the recorded model step and tool call. The model says
// something before it calls the tool: the answer keeps that text, with a
// blank line before the next call's, and is what streamed, also in the
// attempt that replays the first call from the ledger.
func TestRetryDoesNotRepeatToolCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var failed atomic.Bool
	h.script.set(func(req llm.Request) (llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != llm.RoleTool {
			return llm.Response{Content: "Let me ask my sibling.", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "sibling", Arguments: `{}`}}}, nil
		}
		if failed.CompareAndSwap(false, true) {
			return llm.Response{}, &llm.Error{Code: llm.CodeRateLimited, Message: "slow down", Retryable: true}
		}
		return llm.Response{Content: "done: " + last.Content}, nil
	})
	g := newGraph("retry").node("s", nodes.TypeChatStart).
		node("a", nodes.TypeAgent, `{"model":"script/x","retry":{"maxAttempts":2,"retryableErrors":["llm_rate_limited"]}}`).
		node("sib", nodes.TypeTool, `{"name":"sibling"}`).flow("s", "a").link("sib", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "go"})
	require.Equal(t, runtime.RunCompleted, res.Status)
	want := "Let me ask my sibling.\n\ndone: sibling ok"
	require.Equal(t, want, output(t, res, "a").Content)
	require.Equal(t, want, streamed(s, "a"), "the second attempt's deltas are its whole answer")
	require.Len(t, s.of(runtime.EventNodeRetrying, "a"), 1)
	require.Len(t, h.toolCalls("sibling"), 1, "the retry reuses the recorded call")
	require.EqualValues(t, 3, h.script.n.Load(), "step 1 once, step 2 twice")
	var replayed int
	for _, e := range s.of(nodes.EventToolResult, "a") {
		if e.Data.(*nodes.ToolResultData).Replayed {
			replayed++
		}
	}
	require.Equal(t, 1, replayed)
}

// streamed is the text of a node's deltas in its last attempt (after its
// last node_retrying).
func streamed(s *sink, node string) string {
	var b strings.Builder
	for _, e := range s.events() {
		switch {
		case e.NodeID != node:
		case e.Type == runtime.EventNodeRetrying:
			b.Reset()
		case e.Type == nodes.EventNodeDelta:
			b.WriteString(e.Data.(*nodes.NodeDeltaData).Text)
		}
	}
	return b.String()
}

func TestCancelStopsAnAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := newGraph("slow").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"tokenDelayMs":10000}`).
		flow("s", "a").build()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s := &sink{}
	st, err := h.eng.Stream(ctx, runtime.RunRequest{Graph: g, Input: nodes.ChatInput{Content: "a b c"}.Value(), Sink: s,
		Services: &nodes.Services{Scope: nil}})
	require.NoError(t, err)
	cause := errors.New("user cancelled")
	for e := range st.Events() {
		if e.Type == nodes.EventNodeDelta {
			cancel(cause)
		}
	}
	res, err := st.Wait()
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, res.Status)
	require.Len(t, s.of(runtime.EventNodeCancelled, "a"), 1)
}

// TestOpenAIAgent drives an agent with the OpenAI-compatible client
// against a server speaking the streaming wire format: a tool call whose
// arguments are split over chunks, then a streamed answer.
func TestOpenAIAgent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string           `json:"model"`
			Messages []map[string]any `json:"messages"`
			Tools    []any            `json:"tools"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil || req.Model != "gpt-test" || len(req.Tools) != 1 {
			http.Error(w, `{"error":{"message":"bad request"}}`, 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); w.(http.Flusher).Flush() }
		if calls.Add(1) == 1 {
			send(`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"calculator","arguments":"{\"expres"}}]}}]}`)
			send(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"sion\":\"6*7\"}"}}]}}]}`)
			send(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
			send(`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
		} else {
			last := req.Messages[len(req.Messages)-1]
			send(`{"choices":[{"index":0,"delta":{"content":"The answer"}}]}`)
			send(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":" is %s."}}]}`, last["content"]))
			send(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		}
		send(`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
		send("[DONE]")
	}))
	defer srv.Close()
	h := newHarness(t)
	oa, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	require.NoError(t, err)
	require.NoError(t, h.models.Register("openai", oa))
	g := newGraph("oa").node("s", nodes.TypeChatStart).node("a", nodes.TypeAgent, `{"model":"openai/gpt-test"}`).
		node("calc", nodes.TypeTool, `{"name":"calculator"}`).flow("s", "a").link("calc", "a").build()
	res, s := h.run(t, context.Background(), g, nodes.ChatInput{Content: "what is 6*7?"})
	require.Equal(t, runtime.RunCompleted, res.Status, "%v", res.Err)
	out := output(t, res, "a")
	require.Equal(t, "The answer is 42.", out.Content)
	require.Equal(t, "The answer is 42.", s.texts("a"))
	// Usage of both model calls, on the node's output (node_completed data.output).
	require.EqualValues(t, map[string]any{"promptTokens": 20.0, "completionTokens": 10.0, "totalTokens": 30.0, "modelCalls": 2.0},
		out.Metadata["usage"])
	r := s.of(nodes.EventToolResult, "a")
	require.Len(t, r, 1)
	require.Equal(t, "42", r[0].Data.(*nodes.ToolResultData).Result)
	require.True(t, strings.HasPrefix(s.of(nodes.EventToolCall, "a")[0].Data.(*nodes.ToolCallData).IdempotencyKey, "idk_"))
}
