package chat

import "fmt"

// Code classifies a request the service refuses; the transport maps each
// to its status code (one table there).
type Code string

// Codes of refused requests.
const (
	// CodeInvalid: the request itself is wrong (400).
	CodeInvalid Code = "invalid"
	// CodeInvalidGraph: the part of the graph the run needs is invalid
	// (400, Details are the diagnostics).
	CodeInvalidGraph Code = "invalid_graph"
	// CodeConflict: the request conflicts with the state of a chat or run (409).
	CodeConflict Code = "conflict"
)

// Error is a refused request: what is wrong, for the client.
type Error struct {
	Code    Code
	Message string
	Details any
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func invalid(format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) *Error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf(format, args...)}
}
