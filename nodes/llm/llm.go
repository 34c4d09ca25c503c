package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of a conversation sent to a model.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and Name identify the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	Name       string `json:"name,omitempty"`
}

// ToolCall is a model's request to call a tool. Arguments is the raw JSON
// text the model produced (not necessarily valid JSON).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool offered to the model. Parameters is a JSON
// Schema of the arguments object.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Request is one chat completion request.
type Request struct {
	// Model is the provider's own model name (after Models.Resolve).
	Model    string
	Messages []Message
	Tools    []ToolSpec
	// Temperature is sent when not nil.
	Temperature *float64
	// MaxTokens bounds the answer when > 0.
	MaxTokens int
	// TokenDelay slows a provider that simulates streaming (Echo) between
	// tokens; remote providers ignore it.
	TokenDelay time.Duration
}

// Response is a model's complete answer: text, tool calls, or both.
type Response struct {
	Content      string     `json:"content"`
	ToolCalls    []ToolCall `json:"toolCalls,omitempty"`
	FinishReason string     `json:"finishReason,omitempty"`
	Usage        *Usage     `json:"usage,omitempty"`
}

// Usage is token accounting when the provider reports it.
type Usage struct {
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
	TotalTokens      int `json:"totalTokens"`
}

// Provider is a chat model that streams. Implementations are safe for
// concurrent use.
type Provider interface {
	// Stream sends req and returns the complete answer. Text fragments are
	// passed to onText (when not nil) in order, on the calling goroutine,
	// as they arrive; tool calls are only returned complete. Stream honours
	// ctx and returns its cause when it ends early.
	Stream(ctx context.Context, req Request, onText func(string)) (Response, error)
}

// Error codes of provider failures (Error.Code).
const (
	CodeRateLimited  = "llm_rate_limited"
	CodeUnavailable  = "llm_unavailable"
	CodeTimeout      = "llm_timeout"
	CodeAuth         = "llm_auth"
	CodeNotFound     = "llm_not_found"
	CodeBadRequest   = "llm_bad_request"
	CodeProtocol     = "llm_protocol"
	CodeUnknownModel = "unknown_model"
)

// Error is a provider failure. Its Code is what node retry policies match
// (it has an ErrorCode method); Retryable says whether trying again later
// may succeed (rate limits, 5xx, timeouts, network errors).
type Error struct {
	Code      string
	Status    int // HTTP status, 0 when there was none
	Message   string
	Retryable bool
	// RetryAfter is the server's hint (Retry-After), 0 when none.
	RetryAfter time.Duration
	Err        error // underlying error, if any
}

// Error describes the failure with its code and, when there was one, the HTTP status.
func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return e.Code + ": " + e.Message
}

// ErrorCode returns Code; runtime retry policies read it.
func (e *Error) ErrorCode() string { return e.Code }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }
