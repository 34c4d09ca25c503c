package transport

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/runtime"
)

// runJSON is a run on the wire.
type runJSON struct {
	ID           string                  `json:"id"`
	ChatID       string                  `json:"chatId,omitempty"`
	GraphID      string                  `json:"graphId,omitempty"`
	PlanVersion  int64                   `json:"planVersion,omitempty"`
	Kind         string                  `json:"kind,omitempty"`
	Status       runtime.RunStatus       `json:"status"`
	MessageID    string                  `json:"messageId,omitempty"`
	ParentRunID  string                  `json:"parentRunId,omitempty"`
	RootRunID    string                  `json:"rootRunId,omitempty"`
	EntryNodeIDs []string                `json:"entryNodeIds,omitempty"`
	Error        string                  `json:"error,omitempty"`
	Interrupts   []runtime.InterruptInfo `json:"interrupts,omitempty"`
	LastSeq      int64                   `json:"lastSeq"`
	Attrs        map[string]any          `json:"attrs,omitempty"`
	// Live is true while this server process holds the run (queued or
	// executing, until its message is written).
	Live      bool            `json:"live,omitempty"`
	CreatedAt *time.Time      `json:"createdAt,omitempty"`
	UpdatedAt *time.Time      `json:"updatedAt,omitempty"`
	Nodes     []nodeStateJSON `json:"nodes,omitempty"`
}

// nodeStateJSON is one node's latest checkpoint (never its error trace).
type nodeStateJSON struct {
	ID            string                 `json:"id"`
	Status        runtime.NodeStatus     `json:"status"`
	Attempt       int                    `json:"attempt"`
	AttemptID     string                 `json:"attemptId,omitempty"`
	Replayed      bool                   `json:"replayed,omitempty"`
	Effect        runtime.Effect         `json:"effect,omitempty"`
	Summary       string                 `json:"summary,omitempty"`
	Output        any                    `json:"output,omitempty"`
	Error         string                 `json:"error,omitempty"`
	ErrorCode     string                 `json:"errorCode,omitempty"`
	SkipReason    string                 `json:"skipReason,omitempty"`
	Interrupt     *runtime.InterruptInfo `json:"interrupt,omitempty"`
	StartedAt     *time.Time             `json:"startedAt,omitempty"`
	UpdatedAt     *time.Time             `json:"updatedAt,omitempty"`
	NextAttemptAt *time.Time             `json:"nextAttemptAt,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toRunJSON(r *runtime.RunRecord) runJSON {
	mid, _ := r.Attrs["messageId"].(string)
	out := runJSON{ID: r.ID, ChatID: r.ChatID, GraphID: r.GraphID, PlanVersion: r.PlanVersion, Kind: r.Kind, Status: r.Status,
		MessageID: mid, ParentRunID: r.ParentID, RootRunID: r.RootID, EntryNodeIDs: r.EntryNodeIDs, Error: r.Error,
		Interrupts: r.Interrupts, LastSeq: r.LastSeq, Attrs: r.Attrs, CreatedAt: timePtr(r.CreatedAt), UpdatedAt: timePtr(r.UpdatedAt)}
	return out
}

func (s *Server) getRun(c echo.Context) error {
	out, err := s.runView(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// runView is run id as GET /runs/{id} answers it: a run accepted but not
// stored yet is pending, an ended run is shown once its answer is final.
func (s *Server) runView(ctx context.Context, id string) (runJSON, error) {
	rec, err := s.store.GetRun(ctx, id)
	if errors.Is(err, runtime.ErrRunNotFound) {
		if lr := s.svc.Live(id); lr != nil {
			// Accepted, its reservation not written yet.
			return runJSON{ID: id, ChatID: lr.ChatID, MessageID: lr.MessageID, Status: runtime.RunPending, Live: true}, nil
		}
		accepted, berr := s.acceptedElsewhere(ctx, id, err)
		if accepted {
			return runJSON{ID: id, Status: runtime.RunPending}, nil
		}
		err = berr
	}
	if err != nil {
		return runJSON{}, err
	}
	// An ended run is answered once its answer is final, as a stream's
	// terminal event is sent only then (chat.Service.AwaitAnswer).
	if err := s.svc.AwaitAnswer(ctx, rec); err != nil {
		return runJSON{}, err
	}
	cps, err := s.store.Checkpoints(ctx, id)
	if err != nil {
		return runJSON{}, err
	}
	out := toRunJSON(rec)
	out.Live = s.svc.Live(id) != nil
	out.Nodes = make([]nodeStateJSON, 0, len(cps))
	for _, cp := range cps {
		out.Nodes = append(out.Nodes, nodeStateJSON{ID: cp.NodeID, Status: cp.Status, Attempt: cp.Attempt, AttemptID: cp.AttemptID,
			Replayed: cp.Replayed, Effect: cp.Effect, Summary: cp.Summary, Output: cp.Output, Error: cp.Error, ErrorCode: cp.ErrorCode,
			SkipReason: cp.SkipReason, Interrupt: cp.Interrupt, StartedAt: timePtr(cp.StartedAt), UpdatedAt: timePtr(cp.UpdatedAt),
			NextAttemptAt: timePtr(cp.NextAttemptAt)})
	}
	return out, nil
}

func (s *Server) listRuns(c echo.Context) error {
	ins, ok := s.store.(runtime.Inspector)
	if !ok {
		return newError(http.StatusNotImplemented, CodeInternal, "the run store cannot list runs")
	}
	f := runtime.RunFilter{ChatID: c.QueryParam("chatId"), GraphID: c.QueryParam("graphId")}
	if v := c.QueryParam("status"); v != "" {
		for _, st := range strings.Split(v, ",") {
			st := runtime.RunStatus(strings.TrimSpace(st))
			if !slices.Contains(runtime.RunStatuses, st) {
				return badRequest("status %q is no run status (%s)", st, joinStatuses(runtime.RunStatuses))
			}
			f.Status = append(f.Status, st)
		}
	}
	n, ok := queryInt(c, "limit", 0, maxPageLimit)
	if !ok {
		return badRequest("limit must be between 1 and %d", maxPageLimit)
	}
	f.Limit = n
	recs, err := ins.ListRuns(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := make([]runJSON, len(recs))
	for i, r := range recs {
		out[i] = toRunJSON(r)
	}
	return c.JSON(http.StatusOK, out)
}

// joinStatuses lists statuses for an error message.
func joinStatuses(ss []runtime.RunStatus) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
