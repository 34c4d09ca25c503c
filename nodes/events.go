package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"chatgraph/runtime"
)

// Domain events nodes emit between node_started and the node's terminal
// event (see PROTOCOL.md, "Events").
const (
	// EventNodeDelta streams text: NodeDeltaData.
	EventNodeDelta runtime.EventType = "node_delta"
	// EventToolCall announces a tool call about to run: ToolCallData.
	EventToolCall runtime.EventType = "tool_call"
	// EventToolResult reports its outcome: ToolResultData.
	EventToolResult runtime.EventType = "tool_result"
	// EventApprovalRequired precedes an interrupt that waits for a human
	// decision: ApprovalRequiredData.
	EventApprovalRequired runtime.EventType = "approval_required"
)

// NodeDeltaData is the payload of node_delta.
type NodeDeltaData struct {
	Text string `json:"text"`
}

// AppendJSON appends the delta's JSON, as json.Marshal encodes it
// (runtime.DataAppender: the engine encodes every delta a run emits).
func (d NodeDeltaData) AppendJSON(b []byte) []byte {
	b = slices.Grow(b, len(`{"text":""}`)+len(d.Text))
	b = append(b, `{"text":`...)
	b = runtime.AppendJSONString(b, d.Text)
	return append(b, '}')
}

// ToolCallData is the payload of tool_call (and the proposed call in
// approval_required).
type ToolCallData struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// AgentNodeID is set when a member agent (linked into this agent's
	// tools) made the call.
	AgentNodeID string `json:"agentNodeId,omitempty"`
	// RequiresApproval is set for calls of tools with requireApproval.
	RequiresApproval bool `json:"requiresApproval,omitempty"`
	// Replayed is set when the call's recorded outcome is reused (it is
	// not executed again).
	Replayed bool `json:"replayed,omitempty"`
	// IdempotencyKey is the key the tool receives.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// ClientTool is set for calls of a client tool: the client runs it
	// and resumes the run with its result.
	ClientTool bool `json:"clientTool,omitempty"`
}

// ToolResultData is the payload of tool_result.
type ToolResultData struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Result string `json:"result"`
	// Error is set when the call failed or was refused; the model is told.
	Error       string `json:"error,omitempty"`
	AgentNodeID string `json:"agentNodeId,omitempty"`
	Replayed    bool   `json:"replayed,omitempty"`
	// Approval is the human decision for calls that required one.
	Approval *ApprovalDecision `json:"approval,omitempty"`
}

// Approval kinds (ApprovalRequiredData.Kind).
const (
	ApprovalKindToolCall = "tool_call"
	ApprovalKindNode     = "node"
	// KindClientTool is the kind of a client tool call's interrupt
	// payload (no approval_required precedes it).
	KindClientTool = "client_tool"
)

// Interrupt reasons nodes use.
const (
	ReasonToolApproval = "tool_approval"
	ReasonApproval     = "approval"
	// ReasonClientTool: a call of a client tool waits for its result.
	ReasonClientTool = "client_tool"
)

// ApprovalRequiredData is the payload of approval_required and of the
// interrupt that follows it (node_interrupted.payload); also the payload
// of a client tool call's interrupt (kind client_tool).
type ApprovalRequiredData struct {
	Kind   string `json:"kind"`
	Prompt string `json:"prompt,omitempty"`
	// ToolCall is the proposed call (kind tool_call).
	ToolCall *ToolCallData `json:"toolCall,omitempty"`
	// Input is what an approval node would pass on (kind node).
	Input any `json:"input,omitempty"`
}

// ApprovalDecision is the resume value of an approval:
// {"approved": true|false, "reason"?: "..."}.
type ApprovalDecision struct {
	Approved bool   `json:"approved"`
	Reason   string `json:"reason,omitempty"`
}

// ErrInvalidDecision is returned by ParseApproval.
var ErrInvalidDecision = errors.New(`resume value must be {"approved": true|false, "reason"?: string}`)

// Error codes nodes fail with.
const (
	CodeApprovalDenied = "approval_denied"
	CodeInvalidResume  = "invalid_resume"
	CodeMaxSteps       = "agent_max_steps"
	CodeToolConfig     = "tool_config"
	// CodeToolUnavailable: a tool node names a tool of a source (an MCP
	// server) that cannot be reached or does not offer it now.
	CodeToolUnavailable = "tool_unavailable"
	CodeLedger          = "ledger_error"
	// CodeHistory: an entry agent could not read the chat history its run
	// input names (ChatInput.HistoryFrom).
	CodeHistory  = "history_unavailable"
	CodeTemplate = "template_error"
)

// ParseApproval reads a resume value: the decision object (or its JSON
// form), or a bare bool.
func ParseApproval(v any) (ApprovalDecision, error) {
	switch x := v.(type) {
	case bool:
		return ApprovalDecision{Approved: x}, nil
	case ApprovalDecision:
		return x, nil
	case *ApprovalDecision:
		if x != nil {
			return *x, nil
		}
	}
	var raw struct {
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return ApprovalDecision{}, ErrInvalidDecision
		}
	}
	if err := json.Unmarshal(b, &raw); err != nil || raw.Approved == nil {
		return ApprovalDecision{}, ErrInvalidDecision
	}
	return ApprovalDecision{Approved: *raw.Approved, Reason: raw.Reason}, nil
}

// ParseClientResult reads the resume value of a client tool call: a
// string (the result), {"result": ..., "error"?: "..."} (a non-string
// result is kept as its JSON text), or any other JSON value (its text).
func ParseClientResult(v any) (result, errText string, err error) {
	switch x := v.(type) {
	case nil:
		return "", "", errors.New(`resume value of a client tool call must be its result: a string or {"result": ..., "error"?: string}`)
	case string:
		return x, "", nil
	case map[string]any:
		r, hasResult := x["result"]
		e, _ := x["error"].(string)
		if hasResult || e != "" {
			if s, ok := r.(string); ok || r == nil {
				return s, e, nil
			}
			b, _ := json.Marshal(r)
			return string(b), e, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", "", fmt.Errorf("resume value of a client tool call: %w", err)
	}
	return string(b), "", nil
}

func refusal(d ApprovalDecision) string {
	if d.Reason != "" {
		return fmt.Sprintf("the user refused this call: %s", d.Reason)
	}
	return "the user refused this call"
}
