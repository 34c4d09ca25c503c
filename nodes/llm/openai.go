package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// OpenAIConfig configures an OpenAI-compatible client. Zero fields take
// the documented defaults.
type OpenAIConfig struct {
	// BaseURL is the API root that /chat/completions is appended to, e.g.
	// https://api.openai.com/v1 or http://localhost:11434/v1. Required.
	BaseURL string
	// APIKey is sent as a Bearer token when not empty (local servers
	// usually need none).
	APIKey string
	// Headers are added to every request (e.g. OpenAI-Organization).
	Headers map[string]string
	// HTTPClient sends requests (default: a client without a global
	// timeout; streams are bounded by ctx and IdleTimeout).
	HTTPClient *http.Client
	// MaxRetries is how many times a request that failed before any
	// output arrived (429, 5xx, 408, network error) is retried (default 2;
	// negative: never).
	MaxRetries int
	// RetryDelay is the first backoff delay, doubled each retry with
	// jitter (default 500ms). A server's Retry-After wins when longer.
	RetryDelay time.Duration
	// MaxRetryDelay caps any single delay, Retry-After included (default 20s).
	MaxRetryDelay time.Duration
	// IdleTimeout ends a stream that sends nothing for this long (default 90s).
	IdleTimeout time.Duration
	// MaxLineBytes bounds one stream line (default 1 MiB).
	MaxLineBytes int
	// MaxErrorBytes bounds how much of an error body is read (default 64 KiB).
	MaxErrorBytes int64
}

// OpenAI is a Provider speaking the OpenAI chat completions API with
// stream: true. It is safe for concurrent use.
type OpenAI struct {
	cfg OpenAIConfig
	url string
}

// NewOpenAI returns a client for cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("llm: OpenAIConfig.BaseURL is required")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 2
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 500 * time.Millisecond
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 20 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = 1 << 20
	}
	if cfg.MaxErrorBytes <= 0 {
		cfg.MaxErrorBytes = 64 << 10
	}
	return &OpenAI{cfg: cfg, url: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"}, nil
}

// Wire format (the subset chatgraph uses).

type wireRequest struct {
	Model         string         `json:"model"`
	Messages      []wireMessage  `json:"messages"`
	Tools         []wireTool     `json:"tools,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireToolSpec `json:"function"`
}

type wireToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type wireChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"delta"`
		// Message is set in non-streamed answers.
		Message *struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func toWire(req Request) wireRequest {
	w := wireRequest{Model: req.Model, Temperature: req.Temperature, MaxTokens: req.MaxTokens, Stream: true,
		StreamOptions: &streamOptions{IncludeUsage: true}}
	w.Messages = make([]wireMessage, 0, len(req.Messages))
	for _, m := range req.Messages {
		c := m.Content
		wm := wireMessage{Role: m.Role, Content: &c, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, wireToolCall{ID: tc.ID, Type: "function",
				Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		}
		if len(wm.ToolCalls) > 0 && c == "" {
			wm.Content = nil
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireToolSpec{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return w
}

// Stream implements Provider.
func (c *OpenAI) Stream(ctx context.Context, req Request, onText func(string)) (Response, error) {
	body, err := json.Marshal(toWire(req))
	if err != nil {
		return Response{}, &Error{Code: CodeBadRequest, Message: "encode request: " + err.Error(), Err: err}
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, body)
		if err == nil {
			defer resp.Body.Close()
			return c.read(ctx, resp, onText)
		}
		var le *Error
		if !errors.As(err, &le) || !le.Retryable || attempt >= c.cfg.MaxRetries || ctx.Err() != nil {
			return Response{}, err
		}
		d := c.cfg.RetryDelay << attempt
		d -= time.Duration(rand.Int64N(int64(d)/4 + 1))
		if le.RetryAfter > d {
			d = le.RetryAfter
		}
		d = min(d, c.cfg.MaxRetryDelay)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Response{}, context.Cause(ctx)
		}
	}
}

// send posts the request and returns a 2xx response, or a classified error.
func (c *OpenAI) send(ctx context.Context, body []byte) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Code: CodeBadRequest, Message: err.Error(), Err: err}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	for k, v := range c.cfg.Headers {
		hr.Header.Set(k, v)
	}
	resp, err := c.cfg.HTTPClient.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, &Error{Code: CodeUnavailable, Message: err.Error(), Retryable: true, Err: err}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxErrorBytes))
	return nil, statusError(resp.StatusCode, resp.Header, b)
}

// statusError classifies a non-2xx answer.
func statusError(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, Message: errorMessage(body)}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	switch {
	case status == http.StatusTooManyRequests:
		e.Code, e.Retryable = CodeRateLimited, true
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		e.Code, e.Retryable = CodeTimeout, true
	case status >= 500:
		e.Code, e.Retryable = CodeUnavailable, true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Code = CodeAuth
	case status == http.StatusNotFound:
		e.Code = CodeNotFound
	default:
		e.Code = CodeBadRequest
	}
	if e.Retryable {
		e.RetryAfter = retryAfter(h.Get("Retry-After"))
	}
	return e
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// errorMessage extracts a message from an error body: OpenAI's
// {"error":{"message":...}}, the {"error":"..."} some servers send, or
// the body text itself.
func errorMessage(body []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		if m := apiErrorText(env.Error); m != "" {
			return m
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

func apiErrorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(raw, &o) == nil {
		m := o.Message
		if o.Type != "" {
			m += " (" + o.Type + ")"
		}
		return strings.TrimSpace(m)
	}
	return ""
}

var errIdle = &Error{Code: CodeTimeout, Message: "stream idle timeout", Retryable: true}

// read consumes a 2xx answer: an SSE stream, or a plain JSON completion
// from a server that ignored stream: true.
func (c *OpenAI) read(ctx context.Context, resp *http.Response, onText func(string)) (Response, error) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/json" {
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.cfg.MaxLineBytes)+1))
		if err != nil {
			return Response{}, readErr(ctx, err)
		}
		var acc Accumulator
		if err := acc.AddJSON(b); err != nil {
			return Response{}, err
		}
		out := acc.Response()
		if onText != nil && out.Content != "" {
			onText(out.Content)
		}
		return out, nil
	}
	// Bound the gaps between stream lines: the body read is cancelled
	// when nothing arrives for IdleTimeout.
	stop := make(chan struct{})
	defer close(stop)
	idle := time.NewTimer(c.cfg.IdleTimeout)
	defer idle.Stop()
	alive := make(chan struct{}, 1)
	timedOut := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-alive:
				if !idle.Stop() {
					select {
					case <-idle.C:
					default:
					}
				}
				idle.Reset(c.cfg.IdleTimeout)
			case <-idle.C:
				close(timedOut)
				resp.Body.Close()
				return
			}
		}
	}()
	body := &pingReader{r: resp.Body, ping: alive}
	var acc Accumulator
	err := readSSE(body, c.cfg.MaxLineBytes, func(data []byte) error {
		if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
			acc.done = true
			return errStreamDone
		}
		return acc.AddChunk(data, onText)
	})
	if err != nil {
		select {
		case <-timedOut:
			return Response{}, errIdle
		default:
		}
		var le *Error
		if errors.As(err, &le) {
			return Response{}, err
		}
		return Response{}, readErr(ctx, err)
	}
	if !acc.done && acc.chunks == 0 {
		return Response{}, &Error{Code: CodeProtocol, Message: "empty stream", Retryable: true}
	}
	return acc.Response(), nil
}

func readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return &Error{Code: CodeProtocol, Message: "read stream: " + err.Error(), Err: err}
}

type pingReader struct {
	r    io.Reader
	ping chan struct{}
}

func (p *pingReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		select {
		case p.ping <- struct{}{}:
		default:
		}
	}
	return n, err
}

// maxToolCalls bounds the tool calls one answer may carry.
const maxToolCalls = 128

// Accumulator assembles streamed chat completion chunks into a Response:
// text deltas are concatenated, tool call fragments are merged by index
// (arguments split over chunks are joined). The zero value is ready.
type Accumulator struct {
	content strings.Builder
	calls   map[int]*ToolCall
	finish  string
	usage   *Usage
	chunks  int
	done    bool
}

// AddChunk decodes one stream event's data and merges it; text deltas are
// passed to onText. An error object in the stream is returned as *Error.
func (a *Accumulator) AddChunk(data []byte, onText func(string)) error {
	var ch wireChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return &Error{Code: CodeProtocol, Message: "bad stream chunk: " + err.Error(), Err: err}
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		m := apiErrorText(ch.Error)
		if m == "" {
			m = string(ch.Error)
		}
		return &Error{Code: CodeUnavailable, Message: m, Retryable: true}
	}
	a.chunks++
	if ch.Usage != nil {
		a.usage = &Usage{PromptTokens: ch.Usage.PromptTokens, CompletionTokens: ch.Usage.CompletionTokens, TotalTokens: ch.Usage.TotalTokens}
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue // only the first choice is used
		}
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			a.content.WriteString(*c.Delta.Content)
			if onText != nil {
				onText(*c.Delta.Content)
			}
		}
		if err := a.addCalls(c.Delta.ToolCalls); err != nil {
			return err
		}
		if c.Message != nil {
			if c.Message.Content != nil {
				a.content.WriteString(*c.Message.Content)
			}
			if err := a.addCalls(c.Message.ToolCalls); err != nil {
				return err
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			a.finish = *c.FinishReason
		}
	}
	return nil
}

// AddJSON merges a complete (non-streamed) chat completion.
func (a *Accumulator) AddJSON(body []byte) error {
	if err := a.AddChunk(body, nil); err != nil {
		return err
	}
	a.done = true
	return nil
}

func (a *Accumulator) addCalls(tcs []wireToolCall) error {
	for k, tc := range tcs {
		idx := len(a.calls)
		switch {
		case tc.Index != nil:
			idx = *tc.Index
		case tc.ID != "":
			// No index (some servers): match by id, else a new call.
			for i, c := range a.calls {
				if c.ID == tc.ID {
					idx = i
				}
			}
		default:
			idx = k
		}
		if idx < 0 || idx >= maxToolCalls {
			return &Error{Code: CodeProtocol, Message: fmt.Sprintf("tool call index %d out of range", idx)}
		}
		if a.calls == nil {
			a.calls = map[int]*ToolCall{}
		}
		c := a.calls[idx]
		if c == nil {
			if len(a.calls) >= maxToolCalls {
				return &Error{Code: CodeProtocol, Message: "too many tool calls"}
			}
			c = &ToolCall{}
			a.calls[idx] = c
		}
		if c.ID == "" {
			c.ID = tc.ID
		}
		if c.Name == "" {
			c.Name = tc.Function.Name
		}
		c.Arguments += tc.Function.Arguments
	}
	return nil
}

// Response returns what was accumulated. Tool calls come in index order;
// a call without an id gets "call_<index>".
func (a *Accumulator) Response() Response {
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
