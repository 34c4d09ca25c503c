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
