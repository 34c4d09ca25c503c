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
	def       Provider
}

// NewModels returns a registry that knows the echo model.
func NewModels() *Models {
	return &Models{providers: map[string]Provider{EchoModel: Echo{}}}
}

// Register adds a provider under name (no "/" allowed). A duplicate name
// is an error.
func (m *Models) Register(name string, p Provider) error {
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
	return nil
}

// SetDefault sets the provider for names no registered prefix claims.
func (m *Models) SetDefault(p Provider) {
	m.mu.Lock()
	m.def = p
	m.mu.Unlock()
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
