package runtime

import (
	"strings"
)

// Severity grades a diagnostic. Errors reject a graph; warnings describe
// problems confined to parts no entry node reaches, which runs never touch.
type Severity string

// Severities.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Diagnostic codes, stable for clients to branch on.
const (
	CodeInvalidJSON      = "invalid_json"
	CodeLimit            = "limit_exceeded"
	CodeInvalidID        = "invalid_id"
	CodeDuplicateID      = "duplicate_id"
	CodeUnknownType      = "unknown_type"
	CodeDanglingEdge     = "dangling_edge"
	CodeUnknownHandle    = "unknown_handle"
	CodeHandleDirection  = "handle_direction"
	CodeChannelMissing   = "channel_missing"
	CodeChannelInvalid   = "channel_invalid"
	CodeChannelMismatch  = "channel_mismatch"
	CodeInvalidWhen      = "invalid_when"
	CodeInvalidCondition = "invalid_condition"
	CodeConditionCost    = "condition_too_costly"
	CodeConditionOnLink  = "condition_on_link"
	CodePortMany         = "port_single"
	CodePortRequired     = "port_required"
	CodeFlowCycle        = "flow_cycle"
	CodeLinkCycle        = "link_cycle"
	CodeInvalidData      = "invalid_data"
	CodeInvalidOption    = "invalid_option"
	CodeUnknownEntry     = "unknown_entry"
)

// Diagnostic is one problem found in a graph: where (a JSON path into the
// graph and the node or edge id), what (a stable code) and how bad.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	Path     string   `json:"path,omitempty"`
	ID       string   `json:"id,omitempty"`
	Message  string   `json:"message"`
	// NodeIDs lists the nodes a cycle runs through, in order, first repeated last.
	NodeIDs []string `json:"nodeIds,omitempty"`
}

// Diagnostics is every problem found at once, in a deterministic order.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (ds Diagnostics) HasErrors() bool {
	for i := range ds {
		if ds[i].Severity == SeverityError {
			return true
		}
	}
	return false
}

// Errors returns only the error diagnostics.
func (ds Diagnostics) Errors() Diagnostics { return ds.filter(SeverityError) }

// Warnings returns only the warning diagnostics.
func (ds Diagnostics) Warnings() Diagnostics { return ds.filter(SeverityWarning) }

func (ds Diagnostics) filter(s Severity) Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == s {
			out = append(out, d)
		}
	}
	return out
}

// GraphError is returned when a graph (or the part a run needs) is invalid.
type GraphError struct {
	Diagnostics Diagnostics
}

func (e *GraphError) Error() string {
	var b strings.Builder
	b.WriteString("invalid graph")
	for i, d := range e.Diagnostics {
		if i == 3 {
			b.WriteString("; ...")
			break
		}
		b.WriteString("; ")
		if d.Path != "" {
			b.WriteString(d.Path)
			b.WriteString(": ")
		}
		b.WriteString(d.Message)
	}
	return b.String()
}
