package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HTTPConfig configures the http_request tool. Zero fields take the
// documented defaults.
type HTTPConfig struct {
	// AllowedHosts lists the hosts requests (and redirects) may go to:
	// "example.com" (any port), "*.example.com" (subdomains only) or
	// "host:port" (that port only). Empty: every request is refused.
	AllowedHosts []string
	// MaxResponseBytes truncates response bodies (default 256 KiB).
	MaxResponseBytes int64
	// MaxRequestBytes bounds request bodies (default 64 KiB).
	MaxRequestBytes int
	// Timeout bounds a whole request, redirects and body included (default 15s).
	Timeout time.Duration
	// MaxRedirects followed (default 5).
	MaxRedirects int
	// Transport sends requests. Default: a transport that ignores
	// HTTP(S)_PROXY and dials public addresses only — an allowed name that
	// resolves to a loopback, link-local, private or unspecified address
	// is refused (ErrAddressNotAllowed). A Transport set here replaces
	// that check.
	Transport http.RoundTripper
	// UserAgent header (default "chatgraph-http-request").
	UserAgent string
}

var httpRequestSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"url":{"type":"string","description":"http or https URL on an allowed host"},` +
	`"method":{"type":"string","enum":["GET","POST"],"description":"default GET"},` +
	`"headers":{"type":"object","additionalProperties":{"type":"string"}},` +
	`"body":{"type":"string","description":"request body (POST)"}},` +
	`"required":["url"],"additionalProperties":false}`)

// ErrHostNotAllowed is returned for a URL (or redirect) outside the allowlist.
var ErrHostNotAllowed = errors.New("host not allowed")

// HTTPResult is the JSON text http_request returns.
type HTTPResult struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        string `json:"body"`
	// Truncated is true when the body was cut at MaxResponseBytes.
	Truncated bool `json:"truncated,omitempty"`
}

type httpTool struct {
	cfg    HTTPConfig
	client *http.Client
}

// HTTPRequest returns the http_request tool.
func HTTPRequest(cfg HTTPConfig) Tool {
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 256 << 10
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 64 << 10
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 5
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "chatgraph-http-request"
	}
	t := &httpTool{cfg: cfg}
	tr := cfg.Transport
	if tr == nil {
		tr = publicTransport()
	}
	t.client = &http.Client{Transport: tr, Timeout: cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= cfg.MaxRedirects {
				return fmt.Errorf("stopped after %d redirects", cfg.MaxRedirects)
			}
			return t.allowed(req.URL)
		}}
	return t
}

func (t *httpTool) Spec() Spec {
	desc := "Sends an HTTP GET or POST request and returns {status, contentType, body, truncated}."
	if len(t.cfg.AllowedHosts) > 0 {
		desc += " Allowed hosts: " + strings.Join(t.cfg.AllowedHosts, ", ") + "."
	} else {
		desc += " No host is allowed in this deployment."
	}
	return Spec{Name: "http_request", Description: desc, Parameters: httpRequestSchema}
}

// allowed checks a URL's scheme and host against the allowlist.
func (t *httpTool) allowed(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q (only http and https)", ErrHostNotAllowed, u.Scheme)
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	for _, a := range t.cfg.AllowedHosts {
		a = strings.ToLower(strings.TrimSpace(a))
		ah, ap := a, ""
		if h, p, err := net.SplitHostPort(a); err == nil {
			ah, ap = h, p
		}
		if ap != "" && ap != port {
			continue
		}
		if strings.HasPrefix(ah, "*.") {
			if strings.HasSuffix(host, ah[1:]) && len(host) > len(ah)-1 {
				return nil
			}
			continue
		}
		if host == strings.Trim(ah, "[]") {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrHostNotAllowed, u.Host)
}

func (t *httpTool) Invoke(ctx context.Context, c Call) (string, error) {
	var a struct {
		URL     string            `json:"url"`
		Method  string            `json:"method"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := DecodeArgs(c, &a); err != nil {
		return "", err
	}
	method := strings.ToUpper(a.Method)
	switch method {
	case "":
		method = http.MethodGet
	case http.MethodGet, http.MethodPost:
	default:
		return "", fmt.Errorf("%w: method must be GET or POST", ErrInvalidArguments)
	}
	if len(a.Body) > t.cfg.MaxRequestBytes {
		return "", fmt.Errorf("%w: body is longer than %d bytes", ErrInvalidArguments, t.cfg.MaxRequestBytes)
	}
	u, err := url.Parse(a.URL)
	if err != nil || !u.IsAbs() {
		return "", fmt.Errorf("%w: url must be absolute", ErrInvalidArguments)
	}
	if err := t.allowed(u); err != nil {
		return "", err
	}
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(a.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return "", err
	}
	for k, v := range a.Headers {
		if strings.EqualFold(k, "Host") {
			continue
		}
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", t.cfg.UserAgent)
	if method == http.MethodPost && c.IdempotencyKey != "" && req.Header.Get("Idempotency-Key") == "" {
		req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxResponseBytes+1))
	if err != nil {
		return "", fmt.Errorf("read response: %w", err)
	}
	res := HTTPResult{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if int64(len(b)) > t.cfg.MaxResponseBytes {
		b, res.Truncated = b[:t.cfg.MaxResponseBytes], true
	}
	res.Body = strings.ToValidUTF8(string(b), "\uFFFD")
	out, err := json.Marshal(res)
	if err != nil {
		return "", err
	}
	return string(out), nil
}
