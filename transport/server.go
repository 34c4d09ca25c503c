package transport

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Chat is the chat application the server serves. Required; the
	// server starts it (Start) and shuts it down (Shutdown).
	Chat *chat.Service

	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every /api/v1 call (?token= also works for GET and WebSocket).
	Token string
	// AllowedOrigins are extra WebSocket Origin host patterns
	// (path.Match syntax, e.g. "localhost:5173"); the server's own origin
	// is always allowed.
	AllowedOrigins []string
	// AllowedHosts are extra Host names served, besides IP literals and
	// localhost (exact names, "*.example.com", or "*" for any). Another
	// Host gets 421 host_not_allowed.
	AllowedHosts []string
	// TrustedProxies are CIDRs (or IPs) of reverse proxies whose
	// X-Forwarded-For names the client; without them the client is the
	// peer address and X-Forwarded-For is ignored.
	TrustedProxies []string
	// BodyLimit bounds request bodies (default 1 MiB).
	BodyLimit int64
	// BodyReadTimeout bounds reading a request body (default 30s).
	BodyReadTimeout time.Duration
	// RateLimit is requests per second per client IP (default 50;
	// negative disables); RateBurst its burst (default 2*RateLimit).
	RateLimit float64
	RateBurst int
	// RateLimitClients bounds the client IPs the rate limiter tracks; the
	// least recently seen is forgotten first (default 10000).
	RateLimitClients int
	// MaxWebSocketsPerIP bounds open WebSocket connections per client IP
	// (default 32; negative: no bound).
	MaxWebSocketsPerIP int
	// RequestTimeout bounds non-streaming requests (default 30s).
	RequestTimeout time.Duration
	// Heartbeat is the SSE comment interval (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each SSE or WebSocket write (default 10s).
	WriteTimeout time.Duration
	// WSPing is the WebSocket ping interval (default 20s); WSReadLimit the
	// largest client frame (default BodyLimit: a frame carries what an
	// HTTP body does, so a call HTTP takes is never refused with 1009).
	WSPing      time.Duration
	WSReadLimit int64
	// SubscriberQueue is the live events buffered per subscriber before a
	// slow one is dropped to catch up from the log (default 1024).
	SubscriberQueue int
	// PollInterval is how often a stream of a run executing in another
	// process reads the log (default 250ms).
	PollInterval time.Duration
	// Relay, when set, carries live events between server processes
	// (transport/redisrelay); without it a process follows a run
	// executing elsewhere by reading the event log every PollInterval.
	Relay Relay
	// UI is served at / (nil: a placeholder page).
	UI fs.FS
	// Logger receives one line per request and per run transition
	// (default: discard).
	Logger *slog.Logger
	// Metrics is the Prometheus registry /metrics serves (default:
	// NewRegistry()).
	Metrics *prometheus.Registry
	// NodeTypes, when set, answers GET /api/v1/node-types: the palette
	// with what the types offer now, such as the tools of MCP servers
	// (default: the engine's registry as registered).
	NodeTypes func(ctx context.Context) []NodeTypeInfo
	// Models, when set, answers GET /api/v1/models: the models node data
	// may name, never a secret (default: only "echo").
	Models func(ctx context.Context) ModelList
}

// Server is the HTTP, SSE and WebSocket API over a chat.Service: echo
// routes, SSE, WebSocket connections, the event hub and metrics. Create
// it with New, serve Handler, stop it with Shutdown. Safe for concurrent
// use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	svc      *chat.Service
	engine   *runtime.Engine
	store    runtime.Store // the run store
	chats    chat.Store
	hub      *hub
	metrics  *metrics
	validate *validator.Validate
	echo     *echo.Echo

	// base is the parent of every connection; cancelled by Shutdown.
	base       context.Context
	cancelBase context.CancelFunc

	mu       sync.Mutex
	cancelAt map[string]time.Time // run id -> when a cancel reached it
	wsConns  map[*wsConn]struct{}
	wsClosed bool // Shutdown has closed wsConns: a connection accepted now is closed at once
	wsSlots  *ipSlots
	pingOnce sync.Once
	wsWG     sync.WaitGroup // the WebSocket connections' goroutines

	// streamRoutes: "METHOD /path" of each streaming route (see streams),
	// written by routes() before the server serves, read-only after.
	streamRoutes map[string]streamKind
	// ownAuth: the one route that checks the bearer token itself (see
	// checksOwnToken), set like streamRoutes.
	ownAuth *echo.Route
}

// New builds a Server from cfg and makes it the chat service's publisher
// (the service's runs stream through the server's hub, relay and
// metrics): build it before the service starts.
func New(cfg Config) (*Server, error) {
	if cfg.Chat == nil {
		return nil, errors.New("transport: Chat is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = 1 << 20
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = 50
	}
	if cfg.RateBurst <= 0 {
		cfg.RateBurst = int(2 * cfg.RateLimit)
	}
	def(&cfg.RequestTimeout, 30*time.Second)
	def(&cfg.BodyReadTimeout, 30*time.Second)
	if cfg.RateLimitClients <= 0 {
		cfg.RateLimitClients = 10000
	}
	if cfg.MaxWebSocketsPerIP == 0 {
		cfg.MaxWebSocketsPerIP = 32
	}
	def(&cfg.Heartbeat, 15*time.Second)
	def(&cfg.WriteTimeout, 10*time.Second)
	def(&cfg.WSPing, 20*time.Second)
	def(&cfg.PollInterval, 250*time.Millisecond)
	if cfg.WSReadLimit <= 0 {
		// Derived from BodyLimit (after its default) so the two cannot
		// drift apart. Raising it costs an idle connection nothing:
		// coder/websocket's read limit is only a byte counter (its
		// limitReader), nothing is preallocated to it, and Conn.Read
		// grows its buffer (io.ReadAll) with the bytes that actually
		// arrive; the limit bounds what one frame in flight may take, as
		// BodyLimit does for a request.
		cfg.WSReadLimit = cfg.BodyLimit
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc := cfg.Chat
	s := &Server{cfg: cfg, log: log, svc: svc, engine: svc.Engine(), store: svc.Engine().Store(), chats: svc.Store(),
		hub: newHub(cfg.SubscriberQueue), metrics: newMetrics(cfg.Metrics), validate: newValidator(),
		cancelAt: map[string]time.Time{}, wsConns: map[*wsConn]struct{}{},
		wsSlots: &ipSlots{max: cfg.MaxWebSocketsPerIP, n: map[string]int{}}, streamRoutes: map[string]streamKind{}}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chatgraph_executors_abandoned",
		Help: "Node executor calls still running after a cancel or timeout they ignored (see runtime.Engine.AbandonedExecutors)."},
		func() float64 { return float64(s.engine.AbandonedExecutors()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chatgraph_turns_waiting_to_start",
			Help: "Chat calls waiting for a place among those starting at once (chat.Config.MaxStartingTurns, or BusyStartingTurns while the commits lag)."},
			func() float64 { return float64(svc.StartsWaiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chatgraph_commit_lag_seconds",
			Help: "How long the group commits lately took from taking the runs' writes to publishing their events (runtime.Engine.CommitLag: the slowest recent one, halved every 50 ms since)."},
			func() float64 { return s.engine.CommitLag().Seconds() }))
	svc.SetPublisher(s)
	e, err := s.routes()
	if err != nil {
		return nil, err
	}
	s.echo = e
	return s, nil
}

// Start starts the chat service's background work (recovery, retention)
// and returns how many runs its first pass took over.
func (s *Server) Start(ctx context.Context) int { return s.svc.Start(ctx) }

// Engine returns the engine the server runs graphs with.
func (s *Server) Engine() *runtime.Engine { return s.engine }

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Echo returns the echo instance (its Routes() are the API's routes).
func (s *Server) Echo() *echo.Echo { return s.echo }

// streamKind says whether a route holds its connection open for events,
// which the echo Timeout middleware must not cut.
type streamKind int

const (
	// streamsAlways: every request streams (the event routes, the
	// WebSocket, and the turns answered whole or streamed that last as
	// long as the graph runs: AG-UI, OpenAI chat completions) or waits
	// longer than a request may (the join, up to its own timeout).
	streamsAlways streamKind = iota + 1
	// streamsOnSSE: a chat call that streams when the client asks for SSE
	// (Accept: text/event-stream) or waits for its run's end when it
	// prefers to (Prefer: wait=N), and answers at once otherwise.
	streamsOnSSE
)

// streams marks r, a route just registered (what api.POST and the like
// return), as streaming of kind: a streaming route is registered as
// s.streams(kind, api.GET(...)), so its mark sits on the line that
// registers it and moves, changes or goes with it. Called only while
// routes() builds the router, before any request reads s.streamRoutes.
func (s *Server) streams(kind streamKind, r *echo.Route) {
	s.streamRoutes[r.Method+" "+r.Path] = kind
}

// checksOwnToken marks r, a route just registered, as the one that
// checks the bearer token itself: auth lets its requests through. Only
// the WebSocket is, so that a browser, which cannot set the header on
// it, learns why it was refused (close code 4001).
func (s *Server) checksOwnToken(r *echo.Route) *echo.Route {
	s.ownAuth = r
	return r
}

// streaming reports whether a request holds its connection open for
// events: the echo Timeout middleware stays off these. Only the routes
// marked with streams stream; an Accept header on any other route
// changes nothing.
func (s *Server) streaming(c echo.Context) bool {
	switch s.streamRoutes[c.Request().Method+" "+c.Path()] {
	case streamsAlways:
		return true
	case streamsOnSSE:
		if _, wait := preferredWait(c); wait {
			return true
		}
		return wantsSSE(c)
	}
	return false
}

func (s *Server) routes() (*echo.Echo, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	ipx, err := ipExtractor(s.cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	e.IPExtractor = ipx
	crossOrigin, err := s.newCrossOrigin()
	if err != nil {
		return nil, err
	}
	e.HTTPErrorHandler = s.errorHandler
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		DisablePrintStack: true,
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.log.Error("panic in handler", "path", c.Path(), "err", err, "stack", string(stack))
			return err
		},
	}))
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogStatus: true, LogURIPath: true, LogMethod: true, LogLatency: true, LogRemoteIP: true, LogError: true,
		HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			s.metrics.httpRequests.WithLabelValues(route, strconv.Itoa(v.Status)).Inc()
			s.log.Info("request", "method", v.Method, "path", v.URIPath, "route", route, "status", v.Status,
				"latency_ms", float64(v.Latency.Microseconds())/1000, "remote", v.RemoteIP)
			return nil
		},
	}))
	e.Use(securityHeaders, s.hostCheck, crossOrigin, clientContext)
	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	e.GET("/", s.ui)
	// Anything else no route matches: the UI's files and client-side
	// routes for GET, a JSON 404 for the rest (and for /api/...).
	e.RouteNotFound("/*", s.ui)

	// The API and the OpenAI-compatible routes share one chain: one rate
	// budget per client, the limiter before auth (token guessing is
	// limited too), JSON-only bodies read within their deadline, and the
	// request timeout off the streaming routes.
	guard := []echo.MiddlewareFunc{s.rateLimiter(), s.auth, pathIDs, jsonOnly, s.bodyDeadline,
		middleware.BodyLimit(strconv.FormatInt(s.cfg.BodyLimit, 10)),
		middleware.ContextTimeoutWithConfig(middleware.ContextTimeoutConfig{
			Timeout: s.cfg.RequestTimeout, Skipper: s.streaming})}
	api := e.Group("/api/v1", guard...)
	api.GET("/openapi.json", s.openapi)
	api.GET("/node-types", s.nodeTypes)
	api.GET("/models", s.models)

	api.POST("/graphs/validate", s.validateGraph)
	api.POST("/graphs", s.createGraph)
	api.GET("/graphs", s.listGraphs)
	api.GET("/graphs/:id", s.getGraph)
	api.PUT("/graphs/:id", s.updateGraph)
	api.DELETE("/graphs/:id", s.deleteGraph)

	api.POST("/chats", s.createChat)
	api.GET("/chats", s.listChats)
	api.GET("/chats/:id", s.getChat)
	api.GET("/chats/:id/messages", s.listMessages)
	api.DELETE("/chats/:id", s.deleteChat)
	api.PUT("/chats/:id/active-leaf", s.setActiveLeaf)
	s.streams(streamsOnSSE, api.POST("/chats/:id/messages", s.streamChat))
	s.streams(streamsOnSSE, api.POST("/chats/:id/agent-messages", s.streamAgentChat))
	s.streams(streamsOnSSE, api.POST("/chats/:id/messages/:mid/continue", s.continueMessage))
	s.streams(streamsOnSSE, api.POST("/chats/:id/messages/:mid/retry", s.retryMessage))
	s.streams(streamsOnSSE, api.POST("/chats/:id/messages/:mid/edit", s.editUserMessage))
	api.POST("/chats/:id/cancel", s.cancelChat)

	api.GET("/runs", s.listRuns)
	api.GET("/runs/:id", s.getRun)
	s.streams(streamsAlways, api.GET("/runs/:id/events", s.runEvents))
	s.streams(streamsAlways, api.GET("/runs/:id/join", s.joinRun))
	api.POST("/runs/:id/cancel", s.cancelRun)
	s.streams(streamsOnSSE, api.POST("/runs/:id/resume", s.resumeRun))

	s.streams(streamsAlways, s.checksOwnToken(api.GET("/ws", s.websocket)))
	s.streams(streamsAlways, api.POST("/ag-ui/graphs/:id", s.aguiRun))
	api.RouteNotFound("/*", s.ui)

	s.openAIRoutes(e, guard)
	return e, nil
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz names each dependency and whether it answers; the errors
// themselves (which may carry addresses or paths) go to the log only.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	check := func(name string, err error) {
		if err != nil {
			s.log.Warn("readiness check failed", "dependency", name, "err", err)
			checks[name], ok = "unavailable", false
			return
		}
		checks[name] = "ok"
	}
	check("chats", s.chats.Ping(ctx))
	if p, isPinger := s.store.(interface{ Ping(context.Context) error }); isPinger {
		check("runs", p.Ping(ctx))
	} else {
		_, err := s.store.GetRun(ctx, "readyz-probe")
		if errors.Is(err, runtime.ErrRunNotFound) {
			err = nil
		}
		check("runs", err)
	}
	if s.svc.Closing() {
		checks["server"], ok = "shutting down", false
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	return c.JSON(status, map[string]any{"ready": ok, "checks": checks})
}

// Shutdown stops the server in order: the chat service refuses new runs,
// drains and then cancels the running ones and closes run control (see
// chat.Service.Shutdown); then WebSocket connections are closed with
// 1001. The caller then shuts the http.Server down and closes the stores.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.svc.Shutdown(ctx)
	s.mu.Lock()
	s.wsClosed = true
	conns := make([]*wsConn, 0, len(s.wsConns))
	for c := range s.wsConns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(CloseShutdown, "server shutting down")
	}
	s.cancelBase()
	done := make(chan struct{})
	go func() {
		s.wsWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// clientContext names the request's client (its IP, as the rate limiter
// sees it) to the chat service: the runs it starts count against the
// per-client run limit.
func clientContext(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(chat.WithClient(r.Context(), c.RealIP())))
		return next(c)
	}
}
