package config_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/config"
	"chatgraph/internal/mcptest"
	"chatgraph/nodes/llm"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var secrets = map[string]string{"OPENAI_API_KEY": "sk-secret-1", "ANTHROPIC_API_KEY": "sk-ant-secret-2",
	"AZURE_OPENAI_API_KEY": "az-secret-3", "GITHUB_TOKEN": "ghp-secret-4"}

// The example documented in docs/nodes.md loads: every provider and its
// models, the default provider, the enabled MCP servers as tool sources.
func TestExample(t *testing.T) {
	t.Parallel()
	s, err := config.Load("testdata/example.json", config.Options{Getenv: env(secrets)})
	require.NoError(t, err)
	defer s.Close()
	var ids []string
	for _, m := range s.Models.List() {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"echo", "azure/my-gpt-4o-deployment", "claude/claude-sonnet-4-5", "claude/claude-haiku-4-5",
		"ollama/llama3.1", "ollama/qwen2.5:7b", "openai/gpt-4.1-mini", "openai/gpt-4.1"}, ids)
	p, model, err := s.Models.Resolve("llama3.1")
	require.NoError(t, err)
	require.Equal(t, "llama3.1", model)
	require.Equal(t, "openai", llm.ProviderType(p))
	for _, pi := range s.Models.Providers() {
		require.Equal(t, pi.Name == "ollama", pi.Default, pi.Name)
	}
	require.Equal(t, []string{"everything", "github"}, s.Tools.SourceNames(), "disabled servers are skipped")
	require.Contains(t, s.Tools.Names(), "calculator")
	require.NotNil(t, s.Deps().Models)

	doc, err := os.ReadFile("../docs/nodes.md")
	require.NoError(t, err)
	example, err := os.ReadFile("testdata/example.json")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(doc), string(example)), "docs/nodes.md shows config/testdata/example.json verbatim")
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, file, msg string }{
		{"unknown field", `{"provders":{}}`, `unknown field "provders"`},
		{"no type", `{"providers":{"x":{}}}`, "providers.x: type is required"},
		{"bad type", `{"providers":{"x":{"type":"cohere"}}}`, `type "cohere"`},
		{"key not set", `{"providers":{"x":{"type":"openai","apiKeyEnv":"NOPE_KEY"}}}`, "environment variable NOPE_KEY is not set"},
		{"header var not set", `{"providers":{"x":{"type":"openai","headers":{"api-key":"${NOPE}"}}}}`, "headers.api-key: environment variable NOPE is not set"},
		{"echo", `{"providers":{"echo":{"type":"openai"}}}`, "built-in offline model"},
		{"slash", `{"providers":{"a/b":{"type":"openai"}}}`, "invalid provider name"},
		{"default", `{"defaultProvider":"nope"}`, `defaultProvider "nope"`},
		{"duration", `{"providers":{"x":{"type":"openai","idleTimeout":"soon"}}}`, "soon"},
		{"bad url", `{"providers":{"x":{"type":"openai","baseURL":"localhost:11434"}}}`, "http or https"},
		{"mcp both", `{"mcpServers":{"m":{"command":"x","url":"http://h"}}}`, "mcpServers.m: mcp m: set command or url, not both"},
		{"mcp name", `{"mcpServers":{"a b":{"command":"x"}}}`, "invalid server name"},
		{"mcp env", `{"mcpServers":{"m":{"command":"x","env":{"T":"${GITHUB_TOKEN}${NOPE}"}}}}`, "env.T: environment variable NOPE is not set"},
		{"trailing", `{} {}`, "trailing data"},
		{"not json", `providers: {}`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.file), config.Options{Getenv: env(secrets)})
			require.ErrorContains(t, err, tc.msg)
			for _, v := range secrets {
				require.NotContains(t, err.Error(), v, "an error never shows a secret")
			}
		})
	}
}

// A configured stdio MCP server is usable through the setup's tools
// (server/tool), and Close ends it.
func TestMCPServerFromConfig(t *testing.T) {
	t.Parallel()
	cmd, args := mcptest.Everything(t)
	file := `{"mcpServers":{"everything":{"command":` + quote(cmd) + `,"args":[` + quote(args[0]) + `,"stdio"]}}}`
	s, err := config.Parse([]byte(file), config.Options{})
	require.NoError(t, err)
	tool, err := s.Tools.Resolve(context.Background(), "everything/echo")
	require.NoError(t, err)
	require.Equal(t, "echo", tool.Spec().Name)
	require.NoError(t, s.Close())
	_, err = s.Tools.Resolve(context.Background(), "everything/echo")
	require.Error(t, err)
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
