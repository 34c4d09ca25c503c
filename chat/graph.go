package chat

import (
	"encoding/json"

	"chatgraph/runtime"
)

// LoadGraph returns a saved graph as the runtime's model, with the
// record's id, name and planVersion.
func LoadGraph(rec *Graph) (*runtime.Graph, error) {
	var g runtime.Graph
	if err := json.Unmarshal(rec.Body, &g); err != nil {
		return nil, err
	}
	g.ID, g.Name, g.PlanVersion = rec.ID, rec.Name, rec.PlanVersion
	return &g, nil
}

// graphOf returns a saved graph version as the runtime's model: the
// graph the engine compiled its cached plan from when it keeps one (a
// graph's id and planVersion name one body for good: every change bumps
// the version), else decoded from the record's body. The graph returned
// is shared: read it, never change it.
func (s *Service) graphOf(rec *Graph) (*runtime.Graph, error) {
	if p := s.engine.CachedPlan(rec.ID, rec.PlanVersion); p != nil {
		return p.Graph(), nil
	}
	return LoadGraph(rec)
}
