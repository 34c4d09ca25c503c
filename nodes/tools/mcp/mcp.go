package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"chatgraph/nodes/tools"
)

// Config configures one MCP server. Exactly one of Command and URL is
// set. Zero fields take the documented defaults.
type Config struct {
	// Name names the server (tool nodes say "Name/tool").
	Name string

	// Command starts a stdio server, with Args, in Dir. The process gets
	// Env plus only these variables of chatgraph's own environment: PATH,
	// HOME, USER, LOGNAME, SHELL, TERM, LANG, LC_ALL, TMPDIR, TZ (so
	// secrets chatgraph holds never leak to it).
	Command string
	Args    []string
	Env     map[string]string
	Dir     string

	// URL is a Streamable HTTP endpoint; Headers are sent with every
	// request (Authorization, say). HTTPClient sends them (default: a
	// new http.Client).
	URL        string
	Headers    map[string]string
	HTTPClient *http.Client

	// ConnectTimeout bounds connecting and initializing (default 30s).
	ConnectTimeout time.Duration
	// CallTimeout bounds one tool call (default 5m); the node's own
	// timeoutMs and a cancel end it sooner.
	CallTimeout time.Duration
	// MaxResultBytes cuts a call's result text (default 1 MiB; the agent
	// cuts it again to its own limit before the model sees it).
	MaxResultBytes int
	// Logger receives connection events and the server's stderr (stdio)
	// at debug level (default: discard).
	Logger *slog.Logger
}

// Server is one MCP server as a tools.Source. Safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	session *sdk.ClientSession
	tools   []tools.Tool // nil: list again
	closed  bool
	// connecting serialises connects without holding mu during one.
	connecting chan struct{}
}

// inheritedEnv are the variables of chatgraph's environment a stdio
// server gets.
var inheritedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ"}

// New checks cfg and returns a Server; nothing connects before the first
// use.
func New(cfg Config) (*Server, error) {
	if !tools.ValidName(cfg.Name) {
		return nil, fmt.Errorf("mcp: invalid server name %q (letters, digits, _ and -, at most 64)", cfg.Name)
	}
	switch {
	case cfg.Command != "" && cfg.URL != "":
		return nil, fmt.Errorf("mcp %s: set command or url, not both", cfg.Name)
	case cfg.Command == "" && cfg.URL == "":
		return nil, fmt.Errorf("mcp %s: set command (stdio) or url (Streamable HTTP)", cfg.Name)
	case cfg.URL != "" && !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://"):
		return nil, fmt.Errorf("mcp %s: url must be http or https", cfg.Name)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Minute
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 1 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log.With("mcp_server", cfg.Name)}, nil
}

// Name returns the server's name.
func (s *Server) Name() string { return s.cfg.Name }

// ErrClosed is returned after Close.
var ErrClosed = errors.New("mcp: server closed")

// conn returns the live session, connecting when there is none.
func (s *Server) conn(ctx context.Context) (*sdk.ClientSession, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, ErrClosed
		case s.session != nil:
			cs := s.session
			s.mu.Unlock()
			return cs, nil
		case s.connecting != nil:
			wait := s.connecting
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		done := make(chan struct{})
		s.connecting = done
		s.mu.Unlock()

		cs, err := s.connect(ctx)
		s.mu.Lock()
		s.connecting = nil
		close(done)
		if err == nil {
			if s.closed {
				s.mu.Unlock()
				_ = cs.Close()
				return nil, ErrClosed
			}
			s.session, s.tools = cs, nil
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		go s.watch(cs)
		return cs, nil
	}
}

// watch forgets a session once it ends (the process exited, the HTTP
// session expired), so the next use reconnects.
func (s *Server) watch(cs *sdk.ClientSession) {
	err := cs.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == cs {
		s.session, s.tools = nil, nil
		if !s.closed {
			s.log.Warn("mcp session ended; reconnecting on next use", "err", err)
		}
	}
}

// drop closes a session that failed, if it is still the current one.
func (s *Server) drop(cs *sdk.ClientSession) {
	s.mu.Lock()
	if s.session == cs {
		s.session, s.tools = nil, nil
	}
	s.mu.Unlock()
	_ = cs.Close()
}

func (s *Server) connect(ctx context.Context) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "chatgraph", Version: "1"}, &sdk.ClientOptions{
		Logger: s.log,
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			s.mu.Lock()
			s.tools = nil
			s.mu.Unlock()
		},
	})
	var t sdk.Transport
	if s.cfg.Command != "" {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Dir
		for _, k := range inheritedEnv {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		for k, v := range s.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stderr = &stderrLog{log: s.log}
		t = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		hc := s.cfg.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		if len(s.cfg.Headers) > 0 {
			c := *hc
			c.Transport = &headerTransport{base: hc.Transport, headers: s.cfg.Headers}
			hc = &c
		}
		t = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	s.log.Debug("mcp connected")
	return cs, nil
}

// Tools implements tools.Source: the server's tools, listed once per
// session and again after notifications/tools/list_changed.
func (s *Server) Tools(ctx context.Context) ([]tools.Tool, error) {
	out, retry, err := s.listTools(ctx)
	if retry && ctx.Err() == nil {
		out, _, err = s.listTools(ctx) // listing is safe to repeat: reconnect once
	}
	return out, err
}

// listTools lists the tools on the current session (or returns the ones
// it listed before). retry says the session broke and was dropped, so a
// second call reconnects.
func (s *Server) listTools(ctx context.Context) (out []tools.Tool, retry bool, err error) {
	cs, err := s.conn(ctx)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	cached := s.tools
	s.mu.Unlock()
	if cached != nil {
		return cached, false, nil
	}
	out = []tools.Tool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			if brokenSession(err) {
				s.drop(cs)
				retry = true
			}
			return nil, retry, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, s.tool(t))
	}
	s.mu.Lock()
	if s.session == cs {
		s.tools = out
	}
	s.mu.Unlock()
	return out, false, nil
}

func brokenSession(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Close ends the session (a stdio server's process exits). Later uses
// fail with ErrClosed.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	cs := s.session
	s.session, s.tools = nil, nil
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	err := cs.Close()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil // a stdio server ended by the close (or the SIGTERM after it)
	}
	return err
}

// tool wraps one MCP tool. Names that are not valid tool names (MCP
// allows dots) have the other characters replaced by '_'.
func (s *Server) tool(t *sdk.Tool) tools.Tool {
	params, err := json.Marshal(t.InputSchema)
	if err != nil || len(params) == 0 || string(params) == "null" {
		params = []byte(`{"type":"object","properties":{}}`)
	}
	return &tool{srv: s, name: t.Name, spec: tools.Spec{Name: tools.SanitizeName(t.Name, "tool"), Description: t.Description, Parameters: params}}
}

type tool struct {
	srv  *Server
	name string // the server's own name of the tool
	spec tools.Spec
}

func (t *tool) Spec() tools.Spec { return t.spec }

// Invoke calls the tool. A result the server flags isError, a protocol
// error or a broken session is returned as an error (the model reads it);
// a broken session is reconnected on the next use, the call is not
// repeated (it may have had effects).
func (t *tool) Invoke(ctx context.Context, c tools.Call) (string, error) {
	s := t.srv
	cs, err := s.conn(ctx)
	if err != nil {
		return "", fmt.Errorf("mcp server %s unavailable: %w", s.cfg.Name, err)
	}
	args := json.RawMessage(c.Arguments)
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: t.name, Arguments: args})
	if err != nil {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if cctx.Err() != nil {
			return "", fmt.Errorf("mcp %s/%s: no answer within %s", s.cfg.Name, t.name, s.cfg.CallTimeout)
		}
		if brokenSession(err) {
			s.drop(cs)
		}
		return "", fmt.Errorf("mcp %s/%s: %w", s.cfg.Name, t.name, err)
	}
	text := resultText(res, s.cfg.MaxResultBytes)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error"
		}
		return "", errors.New(text)
	}
	return text, nil
}

// resultText renders a call's content for the model: text as is, other
// content as a short note, structured content as JSON when there is no
// text; cut at max bytes.
func resultText(res *sdk.CallToolResult, max int) string {
	var parts []string
	for _, c := range res.Content {
		switch x := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, x.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", x.MIMEType, base64.StdEncoding.DecodedLen(len(x.Data))))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", x.MIMEType, base64.StdEncoding.DecodedLen(len(x.Data))))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", x.Name, x.URI))
		case *sdk.EmbeddedResource:
			if x.Resource != nil && x.Resource.Text != "" {
				parts = append(parts, x.Resource.Text)
			} else if x.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s]", x.Resource.URI))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	out := strings.Join(parts, "\n")
	if len(out) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut-- // never split a character
		}
		out = out[:cut] + "…[truncated]"
	}
	return out
}

// headerTransport adds configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// stderrLog logs what a stdio server writes to stderr, at debug level.
type stderrLog struct {
	log *slog.Logger
}

func (w *stderrLog) Write(p []byte) (int, error) {
	if line := strings.TrimSpace(string(p)); line != "" {
		w.log.Debug("mcp stderr", "text", line)
	}
	return len(p), nil
}
