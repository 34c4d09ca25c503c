package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"chatgraph/nodes"
	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/nodes/tools/mcp"
)

// File is the configuration file's shape.
type File struct {
	// Providers are the model providers by name: node data says
	// "model": "<name>/<model>".
	Providers map[string]Provider `json:"providers"`
	// DefaultProvider receives model names without a provider prefix.
	DefaultProvider string `json:"defaultProvider"`
	// MCPServers are the MCP servers by name: tool nodes say
	// "name": "<server>/<tool>".
	MCPServers map[string]MCPServer `json:"mcpServers"`
}

// Provider is one model provider.
type Provider struct {
	// Type is "openai" (any OpenAI-compatible API) or "anthropic".
	Type string `json:"type"`
	// BaseURL of the API (default: the vendor's).
	BaseURL string `json:"baseURL"`
	// APIKeyEnv names the environment variable holding the API key.
	APIKeyEnv string `json:"apiKeyEnv"`
	// Headers are sent with every request; values may say ${VAR}.
	Headers map[string]string `json:"headers"`
	// Models are listed by /api/v1/models for the editor.
	Models []string `json:"models"`
	// MaxRetries (default 2; -1: never), MaxRetryDelay (default 20s),
	// IdleTimeout (default 90s): see llm.OpenAIConfig.
	MaxRetries    int      `json:"maxRetries"`
	MaxRetryDelay Duration `json:"maxRetryDelay"`
	IdleTimeout   Duration `json:"idleTimeout"`
	// MaxTokens is Anthropic's max_tokens when an agent sets none
	// (default 4096).
	MaxTokens int `json:"maxTokens"`
}

// MCPServer is one MCP server: Command (stdio) or URL (Streamable HTTP).
type MCPServer struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Env is added to the process's environment; values may say ${VAR}.
	Env map[string]string `json:"env"`
	Dir string            `json:"dir"`
	URL string            `json:"url"`
	// Headers are sent with every HTTP request; values may say ${VAR}.
	Headers        map[string]string `json:"headers"`
	ConnectTimeout Duration          `json:"connectTimeout"`
	CallTimeout    Duration          `json:"callTimeout"`
	// Disabled servers are skipped.
	Disabled bool `json:"disabled"`
}

// Duration is a time.Duration written as a Go duration string ("20s").
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`want a duration like "20s": %w`, err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// Options are what the file cannot say.
type Options struct {
	// Getenv reads the variables apiKeyEnv and ${VAR} name (default os.Getenv).
	Getenv func(string) string
	// Builtins configures the built-in tools (calculator, current_time,
	// http_request).
	Builtins tools.Config
	// Logger (default: discard).
	Logger *slog.Logger
}

// Setup is what a configuration builds: the models, the tools (built-ins
// plus one source per MCP server) and the MCP servers to close.
type Setup struct {
	Models *llm.Models
	Tools  *tools.Registry
	MCP    []*mcp.Server
}

// Deps returns the node dependencies for nodes.Register (Ledger and the
// other fields left for the caller).
func (s *Setup) Deps() nodes.Deps {
	return nodes.Deps{Models: s.Models, Tools: s.Tools}
}

// Close ends every MCP session. Safe to call more than once.
func (s *Setup) Close() error {
	var errs []error
	for _, m := range s.MCP {
		if err := m.Close(); err != nil {
			errs = append(errs, fmt.Errorf("mcp %s: %w", m.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// Load reads the file at path.
func Load(path string, opts Options) (*Setup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	s, err := Open(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// maxFileBytes bounds the file.
const maxFileBytes = 1 << 20

// Open reads a configuration from r.
func Open(r io.Reader, opts Options) (*Setup, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("config: larger than %d bytes", maxFileBytes)
	}
	return Parse(b, opts)
}

// Parse builds a Setup from the file's bytes (JSON; unknown fields are
// errors). Nothing connects: MCP servers connect on first use.
func Parse(data []byte, opts Options) (*Setup, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if dec.More() {
		return nil, errors.New("config: trailing data after the JSON object")
	}
	return f.Build(opts)
}

// Build makes the Setup of a decoded file.
func (f *File) Build(opts Options) (*Setup, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Setup{Models: llm.NewModels(), Tools: tools.NewRegistry()}
	if err := tools.RegisterBuiltins(s.Tools, opts.Builtins); err != nil {
		return nil, err
	}
	built := map[string]llm.Provider{}
	for _, name := range slices.Sorted(maps.Keys(f.Providers)) {
		p, err := f.Providers[name].build(name, opts.Getenv)
		if err != nil {
			return nil, fmt.Errorf("providers.%s: %w", name, err)
		}
		if err := s.Models.Register(name, p, f.Providers[name].Models...); err != nil {
			return nil, fmt.Errorf("providers.%s: %w", name, err)
		}
		built[name] = p
	}
	if f.DefaultProvider != "" {
		p, ok := built[f.DefaultProvider]
		if !ok {
			return nil, fmt.Errorf("defaultProvider %q is not a configured provider", f.DefaultProvider)
		}
		s.Models.SetDefault(p)
	}
	for _, name := range slices.Sorted(maps.Keys(f.MCPServers)) {
		m := f.MCPServers[name]
		if m.Disabled {
			continue
		}
		srv, err := m.build(name, opts)
		if err == nil {
			err = s.Tools.AddSource(name, srv)
		}
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("mcpServers.%s: %w", name, err)
		}
		s.MCP = append(s.MCP, srv)
	}
	return s, nil
}

func (p Provider) build(name string, getenv func(string) string) (llm.Provider, error) {
	if name == llm.EchoModel {
		return nil, errors.New(`"echo" is the built-in offline model`)
	}
	var key string
	if p.APIKeyEnv != "" {
		if key = getenv(p.APIKeyEnv); key == "" {
			return nil, fmt.Errorf("apiKeyEnv: environment variable %s is not set", p.APIKeyEnv)
		}
	}
	headers, err := expandAll(p.Headers, getenv, "headers")
	if err != nil {
		return nil, err
	}
	for i, m := range p.Models {
		if strings.TrimSpace(m) == "" {
			return nil, fmt.Errorf("models[%d] is empty", i)
		}
	}
	switch p.Type {
	case "openai":
		return llm.NewOpenAI(llm.OpenAIConfig{BaseURL: p.BaseURL, APIKey: key, Headers: headers, MaxRetries: p.MaxRetries,
			MaxRetryDelay: time.Duration(p.MaxRetryDelay), IdleTimeout: time.Duration(p.IdleTimeout)})
	case "anthropic":
		return llm.NewAnthropic(llm.AnthropicConfig{BaseURL: p.BaseURL, APIKey: key, Headers: headers, MaxRetries: p.MaxRetries,
			MaxRetryDelay: time.Duration(p.MaxRetryDelay), IdleTimeout: time.Duration(p.IdleTimeout), DefaultMaxTokens: p.MaxTokens})
	case "":
		return nil, errors.New(`type is required: "openai" or "anthropic"`)
	}
	return nil, fmt.Errorf(`type %q: want "openai" or "anthropic"`, p.Type)
}

func (m MCPServer) build(name string, opts Options) (*mcp.Server, error) {
	env, err := expandAll(m.Env, opts.Getenv, "env")
	if err != nil {
		return nil, err
	}
	headers, err := expandAll(m.Headers, opts.Getenv, "headers")
	if err != nil {
		return nil, err
	}
	return mcp.New(mcp.Config{Name: name, Command: m.Command, Args: m.Args, Env: env, Dir: m.Dir, URL: m.URL, Headers: headers,
		ConnectTimeout: time.Duration(m.ConnectTimeout), CallTimeout: time.Duration(m.CallTimeout), Logger: opts.Logger})
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${VAR} by the variable's value; an unset variable is
// an error (naming it, never showing a value).
func expand(s string, getenv func(string) string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

func expandAll(m map[string]string, getenv func(string) string, field string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, err := expand(m[k], getenv)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, k, err)
		}
		out[k] = v
	}
	return out, nil
}
