package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// graphBody is the request struct of a graph save, checked with
// validator/v10 before the runtime validates the graph itself. It names
// only what the API requires; the runtime reports the rest.
type graphBody struct {
	ID    string     `json:"id" validate:"omitempty,ident"`
	Name  string     `json:"name" validate:"max=200"`
	Nodes []nodeBody `json:"nodes" validate:"dive"`
	Edges []edgeBody `json:"edges" validate:"dive"`
}

type nodeBody struct {
	ID   string `json:"id" validate:"required"`
	Type string `json:"type" validate:"required"`
}

type edgeBody struct {
	ID     string       `json:"id" validate:"required"`
	Source string       `json:"source" validate:"required"`
	Target string       `json:"target" validate:"required"`
	Data   edgeDataBody `json:"data"`
}

type edgeDataBody struct {
	Channel string `json:"channel" validate:"required,oneof=flow link"`
	When    string `json:"when" validate:"omitempty,oneof=on_success on_failure always"`
}

// graphCheck is a decoded and validated graph save.
type graphCheck struct {
	body  graphBody
	graph *runtime.Graph
	raw   map[string]json.RawMessage
	diags runtime.Diagnostics
}

// checkGraph decodes and validates a graph body: JSON syntax errors are
// invalid_json; everything else is gathered — validator/v10 on graphBody
// and the runtime's validation — into one list of diagnostics with paths
// and ids. Nothing is patched: a missing or invalid channel is an error.
func (s *Server) checkGraph(b []byte, id string) (*graphCheck, error) {
	gc := &graphCheck{}
	if !json.Valid(b) {
		return nil, jsonError(json.Unmarshal(b, new(any)))
	}
	if err := json.Unmarshal(b, &gc.raw); err != nil || gc.raw == nil {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: "the graph must be a JSON object",
			Details: runtime.Diagnostics{{Severity: runtime.SeverityError, Code: runtime.CodeInvalidJSON, Message: "the graph must be a JSON object"}}}
	}
	g, ds := runtime.DecodeGraph(b)
	if ds.HasErrors() {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: "the graph is invalid", Details: ds}
	}
	_ = json.Unmarshal(b, &gc.body) // shape already checked by DecodeGraph
	if id == "" {
		id = gc.body.ID
	}
	if id == "" {
		id = chat.NewID("g_")
	}
	g.ID = id
	gc.graph = g
	gc.diags = s.engine.Validate(g)
	if err := s.validate.Struct(&gc.body); err != nil {
		gc.diags = mergeDiagnostics(gc.diags, s.bodyDiagnostics(err, &gc.body))
	}
	if gc.diags == nil {
		gc.diags = runtime.Diagnostics{}
	}
	return gc, nil
}

// bodyDiagnostics turns validator failures into diagnostics naming the
// node or edge id.
func (s *Server) bodyDiagnostics(err error, body *graphBody) runtime.Diagnostics {
	var ves validator.ValidationErrors
	if !errors.As(err, &ves) {
		return runtime.Diagnostics{{Severity: runtime.SeverityError, Code: runtime.CodeInvalidJSON, Message: err.Error()}}
	}
	var out runtime.Diagnostics
	for _, p := range fieldProblems(ves) {
		d := runtime.Diagnostic{Severity: runtime.SeverityError, Code: bodyCode(p.Path), Path: p.Path, Message: p.Path + " " + p.Message}
		if i, ok := index(p.Path, "nodes["); ok && i < len(body.Nodes) {
			d.ID = body.Nodes[i].ID
		}
		if i, ok := index(p.Path, "edges["); ok && i < len(body.Edges) {
			d.ID = body.Edges[i].ID
		}
		out = append(out, d)
	}
	return out
}

func bodyCode(path string) string {
	switch {
	case strings.HasSuffix(path, ".data.channel"):
		return runtime.CodeChannelInvalid
	case strings.HasSuffix(path, ".data.when"):
		return runtime.CodeInvalidWhen
	case strings.HasSuffix(path, ".id") || path == "id":
		return runtime.CodeInvalidID
	}
	return runtime.CodeInvalidData
}

func index(path, prefix string) (int, bool) {
	if !strings.HasPrefix(path, prefix) {
		return 0, false
	}
	end := strings.IndexByte(path, ']')
	if end < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(path[len(prefix):end])
	return i, err == nil
}

// mergeDiagnostics appends the validator's findings the runtime did not
// already report at the same path.
func mergeDiagnostics(rt, body runtime.Diagnostics) runtime.Diagnostics {
	seen := map[string]bool{}
	for _, d := range rt {
		seen[d.Path] = true
	}
	for _, d := range body {
		if !seen[d.Path] {
			rt = append(rt, d)
			seen[d.Path] = true
		}
	}
	return rt
}

func invalidGraph(ds runtime.Diagnostics) *Error {
	n := len(ds.Errors())
	msg := "the graph has 1 error"
	if n != 1 {
		msg = "the graph has " + strconv.Itoa(n) + " errors"
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidGraph, Message: msg, Details: ds}
}

// graphJSON is a saved graph on the wire: the body as saved, with the
// record's id, name, planVersion and timestamps, plus diagnostics on save.
func graphJSON(g *chat.Graph, diags runtime.Diagnostics) map[string]any {
	out := map[string]any{}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(g.Body, &raw)
	for k, v := range raw {
		out[k] = v
	}
	for _, k := range []string{"nodes", "edges"} {
		if v, ok := raw[k]; !ok || string(v) == "null" {
			out[k] = []any{}
		}
	}
	out["id"], out["name"], out["planVersion"] = g.ID, g.Name, g.PlanVersion
	out["createdAt"], out["updatedAt"] = g.CreatedAt, g.UpdatedAt
	if diags != nil {
		out["diagnostics"] = diags
	}
	return out
}

// storedBody is what the store keeps: the client's JSON with the server's id.
func storedBody(gc *graphCheck) json.RawMessage {
	raw := map[string]json.RawMessage{}
	for k, v := range gc.raw {
		switch k {
		case "planVersion", "createdAt", "updatedAt", "diagnostics":
			continue
		}
		raw[k] = v
	}
	raw["id"] = mustJSON(gc.graph.ID)
	return mustJSON(raw)
}

func (s *Server) validateGraph(c echo.Context) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	gc, err := s.checkGraph(b, "")
	if err != nil {
		if e, ok := err.(*Error); ok && e.Code == CodeInvalidGraph {
			ds, _ := e.Details.(runtime.Diagnostics)
			return c.JSON(http.StatusOK, map[string]any{"valid": false, "diagnostics": diagnosticsOrEmpty(ds)})
		}
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"valid": !gc.diags.HasErrors(), "diagnostics": gc.diags})
}

func (s *Server) createGraph(c echo.Context) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	gc, err := s.checkGraph(b, "")
	if err != nil {
		return err
	}
	if gc.diags.HasErrors() {
		return invalidGraph(gc.diags)
	}
	rec := &chat.Graph{ID: gc.graph.ID, Name: gc.body.Name, Body: storedBody(gc)}
	if err := s.chats.CreateGraph(c.Request().Context(), rec); err != nil {
		return err
	}
	s.log.Info("graph saved", "graph", rec.ID, "planVersion", rec.PlanVersion)
	return created(c, graphJSON(rec, gc.diags))
}

func (s *Server) updateGraph(c echo.Context) error {
	id := c.Param("id")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	gc, err := s.checkGraph(b, id)
	if err != nil {
		return err
	}
	if gc.body.ID != "" && gc.body.ID != id {
		return badRequest("the body's id %q differs from the path's %q", gc.body.ID, id)
	}
	if gc.diags.HasErrors() {
		return invalidGraph(gc.diags)
	}
	ifVersion, err := s.ifMatch(c, id)
	if err != nil {
		return err
	}
	rec := &chat.Graph{ID: id, Name: gc.body.Name, Body: storedBody(gc)}
	if err := s.chats.UpdateGraph(c.Request().Context(), rec, ifVersion); err != nil {
		return err
	}
	s.log.Info("graph saved", "graph", rec.ID, "planVersion", rec.PlanVersion)
	return c.JSON(http.StatusOK, graphJSON(rec, gc.diags))
}

// ifMatch reads the If-Match of a save of graph id: the planVersion the
// store must find (0, the store's "any", when there is none or it is
// "*"). A planVersion is 1 or more, so 0 or a negative one names no
// version the graph is at: the save is 409 (404 if there is no graph)
// here, as the store answers a stale one, since passing 0 on would save.
func (s *Server) ifMatch(c echo.Context, id string) (int64, error) {
	h := strings.Trim(c.Request().Header.Get("If-Match"), `" `)
	if h == "" || h == "*" {
		return 0, nil
	}
	v, err := strconv.ParseInt(h, 10, 64)
	if err != nil {
		return 0, badRequest("If-Match must be a planVersion")
	}
	if v < 1 {
		g, err := s.chats.GetGraph(c.Request().Context(), id)
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: graph %s is at planVersion %d, not %d", chat.ErrConflict, id, g.PlanVersion, v)
	}
	return v, nil
}

func (s *Server) getGraph(c echo.Context) error {
	g, err := s.chats.GetGraph(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", strconv.Quote(strconv.FormatInt(g.PlanVersion, 10)))
	return c.JSON(http.StatusOK, graphJSON(g, nil))
}

func (s *Server) listGraphs(c echo.Context) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	gs, err := s.chats.ListGraphs(c.Request().Context(), p)
	if err != nil {
		return err
	}
	if len(gs) > 0 {
		last := gs[len(gs)-1]
		setNext(c, p, len(gs), chat.Cursor{At: last.UpdatedAt, ID: last.ID})
	}
	out := make([]map[string]any, 0, len(gs))
	for _, g := range gs {
		out = append(out, map[string]any{"id": g.ID, "name": g.Name, "planVersion": g.PlanVersion,
			"createdAt": g.CreatedAt, "updatedAt": g.UpdatedAt})
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) deleteGraph(c echo.Context) error {
	if err := s.chats.DeleteGraph(c.Request().Context(), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// portsOrEmpty keeps "ports" an array in JSON.
func portsOrEmpty(ps []runtime.Port) []runtime.Port {
	if ps == nil {
		return []runtime.Port{}
	}
	return ps
}
