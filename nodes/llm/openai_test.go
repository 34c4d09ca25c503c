package llm

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
	"time"

	"github.com/stretchr/testify/require"
)

// sse writes chunks the way OpenAI does: "data: <json>\n\n", then [DONE].
func sse(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
		f.Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.Flush()
}

func textChunk(s string) string {
	b, _ := json.Marshal(s)
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`
}

func newTestServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *OpenAI) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1/", APIKey: "sk-test", HTTPClient: srv.Client(),
		RetryDelay: time.Millisecond, MaxRetryDelay: 50 * time.Millisecond})
	require.NoError(t, err)
	return srv, c
}

func TestOpenAIStreamsText(t *testing.T) {
	t.Parallel()
	var body map[string]any
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, http.MethodPost, r.Method)
		require.Equal(t, "/v1/chat/completions", r.URL.Path)
		require.Equal(t, "Bearer sk-test", r.Header.Get("Authorization"))
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		sse(w,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			textChunk("Hel"), textChunk("lo"), textChunk(" there"),
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	})
	temp := 0.2
	var got []string
	resp, err := c.Stream(context.Background(), Request{Model: "gpt-4o-mini", Temperature: &temp,
		Messages: []Message{
			{Role: RoleSystem, Content: "sys"},
			{Role: RoleUser, Content: "hi"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
			{Role: RoleTool, ToolCallID: "call_1", Name: "calculator", Content: "2"},
		},
		Tools: []ToolSpec{{Name: "calculator", Description: "calc", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}, func(s string) { got = append(got, s) })
	require.NoError(t, err)
	require.Equal(t, []string{"Hel", "lo", " there"}, got)
	require.Equal(t, "Hello there", resp.Content)
	require.Equal(t, "stop", resp.FinishReason)
	require.Equal(t, &Usage{PromptTokens: 9, CompletionTokens: 3, TotalTokens: 12}, resp.Usage)

	// The request in the wire format.
	require.Equal(t, true, body["stream"])
	require.Equal(t, "gpt-4o-mini", body["model"])
	require.InDelta(t, 0.2, body["temperature"], 1e-9)
	msgs := body["messages"].([]any)
	require.Len(t, msgs, 4)
	asst := msgs[2].(map[string]any)
	require.Nil(t, asst["content"])
	tc := asst["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "function", tc["type"])
	require.Equal(t, "calculator", tc["function"].(map[string]any)["name"])
	tool := msgs[3].(map[string]any)
	require.Equal(t, "call_1", tool["tool_call_id"])
	tools := body["tools"].([]any)
	require.Equal(t, "calculator", tools[0].(map[string]any)["function"].(map[string]any)["name"])
}

func TestOpenAIToolCallsSplitOverChunks(t *testing.T) {
	t.Parallel()
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w,
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"calculator","arguments":""}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"expr"}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"current_time","arguments":""}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ession\":\"6*7\"}"}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	})
	resp, err := c.Stream(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}}, nil)
	require.NoError(t, err)
	require.Equal(t, "tool_calls", resp.FinishReason)
	require.Equal(t, []ToolCall{
		{ID: "call_a", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_b", Name: "current_time", Arguments: `{}`},
	}, resp.ToolCalls)
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		status    int
		body      string
		code      string
		retryable bool
		msg       string
	}{
		{"bad request", 400, `{"error":{"message":"bad tools","type":"invalid_request_error","code":null}}`, CodeBadRequest, false, "bad tools"},
		{"auth", 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`, CodeAuth, false, "Incorrect API key"},
		{"ollama not found", 404, `{"error":"model \"llama9\" not found, try pulling it first"}`, CodeNotFound, false, "llama9"},
		{"rate limited", 429, `{"error":{"message":"Rate limit reached","type":"requests"}}`, CodeRateLimited, true, "Rate limit"},
		{"server", 503, `upstream overloaded`, CodeUnavailable, true, "upstream overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			_, err := c.Stream(context.Background(), Request{Model: "m"}, nil)
			var le *Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, tc.code, le.ErrorCode())
			require.Equal(t, tc.status, le.Status)
			require.Equal(t, tc.retryable, le.Retryable)
			require.Contains(t, le.Error(), tc.msg)
			want := int32(1)
			if tc.retryable {
				want = 3 // MaxRetries defaults to 2
			}
			require.Equal(t, want, calls.Load())
		})
	}
}

func TestOpenAIRetries429ThenStreams(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return
		}
		sse(w, textChunk("ok"))
	})
	resp, err := c.Stream(context.Background(), Request{Model: "m"}, nil)
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Content)
	require.Equal(t, int32(2), calls.Load())
}

func TestOpenAIErrorInStream(t *testing.T) {
	t.Parallel()
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, textChunk("par"), `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)
	})
	var got strings.Builder
	_, err := c.Stream(context.Background(), Request{Model: "m"}, func(s string) { got.WriteString(s) })
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeUnavailable, le.Code)
	require.Contains(t, le.Message, "server had an error")
	require.Equal(t, "par", got.String())
}

func TestOpenAIBadChunkIsProtocolError(t *testing.T) {
	t.Parallel()
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, `{"choices":[{"index":0,"delta":{"content":"a"}}]}`, `{not json`)
	})
	_, err := c.Stream(context.Background(), Request{Model: "m"}, nil)
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeProtocol, le.Code)
}

func TestOpenAINonStreamingAnswer(t *testing.T) {
	t.Parallel()
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1\"}"}}]},"finish_reason":"tool_calls"}]}`)
	})
	resp, err := c.Stream(context.Background(), Request{Model: "m"}, nil)
	require.NoError(t, err)
	require.Equal(t, []ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"1"}`}}, resp.ToolCalls)
}

func TestOpenAICancelMidStream(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	_, c := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", textChunk("first"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("stop")
	_, err := c.Stream(ctx, Request{Model: "m"}, func(string) { cancel(cause) })
	require.ErrorIs(t, err, cause)
}

func TestOpenAIIdleTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": keep-alive\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client(), IdleTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = c.Stream(context.Background(), Request{Model: "m"}, nil)
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeTimeout, le.Code)
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	in := ": comment\r\nevent: x\r\ndata: a\r\ndata:b\r\n\r\nid: 3\ndata: c\n\ndata: tail"
	var got []string
	require.NoError(t, readSSE(strings.NewReader(in), 100, func(d []byte) error {
		got = append(got, string(d))
		return nil
	}))
	require.Equal(t, []string{"a\nb", "c", "tail"}, got)
	err := readSSE(strings.NewReader("data: "+strings.Repeat("x", 200)+"\n\n"), 100, func([]byte) error { return nil })
	require.ErrorContains(t, err, "longer than")
}
