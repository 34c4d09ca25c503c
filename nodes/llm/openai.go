package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAIConfig configures an OpenAI-compatible provider. Zero fields take
// the documented defaults.
type OpenAIConfig struct {
	// BaseURL is the API root that /chat/completions is appended to, e.g.
	// https://api.openai.com/v1 (the default), http://localhost:11434/v1
	// (Ollama) or https://NAME.openai.azure.com/openai/v1 (Azure OpenAI).
	BaseURL string
	// APIKey is sent as a Bearer token when not empty (local servers
	// usually need none). The process environment (OPENAI_API_KEY and
	// friends) is never read: what is not configured is not sent.
	APIKey string
	// Headers are added to every request (e.g. Azure's api-key).
	Headers map[string]string
	// HTTPClient sends requests (default: the SDK's client; streams are
	// bounded by ctx and IdleTimeout).
	HTTPClient *http.Client
	// MaxRetries is how many times a request answered 408, 409, 429 or
	// 5xx, or that failed to connect, is retried before any output
	// (default 2; negative: never). Backoff is exponential with jitter
	// from 0.5s; Retry-After / Retry-After-Ms win.
	MaxRetries int
	// MaxRetryDelay caps one retry delay (default 20s). A Retry-After
	// longer than that is not waited for: the error is returned with
	// Error.RetryAfter set, for node retry policies.
	MaxRetryDelay time.Duration
	// IdleTimeout ends a stream that sends nothing for this long
	// (default 90s) with llm_timeout.
	IdleTimeout time.Duration
}

// OpenAI is a Provider speaking the OpenAI chat completions API with
// streaming, through the official SDK (github.com/openai/openai-go).
// It is safe for concurrent use.
type OpenAI struct {
	client openai.Client
	idle   time.Duration
}

// NewOpenAI returns a provider for cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	base := cfg.BaseURL
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, errors.New("llm: OpenAIConfig.BaseURL must be an http or https URL")
	}
	opts := []option.RequestOption{
		option.WithBaseURL(strings.TrimRight(base, "/") + "/"),
		// Override whatever the SDK read from the environment.
		option.WithAPIKey(cfg.APIKey), option.WithAdminAPIKey(""),
		option.WithHeaderDel("OpenAI-Organization"), option.WithHeaderDel("OpenAI-Project"),
		option.WithMaxRetries(retries(cfg.MaxRetries)),
		option.WithMaxRetryDelay(orDefault(cfg.MaxRetryDelay, 20*time.Second)),
		option.WithMiddleware(normalizeErrorBody),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return &OpenAI{client: openai.NewClient(opts...), idle: orDefault(cfg.IdleTimeout, 90*time.Second)}, nil
}

func retries(n int) int {
	switch {
	case n == 0:
		return 2
	case n < 0:
		return 0
	}
	return n
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// openAIParams maps a Request onto the chat completions parameters.
func openAIParams(req Request) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:         req.Model,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.MaxTokens > 0 {
		p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case RoleAssistant:
			am := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = param.NewOpt(m.Content)
			}
			for _, tc := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments}}})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		}
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schemaObject(t.Parameters)}
		if t.Description != "" {
			fd.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	return p
}

// schemaObject decodes a tool's JSON Schema (an empty object schema when
// none or not an object).
func schemaObject(raw json.RawMessage) map[string]any {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		m = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return m
}

// Stream implements Provider.
func (c *OpenAI) Stream(ctx context.Context, req Request, onText func(string)) (Response, error) {
	ctx, watch := idleWatch(ctx, c.idle)
	defer watch.stop()
	resp, err := collectOpenAI(c.client.Chat.Completions.NewStreaming(ctx, openAIParams(req)), watch.alive, onText)
	if err != nil {
		return Response{}, watch.classify(ctx, err)
	}
	return resp, nil
}

// collectOpenAI reads a chat completion stream to its end: text deltas go
// to onText, alive is called per chunk.
func collectOpenAI(stream *ssestream.Stream[openai.ChatCompletionChunk], alive func(), onText func(string)) (Response, error) {
	defer stream.Close()
	var acc chunkAccumulator
	for stream.Next() {
		alive()
		if err := acc.add(stream.Current(), onText); err != nil {
			return Response{}, err
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, err
	}
	if acc.chunks == 0 {
		return Response{}, &Error{Code: CodeProtocol, Message: "empty stream", Retryable: true}
	}
	return acc.response(), nil
}

// maxToolCalls bounds the tool calls one answer may carry.
const maxToolCalls = 128

// chunkAccumulator assembles streamed chat completion chunks: text deltas
// are concatenated, tool call fragments merged by index (arguments split
// over chunks are joined). The zero value is ready.
type chunkAccumulator struct {
	content strings.Builder
	calls   map[int]*ToolCall
	finish  string
	usage   *Usage
	chunks  int
}

func (a *chunkAccumulator) add(ch openai.ChatCompletionChunk, onText func(string)) error {
	a.chunks++
	if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens > 0 {
		a.usage = &Usage{PromptTokens: int(ch.Usage.PromptTokens), CompletionTokens: int(ch.Usage.CompletionTokens),
			TotalTokens: int(ch.Usage.TotalTokens)}
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue // only the first choice is used
		}
		if s := c.Delta.Content; s != "" {
			a.content.WriteString(s)
			if onText != nil {
				onText(s)
			}
		}
		for _, tc := range c.Delta.ToolCalls {
			idx := int(tc.Index)
			if idx < 0 || idx >= maxToolCalls {
				return &Error{Code: CodeProtocol, Message: "tool call index " + strconv.FormatInt(tc.Index, 10) + " out of range"}
			}
			if a.calls == nil {
				a.calls = map[int]*ToolCall{}
			}
			call := a.calls[idx]
			if call == nil {
				call = &ToolCall{}
				a.calls[idx] = call
			}
			if call.ID == "" {
				call.ID = tc.ID
			}
			if call.Name == "" {
				call.Name = tc.Function.Name
			}
			call.Arguments += tc.Function.Arguments
		}
		if c.FinishReason != "" {
			a.finish = c.FinishReason
		}
	}
	return nil
}

// response returns what was accumulated. Tool calls come in index order;
// a call without an id gets "call_<index>", empty arguments become {}.
func (a *chunkAccumulator) response() Response {
	r := Response{Content: a.content.String(), FinishReason: a.finish, Usage: a.usage}
	idx := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		c := *a.calls[i]
		if c.ID == "" {
			c.ID = "call_" + strconv.Itoa(i)
		}
		if strings.TrimSpace(c.Arguments) == "" {
			c.Arguments = "{}"
		}
		r.ToolCalls = append(r.ToolCalls, c)
	}
	return r
}

// maxErrorBytes bounds how much of an error answer is read.
const maxErrorBytes = 64 << 10

// normalizeErrorBody rewrites an error answer that is not OpenAI's
// {"error":{"message":...}} — Ollama's {"error":"..."}, a proxy's plain
// text — into that shape, so the SDK reports its message.
func normalizeErrorBody(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(r)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	_ = resp.Body.Close()
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil || len(env.Error) == 0 || env.Error[0] != '{' {
		msg := errorMessage(b)
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		b, _ = json.Marshal(map[string]any{"error": map[string]string{"message": msg}})
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	return resp, nil
}
