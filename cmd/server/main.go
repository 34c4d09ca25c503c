package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/net/netutil"

	"chatgraph/chat"
	setupcfg "chatgraph/config"
	"chatgraph/internal/gctune"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	rcredis "chatgraph/runcontrol/redis"
	"chatgraph/runtime"
	"chatgraph/transport"
	"chatgraph/transport/redisrelay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := Main(ctx, Env{Args: os.Args[1:], Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "chatgraph:", err)
		os.Exit(1)
	}
}

// Env is the process environment Main runs in (tests substitute their own).
type Env struct {
	Args   []string
	Getenv func(string) string
	Stdout io.Writer
	Stderr io.Writer
	// Ready, when set, is called with the server's base URL once it listens.
	Ready func(baseURL string)
}

// Main runs one command line. It returns when the command is done; the
// server returns after a graceful shutdown once ctx is cancelled.
func Main(ctx context.Context, env Env) error {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	args := env.Args
	cmd := "server"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "server":
		return serve(ctx, env, args)
	case "runs":
		return runsCmd(ctx, env, args)
	case "gc":
		return gcCmd(ctx, env, args)
	case "help":
		fmt.Fprint(env.Stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

const usage = `usage:
  chatgraph [server] [flags]        run the server (see chatgraph server -h)
  chatgraph runs list [flags]       list runs
  chatgraph runs show RUN_ID        show a run's nodes
  chatgraph runs resume RUN_ID [--value JSON]   continue an interrupted run here
  chatgraph gc --older-than 720h    delete finished runs older than that
`

// config is the server's configuration: flags over environment over defaults.
type config struct {
	addr, stateDir, redisURL, databaseURL, token, logLevel, logFormat string
	databaseSchema, redisPrefix, durability, debugAddr                string
	allowedOrigins, httpAllowedHosts                                  string
	openAIBaseURL, openAIKey, configFile                              string
	allowedHosts, trustedProxies                                      string
	insecureNoAuth                                                    bool
	maxConnections, maxWebSocketsPerIP, deltaEventsPerRun             int
	maxRunsPerClient, maxChatsPerClient, maxStartingTurns, gcPercent  int
	gcHeapFloorMiB                                                    int64
	busyStartingTurns                                                 int
	bodyReadTimeout, maxRunDuration, busyCommitLag                    time.Duration
	drainTimeout, retention, interruptedRetention                     time.Duration
	bodyLimit                                                         int64
	rateLimit                                                         float64
	// getenv reads the variables the config file names.
	getenv            func(string) string
	instanceID, owner string
	leaseTTL          time.Duration
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func parseConfig(name string, env Env, args []string) (*config, *flag.FlagSet, error) {
	ge := env.Getenv
	c := &config{getenv: ge}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.StringVar(&c.addr, "addr", envOr(ge, "CHATGRAPH_ADDR", "127.0.0.1:8080"), "listen address (CHATGRAPH_ADDR)")
	fs.StringVar(&c.stateDir, "state-dir", envOr(ge, "CHATGRAPH_STATE_DIR", "./.chatgraph"), "state directory for the SQLite files (CHATGRAPH_STATE_DIR)")
	fs.StringVar(&c.redisURL, "redis-url", ge("CHATGRAPH_REDIS_URL"), "Redis URL for multi-instance run control (CHATGRAPH_REDIS_URL)")
	fs.StringVar(&c.databaseURL, "database-url", ge("CHATGRAPH_DATABASE_URL"), "Postgres URL for the shared store (CHATGRAPH_DATABASE_URL)")
	fs.StringVar(&c.databaseSchema, "database-schema", envOr(ge, "CHATGRAPH_DATABASE_SCHEMA", "public"), "Postgres schema of the tables (CHATGRAPH_DATABASE_SCHEMA)")
	fs.StringVar(&c.redisPrefix, "redis-prefix", envOr(ge, "CHATGRAPH_REDIS_PREFIX", "chatgraph:runcontrol"), "prefix of the Redis keys (CHATGRAPH_REDIS_PREFIX)")
	fs.StringVar(&c.logLevel, "log-level", envOr(ge, "CHATGRAPH_LOG_LEVEL", "info"), "debug, info, warn or error (CHATGRAPH_LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", envOr(ge, "CHATGRAPH_LOG_FORMAT", "text"), "text or json (CHATGRAPH_LOG_FORMAT)")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", ge("CHATGRAPH_ALLOWED_ORIGINS"), "extra WebSocket origins, comma separated host patterns (CHATGRAPH_ALLOWED_ORIGINS)")
	fs.StringVar(&c.httpAllowedHosts, "http-allowed-hosts", ge("CHATGRAPH_HTTP_ALLOWED_HOSTS"), "hosts the http_request tool may call, comma separated (CHATGRAPH_HTTP_ALLOWED_HOSTS)")
	fs.StringVar(&c.configFile, "config", ge("CHATGRAPH_CONFIG"), "file of model providers and MCP servers, see docs/nodes.md (CHATGRAPH_CONFIG)")
	fs.StringVar(&c.openAIBaseURL, "openai-base-url", ge("CHATGRAPH_OPENAI_BASE_URL"), "OpenAI-compatible API for models named openai/<model> (CHATGRAPH_OPENAI_BASE_URL)")
	fs.StringVar(&c.durability, "durability", envOr(ge, "CHATGRAPH_DURABILITY", "sync"), "when run transitions reach the store: sync, batched or exit (CHATGRAPH_DURABILITY; see docs/stores.md)")
	fs.StringVar(&c.debugAddr, "debug-addr", ge("CHATGRAPH_DEBUG_ADDR"), "serve net/http/pprof on this address, apart from the API (off by default; \":6060\" means loopback) (CHATGRAPH_DEBUG_ADDR)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "how long shutdown lets runs finish before cancelling them")
	retention, err := time.ParseDuration(envOr(ge, "CHATGRAPH_RETENTION", "720h"))
	if err != nil {
		return nil, nil, fmt.Errorf("CHATGRAPH_RETENTION: %w", err)
	}
	fs.DurationVar(&c.retention, "retention", retention, "delete finished runs older than this, hourly (negative: never) (CHATGRAPH_RETENTION)")
	interrupted, err := time.ParseDuration(envOr(ge, "CHATGRAPH_INTERRUPTED_RETENTION", "720h"))
	if err != nil {
		return nil, nil, fmt.Errorf("CHATGRAPH_INTERRUPTED_RETENTION: %w", err)
	}
	fs.DurationVar(&c.interruptedRetention, "interrupted-retention", interrupted, "delete runs waiting for a human longer than this, hourly (negative: never) (CHATGRAPH_INTERRUPTED_RETENTION)")
	fs.Int64Var(&c.bodyLimit, "body-limit", 1<<20, "largest request body in bytes")
	fs.Float64Var(&c.rateLimit, "rate-limit", 50, "requests per second per client IP (negative: off)")
	if err := instanceFlags(fs, c, ge); err != nil {
		return nil, nil, err
	}
	fs.StringVar(&c.allowedHosts, "allowed-hosts", ge("CHATGRAPH_ALLOWED_HOSTS"), "Host names served besides IP literals and localhost, comma separated (*.example.com, or * for any) (CHATGRAPH_ALLOWED_HOSTS)")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", ge("CHATGRAPH_TRUSTED_PROXIES"), "CIDRs of reverse proxies whose X-Forwarded-For names the client, comma separated (CHATGRAPH_TRUSTED_PROXIES)")
	fs.BoolVar(&c.insecureNoAuth, "insecure-no-auth", false, "serve a non-loopback --addr without CHATGRAPH_TOKEN")
	fs.IntVar(&c.maxConnections, "max-connections", 1024, "open TCP connections the server accepts at once (0: no bound)")
	fs.IntVar(&c.maxWebSocketsPerIP, "max-websockets-per-ip", 32, "open WebSocket connections per client IP (negative: no bound)")
	fs.IntVar(&c.maxRunsPerClient, "max-runs-per-client", 64, "runs one client IP may have queued or running in this process (negative: no bound)")
	fs.IntVar(&c.maxStartingTurns, "max-starting-turns", 0, "chat calls starting at once in this process, the others wait their turn in arrival order (0: no bound)")
	fs.IntVar(&c.busyStartingTurns, "busy-starting-turns", chat.ServerBusyStartingTurns, "chat calls starting at once while the run store's commits lag over --busy-commit-lag, so that the runs already streaming keep their pace; new turns then wait (0: no bound)")
	fs.DurationVar(&c.busyCommitLag, "busy-commit-lag", 2*time.Millisecond, "the commit lag over which --busy-starting-turns applies")
	fs.IntVar(&c.maxChatsPerClient, "max-chats-per-client", 10000, "chats one client IP may own; deleting a chat frees its place (negative: no bound)")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", 30*time.Second, "how long a request body may take to arrive")
	fs.IntVar(&c.deltaEventsPerRun, "delta-events-per-run", 2000, "node_delta events a run sends one per model chunk before agents coalesce their text (negative: never)")
	fs.DurationVar(&c.maxRunDuration, "max-run-duration", time.Hour, "wall-clock limit of one run; longer runs are cancelled (0: none)")
	fs.IntVar(&c.gcPercent, "gc-percent", gctune.Server.Percent, "the Go garbage collector's GOGC: heap growth in percent before a collection; a GOGC environment variable wins (lower it, or set GOMEMLIMIT, where memory is tight)")
	fs.Int64Var(&c.gcHeapFloorMiB, "gc-heap-floor-mib", gctune.Server.Floor>>20, "heap size in MiB under which the garbage collector does not start a collection: while the live heap is small, --gc-percent is raised to let the heap grow to this (0: --gc-percent alone); at most a quarter of the cgroup's or the machine's memory and half of GOMEMLIMIT; a GOGC environment variable wins")
	c.token = ge("CHATGRAPH_TOKEN")
	c.openAIKey = ge("CHATGRAPH_OPENAI_API_KEY")
	if c.openAIKey == "" {
		c.openAIKey = ge("OPENAI_API_KEY")
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if c.gcPercent < 1 {
		return nil, nil, fmt.Errorf("--gc-percent %d: want at least 1", c.gcPercent)
	}
	if c.gcHeapFloorMiB < 0 || c.gcHeapFloorMiB > maxHeapFloorMiB {
		return nil, nil, fmt.Errorf("--gc-heap-floor-mib %d: want 0 to %d", c.gcHeapFloorMiB, maxHeapFloorMiB)
	}
	switch runtime.Durability(c.durability) {
	case runtime.DurabilitySync, runtime.DurabilityBatched, runtime.DurabilityExit, "":
	default: // refused before any store is opened
		return nil, nil, fmt.Errorf("--durability %q: want sync, batched or exit", c.durability)
	}
	return c, fs, nil
}

func newLogger(c *config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// registry builds the node type registry with the built-in types and the
// models and tools of loadSetup (close the Setup at shutdown: it ends the
// MCP sessions). With a run store that keeps effects (runs), agents
// record their tool calls and model steps there, so a resume after a
// restart replays them instead of calling again.
func registry(c *config, log *slog.Logger, runs ...runtime.Store) (*runtime.Registry, *setupcfg.Setup, error) {
	setup, err := loadSetup(c, log)
	if err != nil {
		return nil, nil, err
	}
	deps := setup.Deps()
	deps.Logger = log
	deps.DeltaEventsPerRun = c.deltaEventsPerRun
	for _, st := range runs {
		if el, ok := st.(runtime.EffectLedger); ok {
			deps.Ledger = nodes.NewStoreLedger(el)
		}
	}
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, deps); err != nil {
		_ = setup.Close()
		return nil, nil, err
	}
	return reg, setup, nil
}

// runControl returns in-process run control, or Redis with --redis-url.
func runControl(ctx context.Context, c *config, log *slog.Logger) (runcontrol.Controller, runcontrol.ChatQueue, func(), error) {
	if c.redisURL == "" {
		ctl := runcontrol.NewMemory(runcontrol.MemoryConfig{})
		return ctl, runcontrol.NewMemoryChatQueue(ctl), func() {}, nil
	}
	opts, err := goredis.ParseURL(c.redisURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("redis url: %w", err)
	}
	rdb := goredis.NewClient(opts)
	ctl, err := rcredis.New(ctx, rcredis.Config{Client: rdb, Prefix: c.redisPrefix, Logger: log, BindingTTL: c.bindingTTL(), TurnTTL: c.turnTTL(), Instance: c.owner})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("redis run control: %w", err)
	}
	q, err := rcredis.NewChatQueue(ctx, ctl)
	if err != nil {
		_ = ctl.Close()
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("redis chat queue: %w", err)
	}
	return ctl, q, func() { _ = rdb.Close() }, nil
}

// eventRelay returns the Redis event relay with --redis-url (nil without):
// live events of a run reach followers in every process.
func eventRelay(ctx context.Context, c *config, log *slog.Logger) (transport.Relay, func(), error) {
	if c.redisURL == "" {
		return nil, func() {}, nil
	}
	opts, err := goredis.ParseURL(c.redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	rdb := goredis.NewClient(opts)
	relay, err := redisrelay.New(ctx, redisrelay.Config{Client: rdb, Prefix: c.redisPrefix, Logger: log})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis event relay: %w", err)
	}
	return relay, func() {
		_ = relay.Close()
		_ = rdb.Close()
	}, nil
}

// maxHeapFloorMiB bounds --gc-heap-floor-mib (1 TiB): a floor the size
// of no machine is a typo.
const maxHeapFloorMiB = 1 << 20

func serve(ctx context.Context, env Env, args []string) error {
	c, _, err := parseConfig("server", env, args)
	if err != nil {
		return err
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	log := newLogger(c, env.Stderr)
	// The server's live heap is small and turns over fast: collecting at
	// 5x it instead of 2x costs tens of MB and saves about a tenth of a
	// chat turn's CPU, and not collecting before the heap reaches the
	// floor spares the streams of a busy server most of the collections
	// that make their deltas late (docs/benchmarks.md). A GOGC
	// environment variable wins (gctune.Apply). The transport's latency
	// benchmarks run with the flags' defaults too (gctune.Server).
	defer gctune.Apply(gctune.Policy{Percent: c.gcPercent, Floor: c.gcHeapFloorMiB << 20})()
	_, stopDebug, err := debugListener(c.debugAddr, log)
	if err != nil {
		return fmt.Errorf("--debug-addr: %w", err)
	}
	defer stopDebug()
	unlock, err := claimInstance(c)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := openStores(ctx, c, log)
	if err != nil {
		return err
	}
	defer st.close()
	reg, setup, err := registry(c, log, st.runs)
	if err != nil {
		return err
	}
	defer setup.Close()
	ctl, queue, closeRedis, err := runControl(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	relay, closeRelay, err := eventRelay(ctx, c, log)
	if err != nil {
		_ = ctl.Close()
		return err
	}
	defer closeRelay()
	srv, err := newServer(c, st, reg, setup, ctl, queue, relay, log)
	if err != nil {
		_ = ctl.Close()
		return err
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	base := "http://" + ln.Addr().String()
	if c.maxConnections > 0 {
		ln = netutil.LimitListener(ln, c.maxConnections)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: maxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	recovered := srv.Start(ctx)
	fmt.Fprintf(env.Stdout, "chatgraph listening on %s (state: %s)\n", base, describeState(c))
	log.Info("listening", "url", base, "recovered_runs", recovered)
	if env.Ready != nil {
		env.Ready(base)
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		_ = srv.Shutdown(context.Background())
		return err
	}
	log.Info("shutting down")
	// Stop accepting at once; established streams end as their runs do.
	httpDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), c.drainTimeout+15*time.Second)
		defer cancel()
		httpDone <- hs.Shutdown(sctx)
	}()
	if err := srv.Shutdown(context.Background()); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if err := <-httpDone; err != nil {
		_ = hs.Close()
	}
	log.Info("stopped")
	return nil
}

func describeState(c *config) string {
	var parts []string
	if c.databaseURL != "" {
		parts = append(parts, "postgres")
	} else {
		parts = append(parts, c.stateDir)
	}
	if c.redisURL != "" {
		parts = append(parts, "redis run control")
	}
	return strings.Join(parts, ", ")
}

// maxHeaderBytes bounds a request's header block.
const maxHeaderBytes = 64 << 10

// checkExposure refuses to serve the API without a token on an address
// other machines reach, unless --insecure-no-auth says so.
func (c *config) checkExposure() error {
	if c.token != "" || c.insecureNoAuth || loopbackAddr(c.addr) {
		return nil
	}
	return fmt.Errorf("--addr %s is reachable from other machines: set CHATGRAPH_TOKEN, or pass --insecure-no-auth to serve it without one", c.addr)
}

// loopbackAddr reports whether a listen address only accepts local
// connections (a loopback IP or localhost; an empty host means every
// interface).
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
