package transport

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// Wire codes of the request guards (see the Security section of
// docs/api.md).
const (
	CodeCrossOrigin          = "cross_origin"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeHostNotAllowed       = "host_not_allowed"
	CodeTooManyConnections   = "too_many_connections"
	CodeRequestTimeout       = "request_timeout"
)

// hostAllowed reports whether a request's Host may be served. An IP
// literal is always accepted (DNS rebinding needs a name the attacker's
// DNS answers); names must be "localhost" (or under .localhost) or match
// one of the AllowedHosts patterns ("*" accepts any).
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, p := range s.cfg.AllowedHosts {
		p = strings.TrimSuffix(strings.ToLower(p), ".")
		if p == "*" || p == host {
			return true
		}
		if rest, ok := strings.CutPrefix(p, "*."); ok && strings.HasSuffix(host, "."+rest) {
			return true
		}
	}
	return false
}

// hostCheck answers 421 host_not_allowed for a Host the server does not
// know: a page on a rebound name cannot reach a loopback server.
func (s *Server) hostCheck(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.hostAllowed(c.Request().Host) {
			return newError(http.StatusMisdirectedRequest, CodeHostNotAllowed,
				"host %q is not served here (see --allowed-hosts)", c.Request().Host)
		}
		return next(c)
	}
}

// newCrossOrigin returns the cross-origin guard of state-changing
// requests: net/http's CrossOriginProtection (Sec-Fetch-Site, else Origin
// against Host) with AllowedOrigins trusted too. Safe methods pass.
func (s *Server) newCrossOrigin() (echo.MiddlewareFunc, error) {
	cop := http.NewCrossOriginProtection()
	for _, p := range s.cfg.AllowedOrigins {
		if strings.ContainsAny(p, "*?[") {
			continue // patterns are matched below
		}
		for _, scheme := range []string{"http://", "https://"} {
			if err := cop.AddTrustedOrigin(scheme + p); err != nil {
				return nil, fmt.Errorf("allowed origin %q: %w", p, err)
			}
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if err := cop.Check(r); err != nil && !s.originPatternAllowed(r.Header.Get("Origin")) {
				return newError(http.StatusForbidden, CodeCrossOrigin, "cross-origin request refused")
			}
			return next(c)
		}
	}, nil
}

// originPatternAllowed matches an Origin's host against the AllowedOrigins
// patterns (path.Match syntax), as the WebSocket upgrade does.
func (s *Server) originPatternAllowed(origin string) bool {
	if origin == "" {
		return false
	}
	host := origin
	if i := strings.Index(origin, "://"); i >= 0 {
		host = origin[i+3:]
	}
	for _, p := range s.cfg.AllowedOrigins {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(host)); ok {
			return true
		}
	}
	return false
}

// jsonOnly refuses a request body that is not JSON with 415: a browser
// form or a text/plain fetch (which needs no CORS preflight) cannot carry
// a command.
func jsonOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
			return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
				"request bodies must be application/json")
		}
		return next(c)
	}
}

// bodyDeadline bounds how long reading a request body may take: the
// connection's read deadline is set for BodyReadTimeout and cleared once
// the body is read, so a client trickling its body is cut off while a
// stream that follows the body is not.
func (s *Server) bodyDeadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		rc := http.NewResponseController(c.Response().Writer)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout)); err != nil {
			return next(c) // not a connection that supports deadlines (tests' recorders)
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		return next(c)
	}
}

// deadlineBody clears the read deadline when its body is fully read.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return n, newError(http.StatusRequestTimeout, CodeRequestTimeout, "the request body took too long to arrive")
	}
	return n, err
}

// ipSlots caps concurrent long-lived connections (WebSockets) per client
// IP. Safe for concurrent use.
type ipSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func (l *ipSlots) acquire(ip string) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip] >= l.max {
		return false
	}
	l.n[ip]++
	return true
}

func (l *ipSlots) release(ip string) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip]--; l.n[ip] <= 0 {
		delete(l.n, ip)
	}
}

// ipExtractor returns how the server finds a client's IP: the peer
// address, or with TrustedProxies the first X-Forwarded-For hop not from
// one of those ranges.
func ipExtractor(trusted []string) (echo.IPExtractor, error) {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect(), nil
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, cidr := range trusted {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			ip := net.ParseIP(cidr)
			if ip == nil {
				return nil, fmt.Errorf("trusted proxy %q: want a CIDR or an IP", cidr)
			}
			bits := 8 * len(ip.To16())
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			n = &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}
		}
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...), nil
}

// contentSecurityPolicy confines the UI to its own origin: scripts,
// styles (plus the inline style attributes the graph editor sets), API and
// WebSocket calls; no framing, no plugins, no foreign form targets.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; " +
	"form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets, on every answer, nosniff, no framing and the
// UI's Content-Security-Policy, and keeps pages out of Referer headers.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
		return next(c)
	}
}
