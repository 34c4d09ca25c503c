package nodes

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// PaletteType is one node type as the editor's palette shows it now: the
// registered type; for the tool type the tools a node may name — the
// registry's own and the current tools of every source (MCP server); for
// the agent type the configured models as examples of data.model.
type PaletteType struct {
	Type *runtime.NodeType
	// DataSchema is Type.DataSchema; for the tool type with data.name's
	// enum listing Tools, for the agent type with data.model's examples
	// listing the models.
	DataSchema json.RawMessage
	// Tools and ToolErrors are set on the tool type only: the tools
	// available now, and the sources that could not be listed (by name).
	Tools      []PaletteTool
	ToolErrors map[string]string
}

// PaletteTool is a tool a tool node may name.
type PaletteTool struct {
	// Name is what data.name says: "calculator", "server/tool".
	Name        string
	Description string
	Parameters  json.RawMessage
	// Source is the MCP server's name ("" for a registered tool).
	Source string
	// Safe: registered safe (tools.Registry.Safe), so a chat user may
	// enable it where the graph lists no user tools.
	Safe bool
}

// paletteListTimeout bounds listing one source's tools.
const paletteListTimeout = 10 * time.Second

// Palette describes reg's node types with the tools of tr as they are
// now (sources listed in parallel, each within 10 s; tools/list changes
// show up on the next call) and the models of models (nil: none
// listed). Safe for concurrent use.
func Palette(ctx context.Context, reg *runtime.Registry, tr *tools.Registry, models *llm.Models) []PaletteType {
	types := reg.Types()
	out := make([]PaletteType, 0, len(types))
	for _, t := range types {
		p := PaletteType{Type: t, DataSchema: t.DataSchema}
		if t.Name == TypeTool && tr != nil {
			p.Tools, p.ToolErrors = paletteTools(ctx, tr)
			names := make([]string, len(p.Tools))
			for i, pt := range p.Tools {
				names[i] = pt.Name
			}
			p.DataSchema = toolDataSchema(names)
		}
		if t.Name == TypeAgent && models != nil {
			p.DataSchema = withModelExamples(t.DataSchema, models.List())
		}
		out = append(out, p)
	}
	return out
}

func paletteTools(ctx context.Context, tr *tools.Registry) ([]PaletteTool, map[string]string) {
	var out []PaletteTool
	for _, s := range tr.Specs() {
		out = append(out, PaletteTool{Name: s.Name, Description: s.Description, Parameters: s.Parameters, Safe: tr.Safe(s.Name)})
	}
	srcs := tr.SourceNames()
	listed := make([][]PaletteTool, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, name := range srcs {
		src, _ := tr.Source(name)
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, paletteListTimeout)
			defer cancel()
			ts, err := src.Tools(lctx)
			if err != nil {
				errs[i] = err
				return
			}
			for _, t := range ts {
				s := t.Spec()
				listed[i] = append(listed[i], PaletteTool{Name: name + "/" + s.Name, Description: s.Description,
					Parameters: s.Parameters, Source: name})
			}
		})
	}
	wg.Wait()
	var failed map[string]string
	for i, name := range srcs {
		if errs[i] != nil {
			if failed == nil {
				failed = map[string]string{}
			}
			failed[name] = errs[i].Error()
		}
		out = append(out, listed[i]...)
	}
	return out, failed
}

// withModelExamples returns the agent's data schema with
// properties.model.examples set to the model ids (unchanged when the
// schema has no such property).
func withModelExamples(schema json.RawMessage, list []llm.ModelInfo) json.RawMessage {
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil {
		return schema
	}
	props, _ := s["properties"].(map[string]any)
	model, _ := props["model"].(map[string]any)
	if model == nil {
		return schema
	}
	ids := make([]string, len(list))
	for i, m := range list {
		ids[i] = m.ID
	}
	model["examples"] = ids
	b, err := json.Marshal(s)
	if err != nil {
		return schema
	}
	return b
}
