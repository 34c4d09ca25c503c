package transport

import (
	"crypto/subtle"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *Server) tokenOK(got string) bool {
	return s.cfg.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

// auth requires the bearer token on every API call. GET requests may
// pass it as ?token= (EventSource cannot set headers). The route marked
// with checksOwnToken, the WebSocket, checks it itself.
func (s *Server) auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.Token == "" || s.ownAuth != nil && c.Path() == s.ownAuth.Path && c.Request().Method == s.ownAuth.Method {
			return next(c)
		}
		tok := bearer(c.Request())
		if tok == "" && c.Request().Method == http.MethodGet {
			tok = c.QueryParam("token")
		}
		if !s.tokenOK(tok) {
			return newError(http.StatusUnauthorized, CodeUnauthorized, "missing or invalid bearer token")
		}
		return next(c)
	}
}

// rateLimiter limits requests per client IP with a token bucket
// (RateLimit per second, RateBurst); over the limit: 429 rate_limited with
// Retry-After.
func (s *Server) rateLimiter() echo.MiddlewareFunc {
	if s.cfg.RateLimit < 0 {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	l := newIPLimiter(rate.Limit(s.cfg.RateLimit), s.cfg.RateBurst, s.cfg.RateLimitClients)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ok, wait := l.allow(c.RealIP(), time.Now())
			if !ok {
				return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
					Message: "too many requests", RetryAfter: max(1, int(math.Ceil(wait.Seconds())))}
			}
			return next(c)
		}
	}
}

// ipLimiter holds one token bucket per client IP in an LRU of bounded
// size, so a flood of addresses cannot grow it without limit.
type ipLimiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex // ReserveN/CancelAt on one bucket stay together
	m     *lru.Cache[string, *rate.Limiter]
}

func newIPLimiter(limit rate.Limit, burst, size int) *ipLimiter {
	m, _ := lru.New[string, *rate.Limiter](max(size, 1))
	return &ipLimiter{limit: limit, burst: burst, m: m}
}

func (l *ipLimiter) allow(ip string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m.Get(ip)
	if !ok {
		b = rate.NewLimiter(l.limit, l.burst)
		l.m.Add(ip, b)
	}
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}
