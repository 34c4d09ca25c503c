package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"
)

// AnthropicConfig configures the Anthropic Messages API provider. Zero
// fields take the documented defaults.
type AnthropicConfig struct {
	// BaseURL is the API root (default https://api.anthropic.com).
	BaseURL string
	// APIKey is sent as x-api-key. The process environment
	// (ANTHROPIC_API_KEY, profiles) is never read.
	APIKey string
	// Headers are added to every request.
	Headers map[string]string
	// HTTPClient sends requests (default: the SDK's client).
	HTTPClient *http.Client
	// MaxRetries, MaxRetryDelay and IdleTimeout work as in OpenAIConfig
	// (defaults 2, 20s, 90s).
	MaxRetries    int
	MaxRetryDelay time.Duration
	IdleTimeout   time.Duration
	// DefaultMaxTokens is max_tokens when a request sets none; the
	// Messages API requires one (default 4096).
	DefaultMaxTokens int
}

// Anthropic is a Provider speaking the Anthropic Messages API with
// streaming, through the official SDK (github.com/anthropics/anthropic-sdk-go).
// It is safe for concurrent use.
type Anthropic struct {
	client    anthropic.Client
	idle      time.Duration
	maxTokens int
}

// NewAnthropic returns a provider for cfg.
func NewAnthropic(cfg AnthropicConfig) (*Anthropic, error) {
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(retries(cfg.MaxRetries)),
		option.WithMiddleware(capRetryAfter(orDefault(cfg.MaxRetryDelay, 20*time.Second))),
	}
	if cfg.BaseURL != "" {
		if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
			return nil, errors.New("llm: AnthropicConfig.BaseURL must be an http or https URL")
		}
		opts = append(opts, option.WithBaseURL(strings.TrimRight(cfg.BaseURL, "/")+"/"))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	mt := cfg.DefaultMaxTokens
	if mt <= 0 {
		mt = 4096
	}
	return &Anthropic{client: anthropic.NewClient(opts...), idle: orDefault(cfg.IdleTimeout, 90*time.Second), maxTokens: mt}, nil
}

// anthropicParams maps a Request onto the Messages API: system messages
// become the system prompt, consecutive tool results one user turn of
// tool_result blocks, tool calls tool_use blocks.
func (c *Anthropic) anthropicParams(req Request) anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{Model: req.Model, MaxTokens: int64(c.maxTokens)}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			if m.Content != "" {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				var input any = json.RawMessage(tc.Arguments)
				if !json.Valid([]byte(tc.Arguments)) {
					input = map[string]any{}
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			if len(blocks) > 0 {
				p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
			}
		case RoleTool:
			block := anthropic.NewToolResultBlock(m.ToolCallID, m.Content, strings.HasPrefix(m.Content, "error: "))
			if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == anthropic.MessageParamRoleUser && isToolResults(p.Messages[n-1]) {
				p.Messages[n-1].Content = append(p.Messages[n-1].Content, block)
			} else {
				p.Messages = append(p.Messages, anthropic.NewUserMessage(block))
			}
		default:
			if m.Content != "" {
				p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Content)))
			}
		}
	}
	for _, t := range req.Tools {
		s := schemaObject(t.Parameters)
		in := anthropic.ToolInputSchemaParam{Properties: s["properties"], ExtraFields: map[string]any{}}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					in.Required = append(in.Required, name)
				}
			}
		}
		for k, v := range s {
			switch k {
			case "type", "properties", "required":
			default:
				in.ExtraFields[k] = v
			}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	return p
}

func isToolResults(m anthropic.MessageParam) bool {
	for _, b := range m.Content {
		if b.OfToolResult == nil {
			return false
		}
	}
	return len(m.Content) > 0
}

// Stream implements Provider.
func (c *Anthropic) Stream(ctx context.Context, req Request, onText func(string)) (Response, error) {
	ctx, watch := idleWatch(ctx, c.idle)
	defer watch.stop()
	msg, err := collectAnthropic(c.client.Messages.NewStreaming(ctx, c.anthropicParams(req)), watch.alive, onText)
	if err != nil {
		return Response{}, watch.classify(ctx, err)
	}
	return anthropicResponse(msg), nil
}

// collectAnthropic reads a Messages stream to its message_stop: text
// deltas go to onText, alive is called per event.
func collectAnthropic(stream *ssestream.Stream[anthropic.MessageStreamEventUnion], alive func(), onText func(string)) (anthropic.Message, error) {
	defer stream.Close()
	var msg anthropic.Message
	stopped := false
	say := func(s string) {
		if s != "" && onText != nil {
			onText(s)
		}
	}
	for stream.Next() {
		alive()
		ev := stream.Current()
		if ev.Type == "message_start" && len(msg.Content) > 0 {
			// A second start would reset the message the text streamed
			// so far belongs to.
			return msg, &Error{Code: CodeProtocol, Message: "bad stream event: message_start after content"}
		}
		if err := msg.Accumulate(ev); err != nil {
			return msg, &Error{Code: CodeProtocol, Message: "bad stream event: " + err.Error(), Err: err}
		}
		// The text streamed is what the accumulated message keeps as
		// text (anthropicResponse): a delta into a block that is not a
		// text block is accumulated but is no part of the answer.
		switch ev.Type {
		case "message_start":
			// The API starts a message empty; text it came with is
			// text all the same.
			for _, b := range msg.Content {
				if b.Type == "text" {
					say(b.Text)
				}
			}
		case "content_block_start":
			if b := msg.Content[ev.Index]; b.Type == "text" {
				say(b.Text)
			}
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && msg.Content[ev.Index].Type == "text" {
				say(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return msg, err
	}
	if !stopped {
		// The connection ended without message_stop: the answer is cut.
		return msg, &Error{Code: CodeUnavailable, Retryable: true, Message: "stream ended before message_stop"}
	}
	return msg, nil
}

// anthropicResponse maps a complete message: text blocks joined, tool_use
// blocks as tool calls, usage with cache tokens counted as prompt tokens.
func anthropicResponse(msg anthropic.Message) Response {
	out := Response{FinishReason: string(msg.StopReason)}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := strings.TrimSpace(string(b.Input))
			if args == "" {
				args = "{}"
			}
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	out.Content = text.String()
	u := msg.Usage
	if prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens; prompt+u.OutputTokens > 0 {
		out.Usage = &Usage{PromptTokens: int(prompt), CompletionTokens: int(u.OutputTokens), TotalTokens: int(prompt + u.OutputTokens)}
	}
	return out
}

// capRetryAfter stops the SDK from waiting out a Retry-After longer than
// max (it would honour any): such an answer is returned at once, its
// hint kept in Error.RetryAfter for node retry policies.
func capRetryAfter(max time.Duration) option.Middleware {
	return func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if err == nil && resp.StatusCode >= 400 && retryAfter(resp.Header) > max {
			resp.Header.Set("x-should-retry", "false")
		}
		return resp, err
	}
}
