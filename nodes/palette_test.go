package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// source is a tool source whose tools a test changes.
type source struct {
	mu    sync.Mutex
	tools []tools.Tool
	err   error
}

func (s *source) Tools(context.Context) ([]tools.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools, s.err
}

func (s *source) set(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = nil
	for _, n := range names {
		s.tools = append(s.tools, tools.New(tools.Spec{Name: n, Description: "does " + n,
			Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)},
			func(context.Context, tools.Call) (string, error) { return n, nil }))
	}
}

// The palette lists the tool type's tools as they are now: built-ins,
// then each source's as server/tool with its schema, the name enum
// following; a source that cannot list is reported, not fatal.
func TestPalette(t *testing.T) {
	t.Parallel()
	tr := tools.NewRegistry()
	require.NoError(t, tools.RegisterBuiltins(tr, tools.Config{}))
	docs := &source{}
	docs.set("search")
	require.NoError(t, tr.AddSource("docs", docs))
	require.NoError(t, tr.AddSource("down", &source{err: errors.New("connect: refused")}))
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{Tools: tr}))

	toolType := func() nodes.PaletteType {
		for _, p := range nodes.Palette(context.Background(), reg, tr, nil) {
			if p.Type.Name == nodes.TypeTool {
				return p
			}
			require.Empty(t, p.Tools)
		}
		t.Fatal("no tool type")
		return nodes.PaletteType{}
	}
	enum := func(p nodes.PaletteType) []string {
		var s struct {
			Properties struct{ Name struct{ Enum []string } }
		}
		require.NoError(t, json.Unmarshal(p.DataSchema, &s))
		return s.Properties.Name.Enum
	}

	p := toolType()
	var names []string
	for _, pt := range p.Tools {
		names = append(names, pt.Name)
	}
	require.Equal(t, []string{"calculator", "current_time", "http_request", "docs/search"}, names)
	require.Equal(t, names, enum(p))
	require.Equal(t, "docs", p.Tools[3].Source)
	require.Equal(t, []bool{true, true, false, false}, []bool{p.Tools[0].Safe, p.Tools[1].Safe, p.Tools[2].Safe, p.Tools[3].Safe})
	require.Equal(t, "does search", p.Tools[3].Description)
	require.JSONEq(t, `{"type":"object","properties":{"q":{"type":"string"}}}`, string(p.Tools[3].Parameters))
	require.Equal(t, map[string]string{"down": "connect: refused"}, p.ToolErrors)

	docs.set("search", "fetch") // the server's tool list changed
	require.Contains(t, enum(toolType()), "docs/fetch")
}

// The agent type's model field lists the configured models as examples
// (the editor offers them; other names stay allowed).
func TestPaletteModels(t *testing.T) {
	t.Parallel()
	models := llm.NewModels()
	oa, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: "http://localhost:11434/v1"})
	require.NoError(t, err)
	require.NoError(t, models.Register("ollama", oa, "llama3.1"))
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{Models: models}))
	for _, p := range nodes.Palette(context.Background(), reg, nil, models) {
		if p.Type.Name != nodes.TypeAgent {
			continue
		}
		var s struct {
			Properties struct {
				Model struct {
					Type     string
					Examples []string
					Enum     []string
				}
			}
		}
		require.NoError(t, json.Unmarshal(p.DataSchema, &s))
		require.Equal(t, "string", s.Properties.Model.Type)
		require.Equal(t, []string{"echo", "ollama/llama3.1"}, s.Properties.Model.Examples)
		require.Empty(t, s.Properties.Model.Enum)
		return
	}
	t.Fatal("no agent type")
}
