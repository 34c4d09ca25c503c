package llm

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// EchoModel is the name of the built-in offline model.
const EchoModel = "echo"

// Models maps model names used in node data to providers. A name is
// resolved as follows: "" and "echo" are the offline Echo model; "p/m"
// where p is a registered provider name is provider p with model m; any
// other name goes to the default provider (when one is set) unchanged.
// It is safe for concurrent use.
type Models struct {
	mu        sync.RWMutex
	providers map[string]Provider
	models    map[string][]string // provider name -> its listed models
	def       Provider
	defName   string
}

// ProviderInfo describes a registered provider (no secrets).
type ProviderInfo struct {
	Name string `json:"name"`
	// Type is "echo", "openai", "anthropic" or "custom".
	Type string `json:"type"`
	// Models are the model names listed for it (data.model is Name/model).
	Models []string `json:"models"`
	// Default marks the provider names without a known prefix go to.
	Default bool `json:"default,omitempty"`
}

// ModelInfo is one model node data can name.
type ModelInfo struct {
	// ID is what data.model says: "echo" or "provider/model".
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Type     string `json:"type"`
}

// ProviderType names a provider's kind: "echo", "openai", "anthropic",
// or "custom" for other implementations.
func ProviderType(p Provider) string {
	switch p.(type) {
	case Echo, *Echo:
		return "echo"
	case *OpenAI:
		return "openai"
	case *Anthropic:
		return "anthropic"
	}
	return "custom"
}

// NewModels returns a registry that knows the echo model.
func NewModels() *Models {
	return &Models{providers: map[string]Provider{EchoModel: Echo{}}, models: map[string][]string{}}
}

// Register adds a provider under name (no "/" allowed) with the model
// names List offers for it ("name/model"; any other model name works
// too). A duplicate name is an error.
func (m *Models) Register(name string, p Provider, models ...string) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("llm: invalid provider name %q", name)
	}
	if p == nil {
		return fmt.Errorf("llm: provider %q is nil", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.providers[name]; dup {
		return fmt.Errorf("llm: provider %q registered twice", name)
	}
	m.providers[name] = p
	m.models[name] = append([]string(nil), models...)
	return nil
}

// SetDefault sets the provider for names no registered prefix claims.
func (m *Models) SetDefault(p Provider) {
	m.mu.Lock()
	m.def, m.defName = p, ""
	for name, q := range m.providers {
		if q == p {
			m.defName = name
		}
	}
	m.mu.Unlock()
}

// Providers describes the registered providers, sorted by name.
func (m *Models) Providers() []ProviderInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]ProviderInfo, 0, len(m.providers))
	for _, name := range m.names() {
		models := append([]string{}, m.models[name]...)
		if name == EchoModel {
			models = []string{EchoModel}
		}
		out = append(out, ProviderInfo{Name: name, Type: ProviderType(m.providers[name]), Models: models,
			Default: m.def != nil && name == m.defName})
	}
	return out
}

// List returns the listed models: echo first, then provider/model in
// provider and listing order.
func (m *Models) List() []ModelInfo {
	out := []ModelInfo{{ID: EchoModel, Provider: EchoModel, Model: EchoModel, Type: "echo"}}
	for _, p := range m.Providers() {
		if p.Name == EchoModel {
			continue
		}
		for _, model := range p.Models {
			out = append(out, ModelInfo{ID: p.Name + "/" + model, Provider: p.Name, Model: model, Type: p.Type})
		}
	}
	return out
}

// Resolve returns the provider for a model name and the model name to send
// it. An unknown name is an *Error with CodeUnknownModel.
func (m *Models) Resolve(model string) (Provider, string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if model == "" {
		model = EchoModel
	}
	if p, ok := m.providers[model]; ok {
		return p, model, nil
	}
	if pre, rest, ok := strings.Cut(model, "/"); ok && rest != "" {
		if p, ok := m.providers[pre]; ok {
			return p, rest, nil
		}
	}
	if m.def != nil {
		return m.def, model, nil
	}
	return nil, "", &Error{Code: CodeUnknownModel, Message: fmt.Sprintf("unknown model %q (known providers: %s)", model, strings.Join(m.names(), ", "))}
}

// Names returns the registered provider names, sorted.
func (m *Models) Names() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.names()
}

func (m *Models) names() []string {
	out := make([]string, 0, len(m.providers))
	for k := range m.providers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
