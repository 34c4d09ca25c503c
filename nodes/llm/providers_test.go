package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The provider tests replay wire transcripts (testdata/<api>/*.http: a
// status line, headers, a blank line, the body exactly as the API sends
// it) from an httptest server, so the official SDKs parse real answers.

// readTranscript parses one transcript.
func readTranscript(tb testing.TB, name string) (*http.Response, []byte) {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(tb, err)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	require.NoError(tb, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	return resp, body
}

// replay serves transcripts in order (the last one again for further
// requests) and records every request. A transcript named disconnect*
// is cut: the connection is aborted after its last byte.
type replay struct {
	t     *testing.T
	files []string
	srv   *httptest.Server

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	at     time.Time
	header http.Header
	body   map[string]any
}

func newReplay(t *testing.T, files ...string) *replay {
	r := &replay{t: t, files: files}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *replay) serve(w http.ResponseWriter, req *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(req.Body).Decode(&body)
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{at: time.Now(), header: req.Header.Clone(), body: body})
	name := r.files[min(len(r.reqs), len(r.files))-1]
	r.mu.Unlock()
	resp, raw := readTranscript(r.t, name)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	// One write per event, as a server streams them.
	for _, ev := range bytes.SplitAfter(raw, []byte("\n\n")) {
		_, _ = w.Write(ev)
		w.(http.Flusher).Flush()
	}
	if strings.Contains(filepath.Base(name), "disconnect") {
		panic(http.ErrAbortHandler)
	}
}

func (r *replay) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

func newOpenAITest(t *testing.T, r *replay, cfg OpenAIConfig) *OpenAI {
	cfg.BaseURL, cfg.HTTPClient = r.srv.URL+"/v1", r.srv.Client()
	p, err := NewOpenAI(cfg)
	require.NoError(t, err)
	return p
}

func newAnthropicTest(t *testing.T, r *replay, cfg AnthropicConfig) *Anthropic {
	cfg.BaseURL, cfg.HTTPClient = r.srv.URL, r.srv.Client()
	p, err := NewAnthropic(cfg)
	require.NoError(t, err)
	return p
}

// conversation exercises every message role and a tool.
var conversation = Request{Model: "m",
	Messages: []Message{
		{Role: RoleSystem, Content: "be brief"},
		{Role: RoleUser, Content: "what is 6*7 and the time?"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}, {ID: "c2", Name: "current_time", Arguments: `{}`}}},
		{Role: RoleTool, ToolCallID: "c1", Name: "calculator", Content: "42"},
		{Role: RoleTool, ToolCallID: "c2", Name: "current_time", Content: "error: no clock"},
	},
	Tools: []ToolSpec{{Name: "calculator", Description: "calc",
		Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}`)}},
}

func TestOpenAIStreamsText(t *testing.T) {
	t.Parallel()
	r := newReplay(t, "openai/text.http")
	p := newOpenAITest(t, r, OpenAIConfig{APIKey: "sk-test", Headers: map[string]string{"X-Extra": "1"}})
	temp := 0.2
	req := conversation
	req.Model, req.Temperature, req.MaxTokens = "gpt-4o-mini", &temp, 100
	var got []string
	resp, err := p.Stream(context.Background(), req, func(s string) { got = append(got, s) })
	require.NoError(t, err)
	require.Equal(t, []string{"Hello", "!", " How", " can I help?"}, got)
	require.Equal(t, "Hello! How can I help?", resp.Content)
	require.Equal(t, "stop", resp.FinishReason)
	require.Equal(t, &Usage{PromptTokens: 19, CompletionTokens: 7, TotalTokens: 26}, resp.Usage)
	require.Empty(t, resp.ToolCalls)

	reqs := r.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer sk-test", reqs[0].header.Get("Authorization"))
	require.Equal(t, "1", reqs[0].header.Get("X-Extra"))
	b := reqs[0].body
	require.Equal(t, true, b["stream"])
	require.Equal(t, map[string]any{"include_usage": true}, b["stream_options"])
	require.Equal(t, "gpt-4o-mini", b["model"])
	require.InDelta(t, 0.2, b["temperature"], 1e-9)
	require.EqualValues(t, 100, b["max_completion_tokens"])
	msgs := b["messages"].([]any)
	require.Len(t, msgs, 5)
	require.Equal(t, "system", msgs[0].(map[string]any)["role"])
	asst := msgs[2].(map[string]any)
	require.NotContains(t, asst, "content")
	tc := asst["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "function", tc["type"])
	require.Equal(t, map[string]any{"name": "calculator", "arguments": `{"expression":"6*7"}`}, tc["function"])
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "c2", "content": "error: no clock"}, msgs[4])
	fn := b["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)
	require.Equal(t, "calculator", fn["name"])
	require.Equal(t, []any{"expression"}, fn["parameters"].(map[string]any)["required"])
}

func TestOpenAIToolCallsSplitOverChunks(t *testing.T) {
	t.Parallel()
	p := newOpenAITest(t, newReplay(t, "openai/tool_calls.http"), OpenAIConfig{})
	var text strings.Builder
	resp, err := p.Stream(context.Background(), conversation, func(s string) { text.WriteString(s) })
	require.NoError(t, err)
	require.Empty(t, text.String())
	require.Equal(t, "tool_calls", resp.FinishReason)
	require.Equal(t, []ToolCall{
		{ID: "call_Qm3sXbV1pN8kT2rY7wZ4cL9d", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_Hk7bN2vX5mQ9sW1pL4rT8cY3", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`},
	}, resp.ToolCalls)
	require.Equal(t, 158, resp.Usage.TotalTokens)
}

func TestAnthropicStreamsText(t *testing.T) {
	t.Parallel()
	r := newReplay(t, "anthropic/text.http")
	p := newAnthropicTest(t, r, AnthropicConfig{APIKey: "sk-ant-test"})
	req := conversation
	req.Model = "claude-sonnet-4-5"
	var got []string
	resp, err := p.Stream(context.Background(), req, func(s string) { got = append(got, s) })
	require.NoError(t, err)
	require.Equal(t, []string{"Hello", "! How can I help", " you today?"}, got)
	require.Equal(t, "Hello! How can I help you today?", resp.Content)
	require.Equal(t, "end_turn", resp.FinishReason)
	require.Equal(t, &Usage{PromptTokens: 21, CompletionTokens: 12, TotalTokens: 33}, resp.Usage)

	reqs := r.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "sk-ant-test", reqs[0].header.Get("X-Api-Key"))
	require.NotEmpty(t, reqs[0].header.Get("Anthropic-Version"))
	b := reqs[0].body
	require.Equal(t, true, b["stream"])
	require.Equal(t, "claude-sonnet-4-5", b["model"])
	require.EqualValues(t, 4096, b["max_tokens"], "the Messages API needs max_tokens: the default")
	require.Equal(t, []any{map[string]any{"type": "text", "text": "be brief"}}, b["system"])
	msgs := b["messages"].([]any)
	require.Len(t, msgs, 3, "user, assistant with tool_use, one user turn with both tool results")
	asst := msgs[1].(map[string]any)
	require.Equal(t, "assistant", asst["role"])
	use := asst["content"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"type": "tool_use", "id": "c1", "name": "calculator", "input": map[string]any{"expression": "6*7"}}, use)
	results := msgs[2].(map[string]any)["content"].([]any)
	require.Len(t, results, 2)
	require.Equal(t, "c2", results[1].(map[string]any)["tool_use_id"])
	require.Equal(t, true, results[1].(map[string]any)["is_error"])
	tool := b["tools"].([]any)[0].(map[string]any)
	require.Equal(t, "calculator", tool["name"])
	require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"expression": map[string]any{"type": "string"}},
		"required": []any{"expression"}, "additionalProperties": false}, tool["input_schema"])
}

func TestAnthropicToolUseSplitOverDeltas(t *testing.T) {
	t.Parallel()
	p := newAnthropicTest(t, newReplay(t, "anthropic/tool_use.http"), AnthropicConfig{})
	var text strings.Builder
	resp, err := p.Stream(context.Background(), conversation, func(s string) { text.WriteString(s) })
	require.NoError(t, err)
	require.Equal(t, "Let me work that out.", text.String())
	require.Equal(t, "Let me work that out.", resp.Content)
	require.Equal(t, "tool_use", resp.FinishReason)
	require.Len(t, resp.ToolCalls, 1)
	require.Equal(t, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", resp.ToolCalls[0].ID)
	require.Equal(t, "calculator", resp.ToolCalls[0].Name)
	require.JSONEq(t, `{"expression":"6*7"}`, resp.ToolCalls[0].Arguments)
	require.Equal(t, 561, resp.Usage.TotalTokens)
}

// provider builds one of the two providers on a replay.
type providerCase struct {
	name  string
	dir   string
	build func(t *testing.T, r *replay, maxRetryDelay time.Duration) Provider
}

var providerCases = []providerCase{
	{"openai", "openai", func(t *testing.T, r *replay, d time.Duration) Provider {
		return newOpenAITest(t, r, OpenAIConfig{MaxRetryDelay: d})
	}},
	{"anthropic", "anthropic", func(t *testing.T, r *replay, d time.Duration) Provider {
		return newAnthropicTest(t, r, AnthropicConfig{MaxRetryDelay: d})
	}},
}

// A 429 with Retry-After: 1 is retried after that second, then streams.
func TestRateLimitedThenSucceeds(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			r := newReplay(t, pc.dir+"/rate_limited.http", pc.dir+"/text.http")
			resp, err := pc.build(t, r, 0).Stream(context.Background(), conversation, nil)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(resp.Content, "Hello!"), resp.Content)
			reqs := r.requests()
			require.Len(t, reqs, 2)
			// Without Retry-After the first backoff is at most 0.5 s.
			require.GreaterOrEqual(t, reqs[1].at.Sub(reqs[0].at), 900*time.Millisecond, "Retry-After: 1 was honoured")
		})
	}
}

// A Retry-After longer than MaxRetryDelay is not waited out: the error
// comes back at once with the hint, for the node's retry policy.
func TestRateLimitedBeyondMaxDelay(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			r := newReplay(t, pc.dir+"/rate_limited.http", pc.dir+"/text.http")
			_, err := pc.build(t, r, 100*time.Millisecond).Stream(context.Background(), conversation, nil)
			var le *Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, CodeRateLimited, le.ErrorCode())
			require.Equal(t, http.StatusTooManyRequests, le.Status)
			require.True(t, le.Retryable)
			require.Equal(t, time.Second, le.RetryAfter)
			require.Contains(t, strings.ToLower(le.Message), "rate limit")
			require.Len(t, r.requests(), 1)
		})
	}
}

// A connection that breaks mid-stream: the text so far was streamed, the
// error is retryable llm_unavailable.
func TestDisconnectMidStream(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			r := newReplay(t, pc.dir+"/disconnect.http")
			var text strings.Builder
			_, err := pc.build(t, r, 0).Stream(context.Background(), conversation, func(s string) { text.WriteString(s) })
			var le *Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, CodeUnavailable, le.Code)
			require.True(t, le.Retryable)
			require.Equal(t, "Hello", text.String())
			require.Len(t, r.requests(), 1, "a stream that started is not retried (its text was delivered)")
		})
	}
}

func TestAnthropicErrorEventInStream(t *testing.T) {
	t.Parallel()
	p := newAnthropicTest(t, newReplay(t, "anthropic/overloaded_event.http"), AnthropicConfig{})
	var text strings.Builder
	_, err := p.Stream(context.Background(), conversation, func(s string) { text.WriteString(s) })
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeUnavailable, le.Code)
	require.True(t, le.Retryable)
	require.Contains(t, le.Message, "Overloaded")
	require.Equal(t, "Hel", text.String())
}

func TestOpenAIErrorStatuses(t *testing.T) {
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
		{"server", 503, `upstream overloaded`, CodeUnavailable, true, "upstream overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				w.Header().Set("Retry-After-Ms", "1")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			p, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			require.NoError(t, err)
			_, err = p.Stream(context.Background(), Request{Model: "m"}, nil)
			var le *Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, tc.code, le.ErrorCode())
			require.Equal(t, tc.status, le.Status)
			require.Equal(t, tc.retryable, le.Retryable)
			require.Contains(t, le.Error(), tc.msg)
			want := 1
			if tc.retryable {
				want = 3 // MaxRetries defaults to 2
			}
			mu.Lock()
			require.Equal(t, want, calls)
			mu.Unlock()
		})
	}
}

// Cancelling the context stops the HTTP stream: the server sees its
// request end, and Stream returns the cancel's cause.
func TestCancelStopsTheStream(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			_, body := readTranscript(t, pc.dir+"/text.http")
			// The events up to the first text.
			var first [][]byte
			for _, ev := range bytes.SplitAfter(body, []byte("\n\n")) {
				first = append(first, ev)
				if bytes.Contains(ev, []byte("Hello")) {
					break
				}
			}
			serverSawCancel := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range first {
					_, _ = w.Write(ev)
				}
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				close(serverSawCancel)
			}))
			t.Cleanup(srv.Close)
			var p Provider
			var err error
			if pc.name == "openai" {
				p, err = NewOpenAI(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			} else {
				p, err = NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			}
			require.NoError(t, err)
			ctx, cancel := context.WithCancelCause(context.Background())
			cause := errors.New("user cancelled")
			_, err = p.Stream(ctx, conversation, func(string) { cancel(cause) })
			require.ErrorIs(t, err, cause)
			select {
			case <-serverSawCancel:
			case <-time.After(10 * time.Second):
				t.Fatal("the server's request did not end")
			}
		})
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": keep-alive\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	p, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client(), IdleTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = p.Stream(context.Background(), Request{Model: "m"}, nil)
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeTimeout, le.Code)
}

// Credentials come only from the configuration: keys in the process
// environment, which the SDKs would read by default, are never sent.
func TestNoAmbientCredentials(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-ambient")
	t.Setenv("OPENAI_ORG_ID", "org-ambient")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-ambient")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "ambient")
	for _, pc := range providerCases {
		r := newReplay(t, pc.dir+"/text.http")
		_, err := pc.build(t, r, 0).Stream(context.Background(), conversation, nil)
		require.NoError(t, err)
		h := r.requests()[0].header
		for k, vs := range h {
			for _, v := range vs {
				require.NotContains(t, v, "ambient", "%s: header %s", pc.name, k)
			}
		}
		require.Empty(t, h.Get("Authorization"), pc.name)
		require.Empty(t, h.Get("X-Api-Key"), pc.name)
	}
}

// BenchmarkStreamReplay measures one streamed answer through each SDK
// (the text transcripts: 5 OpenAI chunks, 9 Anthropic events) from a
// local httptest server: request, SSE decoding and accumulation.
func BenchmarkStreamReplay(b *testing.B) {
	for _, pc := range []string{"openai", "anthropic"} {
		b.Run(pc, func(b *testing.B) {
			resp, body := readTranscript(b, pc+"/text.http")
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			var p Provider
			var err error
			if pc == "openai" {
				p, err = NewOpenAI(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			} else {
				p, err = NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			}
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Stream(context.Background(), conversation, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
