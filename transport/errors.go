package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// Error codes of the wire contract ({"error":{"code",...}}).
const (
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidGraph     = "invalid_graph"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeUnauthorized     = "unauthorized"
	CodePayloadTooLarge  = "payload_too_large"
	CodeRateLimited      = "rate_limited"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeInternal         = "internal"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnavailable      = "unavailable"
)

// Error is an API error: the HTTP status and the JSON body
// {"error":{"code","message","details"}}. Handlers return it (or any error
// the table in apiError knows) and the error handler writes it.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
	// RetryAfter, when positive, becomes a Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// errorBody is the JSON shape of every non-2xx answer.
type errorBody struct {
	Error *Error `json:"error"`
}

func newError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeInvalidJSON, format, args...)
}

func notFound(format string, args ...any) *Error {
	return newError(http.StatusNotFound, CodeNotFound, format, args...)
}

func conflict(format string, args ...any) *Error {
	return newError(http.StatusConflict, CodeConflict, format, args...)
}

// apiError is THE table mapping errors to status codes and wire codes.
// Unknown errors are 500 internal with a generic message: the error text
// (which may carry internals) is logged, never sent.
func apiError(err error) *Error {
	var (
		e    *Error
		ce   *chat.Error
		ge   *runtime.GraphError
		busy *runcontrol.BusyError
		he   *echo.HTTPError
	)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &ce):
		return chatError(ce)
	case errors.As(err, &ge):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: "the graph is invalid",
			Details: diagnosticsOrEmpty(ge.Diagnostics)}
	case errors.As(err, &busy):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "the chat has an active run",
			Details: map[string]any{"runIds": busy.RunIDs}}
	case errors.As(err, &he):
		return httpError(he)
	case errors.Is(err, chat.ErrNotFound), errors.Is(err, runtime.ErrRunNotFound):
		return notFound("%s", clientText(err, chat.ErrNotFound, runtime.ErrRunNotFound))
	case errors.Is(err, chat.ErrConflict), errors.Is(err, runtime.ErrRunExists),
		errors.Is(err, runtime.ErrRunNotResumable), errors.Is(err, runtime.ErrInterruptNotFound),
		errors.Is(err, runcontrol.ErrAlreadyBound):
		return conflict("%s", clientText(err, chat.ErrConflict, runtime.ErrRunExists, runtime.ErrRunNotResumable,
			runtime.ErrInterruptNotFound, runcontrol.ErrAlreadyBound))
	case errors.Is(err, runtime.ErrUnknownEntry), errors.Is(err, runcontrol.ErrInvalidStrategy),
		errors.Is(err, runcontrol.ErrInvalidScope):
		return badRequest("%s", err.Error())
	case errors.Is(err, chat.ErrTooManyChats):
		return &Error{Status: http.StatusTooManyRequests, Code: CodeQuotaExceeded,
			Message: err.Error() + "; delete chats to create more"}
	case errors.Is(err, chat.ErrTooManyRuns):
		return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Message: err.Error(), RetryAfter: 1}
	case errors.Is(err, chat.ErrShuttingDown), errors.Is(err, runcontrol.ErrClosed):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: chat.ErrShuttingDown.Error(), RetryAfter: 1}
	case errors.Is(err, chat.ErrControlUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: chat.ErrControlUnavailable.Error(), RetryAfter: 1}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the request timed out", RetryAfter: 1}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// clientText is err's text from where the first of sentinels that err
// wraps begins ("not found: message m_1"): what the stores and the kernel
// put in front of an error they pass up — where it came from, "runtime:
// run r_1: store: sqlite store: write batches: ..." — is not for a
// client. The sentinel is found where an error wrapped it (at the start
// of the text or after ": "); without that, the whole text.
func clientText(err error, sentinels ...error) string {
	text := err.Error()
	for _, sen := range sentinels {
		if !errors.Is(err, sen) {
			continue
		}
		word := sen.Error()
		for i := 0; i+len(word) <= len(text); {
			j := strings.Index(text[i:], word)
			if j < 0 {
				break
			}
			at := i + j
			if at == 0 || strings.HasSuffix(text[:at], ": ") {
				return text[at:]
			}
			i = at + 1
		}
	}
	return text
}

// chatError maps a request the chat service refused.
func chatError(ce *chat.Error) *Error {
	switch ce.Code {
	case chat.CodeInvalidGraph:
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: ce.Message, Details: ce.Details}
	case chat.CodeConflict:
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: ce.Message, Details: ce.Details}
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: ce.Message, Details: ce.Details}
}

// alreadyContinued words the refusal of a continue (a resume, a tool
// result, continue_message) whose message another request continued
// first. The chat service refuses it in one of two ways: a *chat.Error
// when it already sees the newer run, or, when both requests saw the
// message before either claimed it, the store's lost claim — a
// chat.ErrConflict whose text is the store's (and, when the claim joined
// the run's first commit, the runtime's) error chain, never for a client.
// Both answer the same 409, naming the run that won in details.runIds;
// nil for any other error, which apiError maps as usual.
func (s *Server) alreadyContinued(ctx context.Context, req chat.Request, err error) *Error {
	if req.Kind != chat.KindContinueMessage {
		return nil
	}
	var ce *chat.Error
	switch {
	case errors.As(err, &ce):
		// Only the service's "already continued" refusal: the message has
		// another run than the one resumed (its other conflicts — a run
		// that is not waiting, an interrupt answered — keep their text).
		if ce.Code != chat.CodeConflict || req.FromRunID == "" {
			return nil
		}
	case errors.Is(err, chat.ErrConflict):
	default:
		return nil
	}
	chatID, msgID := req.ChatID, req.MessageID
	if req.FromRunID != "" {
		if rec, gerr := s.store.GetRun(ctx, req.FromRunID); gerr == nil {
			chatID = rec.ChatID
			msgID, _ = rec.Attrs["messageId"].(string)
		}
	}
	var winner string
	if m, gerr := s.chats.GetMessage(ctx, chatID, msgID); gerr == nil && m.RunID != req.FromRunID {
		winner = m.RunID
	}
	if ce != nil && winner == "" {
		return nil // not a message continued since: the service's own refusal stands
	}
	subject, did, doing := "message "+msgID, "continued", "continuing"
	if req.FromRunID != "" {
		subject, did, doing = "run "+req.FromRunID, "resumed", "resuming"
	}
	if winner == "" { // the message could not be read again
		return conflict("%s was already continued by another request: follow that request's run instead of %s again", subject, doing)
	}
	e := conflict("%s was already continued by run %s: another request %s it first; follow run %s instead of %s again",
		subject, winner, did, winner, doing)
	e.Details = map[string]any{"runIds": []string{winner}}
	return e
}

func httpError(he *echo.HTTPError) *Error {
	msg := http.StatusText(he.Code)
	if s, ok := he.Message.(string); ok && s != "" {
		msg = s
	}
	switch he.Code {
	case http.StatusNotFound:
		return &Error{Status: he.Code, Code: CodeNotFound, Message: msg}
	case http.StatusMethodNotAllowed:
		return &Error{Status: he.Code, Code: CodeMethodNotAllowed, Message: msg}
	case http.StatusRequestEntityTooLarge:
		return &Error{Status: he.Code, Code: CodePayloadTooLarge, Message: "the request body is too large"}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or invalid bearer token"}
	case http.StatusTooManyRequests:
		return &Error{Status: he.Code, Code: CodeRateLimited, Message: "too many requests", RetryAfter: 1}
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: msg}
	case http.StatusServiceUnavailable:
		return &Error{Status: he.Code, Code: CodeUnavailable, Message: msg, RetryAfter: 1}
	}
	if he.Code >= 500 {
		return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	return &Error{Status: he.Code, Code: CodeInvalidJSON, Message: msg}
}

func diagnosticsOrEmpty(ds runtime.Diagnostics) runtime.Diagnostics {
	if ds == nil {
		return runtime.Diagnostics{}
	}
	return ds
}

// errorHandler is echo's HTTPErrorHandler: every error becomes the JSON
// error body; 5xx are logged with the real error, never sent.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if c.Request().Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away mid-request: nobody reads an answer, and it
		// is not the server's failure.
		s.log.Debug("client went away", "method", c.Request().Method, "path", c.Path(), "err", err)
		return
	}
	e := apiError(err)
	if e.Status >= 500 {
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chatgraph"`)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(e.Status)
		return
	}
	if isOpenAIPath(c) {
		_ = c.JSON(e.Status, oaiErrorBody(e))
		return
	}
	_ = c.JSON(e.Status, errorBody{Error: e})
}

// errorJSON encodes err as the wire error object (for WebSocket frames).
func errorJSON(err error) *Error { return apiError(err) }

// WebSocket close codes: why the server closed a connection.
const (
	CloseUnauthorized = websocket.StatusCode(4001) // bad or missing token
	CloseBadFrame     = websocket.StatusCode(4400) // a frame that is not a JSON object
	CloseTooBig       = websocket.StatusMessageTooBig
	CloseTooSlow      = websocket.StatusPolicyViolation // the send queue overflowed
	CloseShutdown     = websocket.StatusGoingAway
	// The reader's and the pinger's.
	CloseProtocolError = websocket.StatusProtocolError           // a frame RFC 6455 does not allow
	CloseInvalidUTF8   = websocket.StatusInvalidFramePayloadData // a text frame that is not UTF-8
	ClosePingTimeout   = websocket.StatusCode(4408)              // no pong within WSPing of a ping
)

// mustJSON encodes v (values built by this package always encode).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorBody{Error: &Error{Code: CodeInternal, Message: "encoding failed"}})
	}
	return b
}
