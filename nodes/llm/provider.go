package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
)

// What the SDK-backed providers (OpenAI, Anthropic) share: the idle
// watchdog of a stream and the mapping of SDK errors onto *Error.

var errIdle = &Error{Code: CodeTimeout, Message: "stream idle timeout", Retryable: true}

// streamWatch cancels a stream's context with errIdle when nothing
// arrives for the idle duration.
type streamWatch struct {
	mu     sync.Mutex
	timer  *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
}

func idleWatch(ctx context.Context, idle time.Duration) (context.Context, *streamWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &streamWatch{idle: idle, cancel: cancel}
	w.timer = time.AfterFunc(idle, func() { cancel(errIdle) })
	return ctx, w
}

// alive pushes the deadline back after a stream event.
func (w *streamWatch) alive() {
	w.mu.Lock()
	w.timer.Reset(w.idle)
	w.mu.Unlock()
}

func (w *streamWatch) stop() {
	w.mu.Lock()
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel(context.Canceled)
}

// classify maps an SDK failure onto *Error, or returns the context's
// cause when the stream ended because ctx did (a cancel, a deadline, or
// errIdle).
func (w *streamWatch) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var le *Error
	if errors.As(err, &le) {
		return le
	}
	var oe *openai.Error
	if errors.As(err, &oe) {
		return apiError(oe.StatusCode, oe.Response, oe.RawJSON(), err)
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return apiError(ae.StatusCode, ae.Response, ae.RawJSON(), err)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return &Error{Code: CodeProtocol, Message: "bad stream event: " + err.Error(), Err: err}
	}
	if msg, ok := strings.CutPrefix(err.Error(), "received error while streaming: "); ok {
		// An error event inside a 200 stream.
		return streamEventError([]byte(msg), err)
	}
	// The connection failed or broke off mid-stream.
	return &Error{Code: CodeUnavailable, Message: err.Error(), Retryable: true, Err: err}
}

// apiError classifies an HTTP error answer (or an error event inside a
// stream, whose status is the stream's 200).
func apiError(status int, resp *http.Response, body string, err error) *Error {
	if status/100 == 2 {
		return streamEventError([]byte(body), err)
	}
	e := &Error{Status: status, Message: errorMessage([]byte(body)), Err: err}
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
	if e.Retryable && resp != nil {
		e.RetryAfter = retryAfter(resp.Header)
	}
	return e
}

// streamEventError classifies an error object that arrived inside a
// stream: Anthropic's {"type":"error","error":{"type":"overloaded_error"}},
// OpenAI's {"error":{"message","type":"server_error"}}.
func streamEventError(body []byte, err error) *Error {
	e := &Error{Code: CodeUnavailable, Retryable: true, Message: errorMessage(body), Err: err}
	switch errorType(body) {
	case "rate_limit_error":
		e.Code = CodeRateLimited
	case "invalid_request_error":
		e.Code, e.Retryable = CodeBadRequest, false
	case "authentication_error", "permission_error":
		e.Code, e.Retryable = CodeAuth, false
	}
	return e
}

func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

type errorBody struct {
	Error json.RawMessage `json:"error"`
}

type errorObject struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}

// errorMessage extracts a message from an error body: {"error":{"message",
// "type"}} (OpenAI, Anthropic), the {"error":"..."} some servers send, or
// the body text itself.
func errorMessage(body []byte) string {
	var env errorBody
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		var s string
		if json.Unmarshal(env.Error, &s) == nil && s != "" {
			return s
		}
		var o errorObject
		if json.Unmarshal(env.Error, &o) == nil && o.Message != "" {
			if o.Type != "" {
				return o.Message + " (" + o.Type + ")"
			}
			return o.Message
		}
	}
	var o errorObject // the error object itself (openai-go keeps only it)
	if json.Unmarshal(body, &o) == nil && o.Message != "" {
		if o.Type != "" && o.Type != "error" {
			return o.Message + " (" + o.Type + ")"
		}
		return o.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

func errorType(body []byte) string {
	var env errorBody
	var o errorObject
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 && json.Unmarshal(env.Error, &o) == nil {
		return o.Type
	}
	if json.Unmarshal(body, &o) == nil {
		return o.Type
	}
	return ""
}
