package transport

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"chatgraph/runtime"
)

// What the editor offers: the models node data may name
// (GET /api/v1/models) and the node types with the tools available now
// (GET /api/v1/node-types). The binary supplies both through Config, so
// the transport needs no node types or providers of its own.

// NodeTypeInfo is one palette entry of /node-types.
type NodeTypeInfo struct {
	Type        string          `json:"type"`
	Label       string          `json:"label,omitempty"`
	Description string          `json:"description,omitempty"`
	Entry       bool            `json:"entry,omitempty"`
	Ports       []runtime.Port  `json:"ports"`
	DataSchema  json.RawMessage `json:"dataSchema,omitempty"`
	// Tools, on the tool type: what data.name may say now.
	Tools []ToolInfo `json:"tools,omitempty"`
	// ToolErrors, on the tool type: tool sources (MCP servers) that
	// could not be listed, by name.
	ToolErrors map[string]string `json:"toolErrors,omitempty"`
}

// ToolInfo is a tool a tool node may name.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	// Server is the MCP server offering it ("" for a built-in tool).
	Server string `json:"server,omitempty"`
	// Safe: a tool with no outside effects, which a chat user may enable
	// where the graph lists no user tools.
	Safe bool `json:"safe,omitempty"`
}

// ModelList is the answer of /models: no secrets, only names.
type ModelList struct {
	Models    []ModelInfo    `json:"models"`
	Providers []ProviderInfo `json:"providers"`
}

// ModelInfo is a model node data may name (data.model = ID).
type ModelInfo struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Type     string `json:"type"`
}

// ProviderInfo is a configured model provider.
type ProviderInfo struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Models  []string `json:"models"`
	Default bool     `json:"default,omitempty"`
}

// echoOnly is /models without a Config.Models: the offline model.
var echoOnly = ModelList{Models: []ModelInfo{{ID: "echo", Provider: "echo", Model: "echo", Type: "echo"}},
	Providers: []ProviderInfo{{Name: "echo", Type: "echo", Models: []string{"echo"}}}}

func (s *Server) models(c echo.Context) error {
	if s.cfg.Models == nil {
		return c.JSON(http.StatusOK, echoOnly)
	}
	return c.JSON(http.StatusOK, s.cfg.Models(c.Request().Context()))
}

func (s *Server) nodeTypes(c echo.Context) error {
	if s.cfg.NodeTypes != nil {
		return c.JSON(http.StatusOK, s.cfg.NodeTypes(c.Request().Context()))
	}
	return c.JSON(http.StatusOK, s.registryNodeTypes(c.Request().Context()))
}

// registryNodeTypes is /node-types from the engine's registry alone.
func (s *Server) registryNodeTypes(context.Context) []NodeTypeInfo {
	ts := s.engine.Registry().Types()
	out := make([]NodeTypeInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, NodeTypeInfo{Type: t.Name, Label: t.Label, Description: t.Description, Entry: t.Entry,
			Ports: portsOrEmpty(t.Ports), DataSchema: t.DataSchema})
	}
	return out
}
