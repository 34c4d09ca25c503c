package transport_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGoldenAdapters pins the AG-UI events (one line per type and
// outcome) and the OpenAI answers (completion, chunks, error) chatgraph
// writes.
func TestGoldenAdapters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lines := map[string]string{}
	keep := func(key, line string) {
		if _, ok := lines[key]; !ok {
			lines[key] = line
		}
	}
	user := func(content string) map[string]any {
		return map[string]any{"id": "u1", "role": "user", "content": content}
	}
	agui := func(g map[string]any, thread string, in map[string]any, cancelAtText bool) {
		gid := e.saveGraph(g)
		in["threadId"], in["runId"] = thread, "client-run"
		z := newNormalizer()
		s := e.openSSE(sseCtx(t), "POST", "/api/v1/ag-ui/graphs/"+gid, in, nil)
		for {
			ev, err := s.next(false)
			if err != nil {
				return
			}
			key := "ag-ui " + ev.Data["type"].(string)
			if o, ok := ev.Data["outcome"].(map[string]any); ok {
				key += " " + o["type"].(string)
				if _, pending := o["pendingToolCallIds"]; pending {
					key += " (client tool)"
				}
			}
			keep(key, z.line(ev.Raw))
			if cancelAtText && ev.Data["type"] == "TEXT_MESSAGE_CONTENT" {
				e.mustStatus(e.do("POST", "/api/v1/chats/"+thread+"/cancel", map[string]any{}, nil), http.StatusAccepted)
				cancelAtText = false
			}
		}
	}
	// Streamed words 100 ms apart: each its own delta (words that come
	// faster than their commit share one).
	paced := basicGraph(`{"tokenDelayMs": 100}`)
	agui(paced, "t-text", map[string]any{"messages": []any{user("hello")}}, false)
	agui(basicGraph(""), "t-server-tool", map[string]any{"messages": []any{user(`/tool calculator {"expression":"6*7"}`)},
		"forwardedProps": map[string]any{"userTools": []string{"calculator"}}}, false)
	agui(basicGraph(""), "t-client-tool", map[string]any{"messages": []any{user(`/tool get_weather {"city":"Oslo"}`)},
		"tools": []any{map[string]any{"name": "get_weather", "description": "weather"}}}, false)
	agui(approvalGraph(), "t-approval", map[string]any{"messages": []any{user(`/tool calculator {"expression":"6*7"}`)}}, false)
	// Words 2 s apart: the cancel, sent on the first text, lands before
	// the second.
	agui(basicGraph(`{"tokenDelayMs": 2000}`), "t-cancel", map[string]any{"messages": []any{user(strings.Repeat("w ", 100))}}, true)
	agui(flakyGraph(5, 1), "t-error", map[string]any{"messages": []any{user("fail me")}}, false)

	oai := func(key string, body map[string]any, stream bool) {
		z := newNormalizer()
		if !stream {
			resp := e.do("POST", "/v1/chat/completions", body, nil)
			keep("openai "+key, z.line(readAll(resp)))
			return
		}
		s := e.openSSE(sseCtx(t), "POST", "/v1/chat/completions", body, nil)
		n := 0
		for {
			ev, err := s.next(false)
			if err != nil {
				return
			}
			n++
			keep("openai "+key+" chunk "+string(rune('0'+n)), z.line(ev.Raw))
		}
	}
	id := e.saveGraph(basicGraph(""))
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}}
	oai("completion", map[string]any{"model": id, "messages": []any{user("hi")}}, false)
	oai("completion tool_calls", map[string]any{"model": id, "messages": []any{user(`/tool get_weather {"city":"Oslo"}`)}, "tools": tools}, false)
	oai("stream", map[string]any{"model": e.saveGraph(paced), "stream": true, "messages": []any{user("hi")}}, true)
	oai("stream tool_calls", map[string]any{"model": id, "stream": true, "messages": []any{user(`/tool get_weather {}`)}, "tools": tools}, true)
	oai("error model_not_found", map[string]any{"model": "nope", "messages": []any{user("hi")}}, false)
	oai("error run_failed", map[string]any{"model": e.saveGraph(flakyGraph(5, 1)), "messages": []any{user("x")}}, false)
	for _, want := range []string{"ag-ui RUN_STARTED", "ag-ui STEP_STARTED", "ag-ui STEP_FINISHED", "ag-ui TEXT_MESSAGE_START",
		"ag-ui TEXT_MESSAGE_CONTENT", "ag-ui TEXT_MESSAGE_END", "ag-ui TOOL_CALL_START", "ag-ui TOOL_CALL_ARGS", "ag-ui TOOL_CALL_END",
		"ag-ui TOOL_CALL_RESULT", "ag-ui RUN_FINISHED success", "ag-ui RUN_FINISHED success (client tool)", "ag-ui RUN_FINISHED interrupt",
		"ag-ui RUN_FINISHED cancelled", "ag-ui RUN_ERROR", "openai completion", "openai completion tool_calls", "openai stream chunk 1",
		"openai error model_not_found", "openai error run_failed"} {
		require.Contains(t, lines, want)
	}
	checkGolden(t, "adapters.golden", lines)
}
