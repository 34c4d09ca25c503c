package main

import (
	"context"
	"log/slog"
	"slices"

	setupcfg "chatgraph/config"
	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
	"chatgraph/transport"
)

// loadSetup builds the models and tools of the deployment: the file of
// --config / CHATGRAPH_CONFIG when given (providers, MCP servers), the
// built-in tools, and the provider "openai" of the older
// --openai-base-url / CHATGRAPH_OPENAI_API_KEY settings when the file
// defines none. The caller closes the Setup (MCP sessions) at shutdown.
func loadSetup(c *config, log *slog.Logger) (*setupcfg.Setup, error) {
	opts := setupcfg.Options{Getenv: c.getenv, Logger: log,
		Builtins: tools.Config{HTTP: tools.HTTPConfig{AllowedHosts: splitList(c.httpAllowedHosts)}}}
	var (
		s   *setupcfg.Setup
		err error
	)
	if c.configFile != "" {
		s, err = setupcfg.Load(c.configFile, opts)
	} else {
		s, err = setupcfg.Parse([]byte(`{}`), opts)
	}
	if err != nil {
		return nil, err
	}
	if c.openAIBaseURL != "" || c.openAIKey != "" {
		if slices.Contains(s.Models.Names(), "openai") {
			log.Warn("--openai-base-url ignored: the config file defines a provider named openai")
			return s, nil
		}
		oa, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: c.openAIBaseURL, APIKey: c.openAIKey})
		if err == nil {
			err = s.Models.Register("openai", oa)
		}
		if err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// catalog is what the editor offers: the palette with the tools
// available now and the configured models, for transport.Config.
func catalog(reg *runtime.Registry, setup *setupcfg.Setup) (func(context.Context) []transport.NodeTypeInfo, func(context.Context) transport.ModelList) {
	nodeTypes := func(ctx context.Context) []transport.NodeTypeInfo {
		var out []transport.NodeTypeInfo
		for _, p := range nodes.Palette(ctx, reg, setup.Tools, setup.Models) {
			ports := p.Type.Ports
			if ports == nil {
				ports = []runtime.Port{}
			}
			info := transport.NodeTypeInfo{Type: p.Type.Name, Label: p.Type.Label, Description: p.Type.Description,
				Entry: p.Type.Entry, Ports: ports, DataSchema: p.DataSchema, ToolErrors: p.ToolErrors}
			for _, t := range p.Tools {
				info.Tools = append(info.Tools, transport.ToolInfo{Name: t.Name, Description: t.Description,
					Parameters: t.Parameters, Server: t.Source, Safe: t.Safe})
			}
			out = append(out, info)
		}
		return out
	}
	models := func(context.Context) transport.ModelList {
		var out transport.ModelList
		for _, m := range setup.Models.List() {
			out.Models = append(out.Models, transport.ModelInfo(m))
		}
		for _, p := range setup.Models.Providers() {
			out.Providers = append(out.Providers, transport.ProviderInfo(p))
		}
		return out
	}
	return nodeTypes, models
}
