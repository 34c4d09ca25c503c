package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"

	"chatgraph/internal/ssetest"
	"chatgraph/nodes/llm"
)

// The official Go SDK against the OpenAI-compatible endpoints.

func (e *env) openai(opts ...oaiopt.RequestOption) openai.Client {
	key := e.token
	if key == "" {
		key = "unused"
	}
	return openai.NewClient(append([]oaiopt.RequestOption{oaiopt.WithBaseURL(e.url + "/v1/"), oaiopt.WithAPIKey(key),
		oaiopt.WithMaxRetries(0)}, opts...)...)
}

func (e *env) saveGraph(g map[string]any) string {
	e.t.Helper()
	var gr map[string]any
	e.mustStatus(e.do("POST", "/api/v1/graphs", g, &gr), http.StatusCreated)
	return gr["id"].(string)
}

func apiErr(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	require.True(t, errors.As(err, &ae), "not an API error: %v", err)
	return ae
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
	Description: openai.String("The weather of a city"),
	Parameters:  shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})

func TestOpenAIModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	g["name"] = "Helper bot"
	id := e.saveGraph(g)
	client := e.openai()
	page, err := client.Models.List(context.Background())
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	require.Equal(t, id, page.Data[0].ID)
	require.Equal(t, "chatgraph", page.Data[0].OwnedBy)
	require.Contains(t, page.Data[0].RawJSON(), `"name":"Helper bot"`)
	m, err := client.Models.Get(context.Background(), "Helper bot")
	require.NoError(t, err)
	require.Equal(t, id, m.ID, "the graph's name is an alias")
	_, err = client.Models.Get(context.Background(), "nope")
	ae := apiErr(t, err)
	require.Equal(t, http.StatusNotFound, ae.StatusCode)
	require.Equal(t, "model_not_found", ae.Code)
}

// A model is a graph's id first, else the name of exactly one live graph:
// a name two graphs share is refused until one of them is deleted, and a
// deleted graph's name names nothing.
func TestOpenAIModelNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := e.openai()
	ctx := context.Background()
	named := func(id, name string) {
		g := basicGraph("")
		g["id"], g["name"] = id, name
		require.Equal(t, id, e.saveGraph(g))
	}
	named("g-one", "twin")
	named("g-two", "twin")
	named("g-three", "g-one") // a name that is another graph's id

	m, err := client.Models.Get(ctx, "g-one")
	require.NoError(t, err)
	require.Equal(t, "g-one", m.ID, "an id wins over a name")
	_, err = client.Models.Get(ctx, "twin")
	ae := apiErr(t, err)
	require.Equal(t, http.StatusBadRequest, ae.StatusCode)
	require.Contains(t, ae.Message, `several graphs are named "twin": use the graph id`)
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "twin",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	require.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode, "completions resolve the model the same way")

	e.mustStatus(e.do("DELETE", "/api/v1/graphs/g-one", nil, nil), http.StatusNoContent)
	m, err = client.Models.Get(ctx, "twin")
	require.NoError(t, err)
	require.Equal(t, "g-two", m.ID, "a deleted graph does not share the name")
	m, err = client.Models.Get(ctx, "g-one")
	require.NoError(t, err)
	require.Equal(t, "g-three", m.ID, "a deleted id falls back to the name")

	e.mustStatus(e.do("DELETE", "/api/v1/graphs/g-two", nil, nil), http.StatusNoContent)
	_, err = client.Models.Get(ctx, "twin")
	ae = apiErr(t, err)
	require.Equal(t, http.StatusNotFound, ae.StatusCode)
	require.Equal(t, "model_not_found", ae.Code)
}

func TestOpenAICompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := basicGraph("")
	g["name"] = "echoer"
	id := e.saveGraph(g)
	client := e.openai()
	var raw *http.Response
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "echoer",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("be brief"), openai.UserMessage("earlier"), openai.AssistantMessage("echo: earlier"),
			openai.UserMessage("hello there")},
		Temperature: openai.Float(0.2), // accepted, the graph decides
	}, oaiopt.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	require.Equal(t, "echo: hello there", resp.Choices[0].Message.Content)
	require.Equal(t, "stop", resp.Choices[0].FinishReason)
	require.Equal(t, "chat.completion", string(resp.Object))
	require.True(t, strings.HasPrefix(resp.ID, "chatcmpl-r_"), resp.ID)
	require.Equal(t, "echoer", resp.Model)

	// The request became a chat of the graph: the transcript, then the turn.
	chatID := raw.Header.Get("X-Chatgraph-Chat-Id")
	require.NotEmpty(t, chatID)
	c := e.chat(chatID)
	require.Equal(t, id, c["graphId"])
	var got []string
	for _, m := range messages(c) {
		got = append(got, m["role"].(string)+":"+m["content"].(string))
	}
	require.Equal(t, []string{"system:be brief", "user:earlier", "assistant:echo: earlier", "user:hello there", "assistant:echo: hello there"}, got)

	// A later request names the chat: its own history is used.
	resp, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: id,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("again")}}, oaiopt.WithHeader("X-Chatgraph-Chat-Id", chatID))
	require.NoError(t, err)
	require.Equal(t, "echo: again", resp.Choices[0].Message.Content)
	require.Len(t, messages(e.chat(chatID)), 7)
}

func TestOpenAIStreaming(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.saveGraph(basicGraph(""))
	client := e.openai()
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: id,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello big world")}})
	acc := openai.ChatCompletionAccumulator{}
	var deltas []string
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		require.Equal(t, "chat.completion.chunk", string(ch.Object))
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			deltas = append(deltas, ch.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, ssetest.WholeChunks([]string{"echo:", " hello", " big", " world"}, deltas))
	require.Equal(t, "echo: hello big world", acc.Choices[0].Message.Content)
	require.Equal(t, "stop", acc.Choices[0].FinishReason)
}

// askWeather saves the basic graph and sends it, through the OpenAI
// client, a message its agent answers with a call of the client's
// get_weather tool: the client, the request (its messages), its answer.
func askWeather(t *testing.T, e *env) (openai.Client, openai.ChatCompletionNewParams, []openai.ChatCompletionMessageParamUnion, *openai.ChatCompletion) {
	t.Helper()
	id := e.saveGraph(basicGraph(""))
	client := e.openai()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(`/tool get_weather {"city":"Paris"}`)}
	params := openai.ChatCompletionNewParams{Model: id, Messages: msgs, Tools: []openai.ChatCompletionToolUnionParam{weatherTool}}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	return client, params, msgs, resp
}

func TestOpenAIClientToolCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	client, params, msgs, resp := askWeather(t, e)
	ch := resp.Choices[0]
	require.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	require.Equal(t, "get_weather", call.Function.Name)
	require.JSONEq(t, `{"city":"Paris"}`, call.Function.Arguments)

	// The client runs the tool and sends the result: the run goes on.
	params.Messages = append(msgs, ch.Message.ToParam(), openai.ToolMessage("sunny, 21°C", call.ID))
	resp, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, "stop", resp.Choices[0].FinishReason)
	require.Equal(t, "tool get_weather returned: sunny, 21°C", resp.Choices[0].Message.Content)

	// The same, streamed.
	params.Messages = msgs
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	call = acc.Choices[0].Message.ToolCalls[0]
	require.Equal(t, "get_weather", call.Function.Name)
	params.Messages = append(msgs, acc.Choices[0].Message.ToParam(), openai.ToolMessage("rain", call.ID))
	stream = client.Chat.Completions.NewStreaming(ctx, params)
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Equal(t, "tool get_weather returned: rain", acc.Choices[0].Message.Content)
	require.Equal(t, "stop", acc.Choices[0].FinishReason)

	// A result for a call this server never made.
	params.Messages = append(msgs, acc.Choices[0].Message.ToParam(), openai.ToolMessage("x", "call_123"))
	_, err = client.Chat.Completions.New(ctx, params)
	require.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode)
}

func TestOpenAIApprovalAsToolCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.saveGraph(approvalGraph())
	client := e.openai()
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(`/tool calculator {"expression":"6*7"}`)}
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	call := resp.Choices[0].Message.ToolCalls[0]
	require.Equal(t, "chatgraph_approval", call.Function.Name)
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args))
	require.Equal(t, "tool_approval", args["reason"])
	require.Equal(t, "calculator", args["request"].(map[string]any)["toolCall"].(map[string]any)["name"])

	bad := append(msgs, resp.Choices[0].Message.ToParam(), openai.ToolMessage("yes please", call.ID))
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: bad})
	require.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode, "an approval's answer is JSON")

	msgs = append(msgs, resp.Choices[0].Message.ToParam(), openai.ToolMessage(`{"approved":true}`, call.ID))
	resp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, "tool calculator returned: 42", resp.Choices[0].Message.Content)
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) { c.Token = "s3cret" })
	id := e.saveGraph(basicGraph(""))
	flaky := map[string]any{"name": "flaky", "nodes": []any{
		map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
		map[string]any{"id": "f", "type": "flaky", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{"failTimes": 5, "errorCode": "boom"}},
	}, "edges": []any{edge("e1", "start", "message", "f", "input", "flow")}}
	fid := e.saveGraph(flaky)
	ctx := context.Background()
	hi := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}

	wrong := e.openai(oaiopt.WithAPIKey("wrong"))
	_, err := wrong.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: hi})
	ae := apiErr(t, err)
	require.Equal(t, http.StatusUnauthorized, ae.StatusCode)
	require.Equal(t, "authentication_error", ae.Type)
	require.Equal(t, "unauthorized", ae.Code)

	client := e.openai()
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-graph", Messages: hi})
	ae = apiErr(t, err)
	require.Equal(t, http.StatusNotFound, ae.StatusCode)
	require.Equal(t, "model_not_found", ae.Code)

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi"), openai.AssistantMessage("hello")}})
	ae = apiErr(t, err)
	require.Equal(t, http.StatusBadRequest, ae.StatusCode)
	require.Equal(t, "invalid_request_error", ae.Type)
	require.Contains(t, ae.Message, "last message")

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: hi, N: openai.Int(2)})
	require.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode)

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("")}})
	ae = apiErr(t, err)
	require.Equal(t, http.StatusBadRequest, ae.StatusCode)
	require.Contains(t, ae.Message, "content", "the field is named")

	// A run that fails: an error, not an answer.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: fid, Messages: hi})
	ae = apiErr(t, err)
	require.Equal(t, http.StatusInternalServerError, ae.StatusCode)
	require.Equal(t, "server_error", ae.Type)
	require.Equal(t, "boom", ae.Code)

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: fid, Messages: hi})
	for stream.Next() {
	}
	require.Error(t, stream.Err())
	require.Contains(t, stream.Err().Error(), "boom")
}

// Closing the request cancels the turn's run, streaming or not.
func TestOpenAIDisconnectCancels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.saveGraph(basicGraph(`{"name":"Slow","tokenDelayMs":200}`))
	client := e.openai()
	words := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three four five six seven eight nine ten")}
	for _, streamed := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		var raw *http.Response
		runID := make(chan string, 1)
		if streamed {
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: id, Messages: words},
				oaiopt.WithResponseInto(&raw))
			for stream.Next() {
				if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					runID <- strings.TrimPrefix(c.ID, "chatcmpl-")
					cancel()
					break
				}
			}
			_ = stream.Close()
		} else {
			go func() {
				_, _ = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, Messages: words})
			}()
			// The run shows up in the run list; then the client gives up.
			waitFor(t, "the run to start", func() bool {
				var runs []map[string]any
				e.do("GET", "/api/v1/runs", nil, &runs)
				for _, r := range runs {
					if r["status"] == "running" {
						runID <- r["id"].(string)
						return true
					}
				}
				return false
			})
			cancel()
		}
		rid := <-runID
		waitFor(t, "run "+rid+" to be cancelled", func() bool {
			var r map[string]any
			e.do("GET", "/api/v1/runs/"+rid, nil, &r)
			return r["status"] == "cancelled"
		})
		cancel()
	}
}

// counted is a model that answers "counted" and reports token counts.
type counted struct{}

func (counted) Stream(_ context.Context, _ llm.Request, onText func(string)) (llm.Response, error) {
	if onText != nil {
		onText("counted")
	}
	return llm.Response{Content: "counted", FinishReason: "stop", Usage: &llm.Usage{PromptTokens: 11, CompletionTokens: 3, TotalTokens: 14}}, nil
}

// usage sums what the graph's agents report.
func TestOpenAIUsage(t *testing.T) {
	t.Parallel()
	models := llm.NewModels()
	require.NoError(t, models.Register("counted", counted{}))
	e := newEnv(t, func(c *transportConfig) { c.Models = models })
	// Two agents in a pipeline: both calls count.
	g := basicGraph(`{"name":"First","model":"counted/x"}`)
	g["nodes"] = append(g["nodes"].([]any), map[string]any{"id": "a2", "type": "agent", "position": map[string]any{"x": 0, "y": 0},
		"data": map[string]any{"name": "Second", "model": "counted/x"}})
	g["edges"] = []any{edge("e1", "start", "message", "a1", "input", "flow"), edge("e2", "a1", "output", "a2", "input", "flow"),
		edge("e3", "a2", "output", "out", "input", "flow")}
	id := e.saveGraph(g)
	client := e.openai()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: id, Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, "counted", resp.Choices[0].Message.Content)
	require.EqualValues(t, 22, resp.Usage.PromptTokens)
	require.EqualValues(t, 6, resp.Usage.CompletionTokens)
	require.EqualValues(t, 28, resp.Usage.TotalTokens)

	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: id, Messages: msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Equal(t, "counted", acc.Choices[0].Message.Content, "only the agent feeding chat_output streams")
	require.EqualValues(t, 28, acc.Usage.TotalTokens)

	// The offline echo model reports none: usage is null.
	eid := e.saveGraph(basicGraph(""))
	resp, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: eid, Messages: msgs})
	require.NoError(t, err)
	require.Contains(t, resp.RawJSON(), `"usage":null`)
}

// graphWith is basicGraph(agentData) with more nodes (id, type, data
// triples) and edges in place of its own.
func graphWith(agentData string, nodes [][3]any, edges ...map[string]any) map[string]any {
	g := basicGraph(agentData)
	for _, n := range nodes {
		g["nodes"] = append(g["nodes"].([]any), map[string]any{"id": n[0], "type": n[1], "position": map[string]any{"x": 0, "y": 0}, "data": n[2]})
	}
	es := make([]any, len(edges))
	for i, e := range edges {
		es[i] = e
	}
	g["edges"] = es
	return g
}

// templateGraph is chat_start -> agent a1 -> template "[...]" ->
// chat_output: the answer wraps the agent's text.
func templateGraph() map[string]any {
	return graphWith("", [][3]any{{"t", "template", map[string]any{"template": "[{{.content}}]"}}},
		edge("e1", "start", "message", "a1", "input", "flow"), edge("e2", "a1", "output", "t", "input", "flow"),
		edge("e3", "t", "output", "out", "input", "flow"))
}

// twoAgentsGraph is chat_start -> agents a1 and a2 -> one chat_output:
// the answer is a1's text, a blank line, a2's. Their words 5 ms apart
// interleave.
func twoAgentsGraph() map[string]any {
	return graphWith(`{"name":"First","tokenDelayMs":5}`, [][3]any{{"a2", "agent", map[string]any{"name": "Second", "tokenDelayMs": 5}}},
		edge("e1", "start", "message", "a1", "input", "flow"), edge("e2", "start", "message", "a2", "input", "flow"),
		edge("e3", "a1", "output", "out", "input", "flow"), edge("e4", "a2", "output", "out", "input", "flow"))
}

// streamOpenAI streams one completion of model with the SDK: its content
// deltas and the content of the chat message it answered.
func (e *env) streamOpenAI(model, content string) (deltas []string, message string) {
	e.t.Helper()
	var raw *http.Response
	client := e.openai()
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}}, oaiopt.WithResponseInto(&raw))
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			deltas = append(deltas, ch.Choices[0].Delta.Content)
		}
	}
	require.NoError(e.t, stream.Err())
	msgs := messages(e.chat(raw.Header.Get("X-Chatgraph-Chat-Id")))
	return deltas, msgs[len(msgs)-1]["content"].(string)
}

// The stream's text is the chat message's text also when the answer is
// more than one agent's text: only the agent whose text starts the answer
// (feeding the chat_output directly) streams live, the rest follows at
// the end; a template in front streams nothing live.
func TestOpenAIStreamIsTheWholeAnswer(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		graph   map[string]any
		message string
		chunks  []string // live chunks, then the rest
	}{
		"template after the agent": {templateGraph(), "[echo: one two]", []string{"[echo: one two]"}},
		"two agents into one chat_output": {twoAgentsGraph(), "echo: one two\n\necho: one two",
			[]string{"echo:", " one", " two", "\n\necho: one two"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			deltas, message := e.streamOpenAI(e.saveGraph(tc.graph), "one two")
			require.Equal(t, tc.message, message)
			require.Equal(t, message, strings.Join(deltas, ""))
			require.NoError(t, ssetest.WholeChunks(tc.chunks, deltas))
		})
	}
}

// stutter is a model whose first call fails after it streamed "echo:
// on"; its next call says then.
type stutter struct {
	calls *atomic.Int32
	then  []string
}

func (s stutter) Stream(_ context.Context, _ llm.Request, onText func(string)) (llm.Response, error) {
	if s.calls.Add(1) == 1 {
		onText("echo:")
		onText(" on")
		return llm.Response{}, errors.New("connection reset")
	}
	for _, w := range s.then {
		onText(w)
	}
	return llm.Response{Content: strings.Join(s.then, ""), FinishReason: "stop"}, nil
}

// An agent retried after it streamed says its answer again from the
// start: the stream sends only what goes beyond what it sent. When the
// new attempt says something else, the stream cannot take back what it
// sent: the whole answer follows it.
func TestOpenAIStreamOfARetriedAgent(t *testing.T) {
	t.Parallel()
	same, other := stutter{new(atomic.Int32), []string{"echo:", " one", " two"}}, stutter{new(atomic.Int32), []string{"other"}}
	models := llm.NewModels()
	require.NoError(t, models.Register("same", same))
	require.NoError(t, models.Register("other", other))
	for model, want := range map[string]struct {
		message string
		chunks  []string // what the stream sends
	}{
		"same/x":  {"echo: one two", []string{"echo:", " on", "e", " two"}},
		"other/x": {"other", []string{"echo:", " on", "other"}},
	} {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *transportConfig) { c.Models = models })
			deltas, message := e.streamOpenAI(e.saveGraph(basicGraph(`{"model":"`+model+`","retry":{"maxAttempts":2}}`)), "one two")
			require.Equal(t, want.message, message)
			require.NoError(t, ssetest.WholeChunks(want.chunks, deltas))
		})
	}
}
