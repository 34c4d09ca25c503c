package transport_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/ssetest"
)

// The AG-UI endpoint on the wire (the @ag-ui/client tests in clients/
// drive it with the real client).

func aguiTypes(evs []*sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Data["type"].(string)
	}
	return out
}

// untilAGUIText reads st up to its first TEXT_MESSAGE_CONTENT.
func untilAGUIText(t *testing.T, st *sseStream) {
	t.Helper()
	for {
		ev, err := st.next(false)
		require.NoError(t, err)
		if ev.Data["type"] == "TEXT_MESSAGE_CONTENT" {
			return
		}
	}
}

func TestAGUITranslatesARun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(basicGraph(""))
	in := map[string]any{"threadId": "thread-1", "runId": "client-run-1", "messages": []any{
		map[string]any{"id": "s1", "role": "system", "content": "be brief"},
		map[string]any{"id": "u1", "role": "user", "content": "hello world"}}, "tools": []any{}, "context": []any{}, "state": map[string]any{}}
	evs := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil).all(t)
	// a1's text: one TEXT_MESSAGE_CONTENT per delta ("echo:", " hello",
	// " world", or words joined while waiting for their commit).
	var types, text []string
	for i, typ := range aguiTypes(evs) {
		if typ == "TEXT_MESSAGE_CONTENT" {
			text = append(text, evs[i].Data["delta"].(string))
			if types[len(types)-1] == typ {
				continue
			}
		}
		types = append(types, typ)
	}
	require.Equal(t, []string{"RUN_STARTED",
		"STEP_STARTED", "STEP_FINISHED", // start
		"STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", // a1
		"STEP_STARTED", "STEP_FINISHED", // out
		"RUN_FINISHED"}, types)
	require.NoError(t, ssetest.WholeChunks([]string{"echo:", " hello", " world"}, text))
	started := evs[0].Data
	require.Equal(t, "thread-1", started["threadId"])
	require.Equal(t, "client-run-1", started["runId"])
	cg := started["metadata"].(map[string]any)["chatgraph"].(map[string]any)
	require.Equal(t, "thread-1", cg["chatId"])
	require.Equal(t, cg["messageId"], evs[4].Data["messageId"])
	require.Equal(t, "a1", evs[3].Data["stepName"])
	require.Equal(t, map[string]any{"type": "success"}, evs[len(evs)-1].Data["outcome"])
	// The thread is a chat of the graph, seeded with the transcript.
	msgs := messages(e.chat("thread-1"))
	require.Len(t, msgs, 3)
	require.Equal(t, "system", msgs[0]["role"])
	require.Equal(t, "echo: hello world", msgs[2]["content"])

	// A thread of another graph is refused.
	other := e.saveGraph(basicGraph(""))
	resp := e.do("POST", "/api/v1/ag-ui/graphs/"+other, in, nil)
	e.mustStatus(resp, http.StatusConflict)
}

func TestAGUIClientToolRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(basicGraph(""))
	tool := map[string]any{"name": "get_weather", "description": "weather", "parameters": map[string]any{"type": "object"}}
	user := map[string]any{"id": "u1", "role": "user", "content": `/tool get_weather {"city":"Oslo"}`}
	in := map[string]any{"threadId": "t-tools", "runId": "r1", "messages": []any{user}, "tools": []any{tool}}
	evs := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil).all(t)
	last := evs[len(evs)-1].Data
	require.Equal(t, "RUN_FINISHED", last["type"])
	outcome := last["outcome"].(map[string]any)
	require.Equal(t, "success", outcome["type"])
	pending := outcome["pendingToolCallIds"].([]any)
	require.Len(t, pending, 1)
	var start map[string]any
	for _, ev := range evs {
		if ev.Data["type"] == "TOOL_CALL_START" {
			start = ev.Data
		}
	}
	require.Equal(t, pending[0], start["toolCallId"])
	require.Equal(t, "get_weather", start["toolCallName"])

	in["messages"] = []any{user,
		map[string]any{"id": "a1", "role": "assistant", "toolCalls": []any{map[string]any{"id": pending[0], "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}}},
		map[string]any{"id": "t1", "role": "tool", "toolCallId": pending[0], "content": "snow"}}
	evs = e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil).all(t)
	types := aguiTypes(evs)
	require.Equal(t, "RUN_FINISHED", types[len(types)-1])
	require.NotContains(t, types, "TOOL_CALL_RESULT", "the client sent that result itself")
	var text string
	for _, ev := range evs {
		if ev.Data["type"] == "TEXT_MESSAGE_CONTENT" {
			text += ev.Data["delta"].(string)
		}
	}
	require.Equal(t, "tool get_weather returned: snow", text)

	// The same answer again: the run was already continued.
	resp := e.do("POST", "/api/v1/ag-ui/graphs/"+gid, in, nil)
	e.mustStatus(resp, http.StatusConflict)
}

func TestAGUIRunCancelledElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(basicGraph(`{"name":"Slow","tokenDelayMs":200}`))
	in := map[string]any{"threadId": "t-cancel", "runId": "r1", "messages": []any{
		map[string]any{"id": "u1", "role": "user", "content": "one two three four five six seven eight nine ten"}}}
	st := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil)
	untilAGUIText(t, st)
	e.mustStatus(e.do("POST", "/api/v1/chats/t-cancel/cancel", map[string]any{}, nil), http.StatusAccepted)
	evs := st.all(t)
	types := aguiTypes(evs)
	require.Equal(t, "RUN_FINISHED", types[len(types)-1])
	require.Equal(t, map[string]any{"type": "cancelled"}, evs[len(evs)-1].Data["outcome"])
	require.Contains(t, types, "TEXT_MESSAGE_END", "the open message is closed first")
}

func TestAGUIBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(basicGraph(""))
	for name, body := range map[string]any{
		"not json":    "{",
		"no thread":   map[string]any{"messages": []any{map[string]any{"id": "u", "role": "user", "content": "x"}}},
		"no turn":     map[string]any{"threadId": "t", "messages": []any{}},
		"bad tool":    map[string]any{"threadId": "t", "messages": []any{map[string]any{"id": "u", "role": "user", "content": "x"}}, "tools": []any{map[string]any{"name": "bad name!"}}},
		"foreign id":  map[string]any{"threadId": "t", "messages": []any{map[string]any{"id": "x", "role": "tool", "toolCallId": "call_1", "content": "x"}}},
		"bad resume":  map[string]any{"threadId": "t", "messages": []any{}, "resume": []any{map[string]any{"interruptId": "r_x.y", "status": "maybe"}}},
		"image parts": map[string]any{"threadId": "t", "messages": []any{map[string]any{"id": "u", "role": "user", "content": []any{map[string]any{"type": "image"}}}}},
	} {
		resp := e.do("POST", "/api/v1/ag-ui/graphs/"+gid, body, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
	}
	e.mustStatus(e.do("POST", "/api/v1/ag-ui/graphs/nope", map[string]any{"threadId": "t",
		"messages": []any{map[string]any{"id": "u", "role": "user", "content": "x"}}}, nil), http.StatusNotFound)
}

// A failed run ends with RUN_ERROR carrying the failing node's code.
func TestAGUIRunError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(map[string]any{"name": "flaky", "nodes": []any{
		map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
		map[string]any{"id": "f", "type": "flaky", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{"failTimes": 5, "errorCode": "boom"}},
	}, "edges": []any{edge("e1", "start", "message", "f", "input", "flow")}})
	in := map[string]any{"threadId": "t-fail", "runId": "r1", "messages": []any{map[string]any{"id": "u1", "role": "user", "content": "x"}}}
	evs := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil).all(t)
	last := evs[len(evs)-1].Data
	require.Equal(t, "RUN_ERROR", last["type"])
	require.Equal(t, "boom", last["code"])
	require.NotEmpty(t, last["message"])
	types := aguiTypes(evs)
	require.Equal(t, "STEP_FINISHED", types[len(types)-2], "the failed node's step is closed first")
}

// A run rolled back by a later turn (multitaskStrategy rollback) is
// cancelled (then deleted): its AG-UI stream ends as cancelled.
func TestAGUIRunRolledBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gid := e.saveGraph(basicGraph(`{"name":"Slow","tokenDelayMs":200}`))
	in := map[string]any{"threadId": "t-rollback", "runId": "r1", "messages": []any{
		map[string]any{"id": "u1", "role": "user", "content": "one two three four five six seven eight nine ten"}}}
	st := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil)
	untilAGUIText(t, st)
	e.mustStatus(e.do("POST", "/api/v1/chats/t-rollback/messages", map[string]any{"content": "instead", "multitaskStrategy": "rollback"}, nil),
		http.StatusAccepted)
	evs := st.all(t)
	last := evs[len(evs)-1].Data
	require.Equal(t, "RUN_FINISHED", last["type"], "%v", aguiTypes(evs))
	require.Equal(t, map[string]any{"type": "cancelled"}, last["outcome"])
}

// The AG-UI stream's text is the chat message's text also when the
// answer is more than one agent's text (see
// TestOpenAIStreamIsTheWholeAnswer), in one text message: one
// TEXT_MESSAGE_START, one TEXT_MESSAGE_END after all its content.
func TestAGUIStreamIsTheWholeAnswer(t *testing.T) {
	t.Parallel()
	// An agent chat to a1 of start -> a1 -> a2 -> chat_output: the
	// answer is a2's, which streams.
	pipeline := graphWith("", [][3]any{{"a2", "agent", map[string]any{"name": "Second"}}},
		edge("e1", "start", "message", "a1", "input", "flow"), edge("e2", "a1", "output", "a2", "input", "flow"),
		edge("e3", "a2", "output", "out", "input", "flow"))
	// a1 (slow) and a2 into one chat_output; a2, given a tool command by
	// a template, calls the calculator while a1's text is open.
	withTool := graphWith(`{"name":"Slow","tokenDelayMs":50}`, [][3]any{
		{"t", "template", map[string]any{"template": `/tool calculator {"expression":"6*7"}`}},
		{"a2", "agent", map[string]any{"name": "Calc"}},
		{"calc", "tool", map[string]any{"name": "calculator"}},
	}, edge("e1", "start", "message", "a1", "input", "flow"), edge("e2", "a1", "output", "out", "input", "flow"),
		edge("e3", "start", "message", "t", "input", "flow"), edge("e4", "t", "output", "a2", "input", "flow"),
		edge("e5", "a2", "output", "out", "input", "flow"), edge("l1", "calc", "tool", "a2", "tools", "link"))
	for name, tc := range map[string]struct {
		graph   map[string]any
		props   map[string]any
		message string
		chunks  []string // live chunks, then the rest
		tool    bool     // a server tool call is shown
	}{
		"template after the agent": {templateGraph(), nil, "[echo: one two]", []string{"[echo: one two]"}, false},
		"two agents into one chat_output": {twoAgentsGraph(), nil, "echo: one two\n\necho: one two",
			[]string{"echo:", " one", " two", "\n\necho: one two"}, false},
		"agent chat into a pipeline": {pipeline, map[string]any{"agentNodeId": "a1"}, "echo: echo: one two",
			[]string{"echo:", " echo:", " one", " two"}, false},
		"a server tool call inside the text": {withTool, nil, "echo: one two\n\ntool calculator returned: 42",
			[]string{"echo:", " one", " two", "\n\ntool calculator returned: 42"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			thread := "t-whole-" + strings.ReplaceAll(name, " ", "-")
			in := map[string]any{"threadId": thread, "runId": "r1", "forwardedProps": tc.props,
				"messages": []any{map[string]any{"id": "u1", "role": "user", "content": "one two"}}}
			evs := e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+e.saveGraph(tc.graph), in, nil).all(t)
			msgs := messages(e.chat(thread))
			message := msgs[len(msgs)-1]
			require.Equal(t, tc.message, message["content"])
			var text, deltas []string
			for _, ev := range evs {
				typ := ev.Data["type"].(string)
				if !strings.HasPrefix(typ, "TEXT_MESSAGE") {
					continue
				}
				require.Equal(t, message["id"], ev.Data["messageId"])
				if typ == "TEXT_MESSAGE_CONTENT" {
					deltas = append(deltas, ev.Data["delta"].(string))
					typ += " ..."
				}
				if len(text) == 0 || text[len(text)-1] != typ {
					text = append(text, typ)
				}
			}
			require.Equal(t, []string{"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT ...", "TEXT_MESSAGE_END"}, text)
			require.Equal(t, tc.tool, slices.Contains(aguiTypes(evs), "TOOL_CALL_RESULT"))
			require.Equal(t, tc.message, strings.Join(deltas, ""))
			require.NoError(t, ssetest.WholeChunks(tc.chunks, deltas))
		})
	}
}
