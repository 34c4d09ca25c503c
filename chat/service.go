package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"chatgraph/nodes/tools"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// Publisher receives the life of the runs this process executes, in
// order per run: RunOpened before the first event, every event (a run's
// terminal event only once its message is final), then RunClosed. The
// transport's event hub implements it. Calls must not block the run.
type Publisher interface {
	RunOpened(run *LiveRun, afterSeq int64)
	RunEvent(run *LiveRun, ev runtime.Event)
	RunClosed(run *LiveRun)
}

// LiveRun is a run bound in this process, from the moment its id is
// minted until it has ended and its message is final.
type LiveRun struct {
	ID        string
	ChatID    string
	MessageID string
	nodeTypes map[string]string
	client    string // who started it (WithClient), "" if unknown
	done      chan struct{}
	// counted: the run counts against MaxRuns, MaxRunsPerChat and
	// MaxRunsPerClient (Service.mu).
	counted bool
	// waitingSince is when the run began to wait for its chat's turn
	// (Unix nanoseconds; 0 while it does not wait).
	waitingSince atomic.Int64
}

// NodeType returns the type of a node of the run's graph.
func (r *LiveRun) NodeType(nodeID string) string { return r.nodeTypes[nodeID] }

// Done is closed when the run has ended and its message is final.
func (r *LiveRun) Done() <-chan struct{} { return r.done }

// ServerBusyStartingTurns is the BusyStartingTurns the server binary runs
// by default (--busy-starting-turns): while the commits lag, four chat
// calls start at once (docs/benchmarks.md, "The defaults of 2026-12-01").
const ServerBusyStartingTurns = 4

// Config configures a Service. Zero fields take the documented defaults.
type Config struct {
	// Engine executes the runs; its store is the run store of Store's
	// database. Required.
	Engine *runtime.Engine
	// Store keeps graphs and chats. Required; the caller closes it.
	Store Store
	// Control binds and cancels runs. Required; Shutdown closes it.
	Control runcontrol.Controller
	// Queue orders the runs of each chat (double texting). Default:
	// runcontrol.NewMemoryChatQueue(Control).
	Queue runcontrol.ChatQueue
	// Publisher receives the events of runs executing here (default: none).
	Publisher Publisher
	// Tools is the registry the agents resolve user tools in (the one of
	// nodes.Deps). With it, a chat call enabling a user tool that no agent
	// of its run may use (chatscope.Scope.UserToolAllowed) is refused
	// with CodeInvalid; without it (nil) such tools are only dropped by
	// the agents, with a warning in the log.
	Tools *tools.Registry
	// MaxRuns bounds the runs queued or executing in this process
	// (default 1000); MaxRunsPerChat those of one chat (default 16).
	MaxRuns        int
	MaxRunsPerChat int
	// MaxRunsPerClient bounds the runs queued or executing in this process
	// that one client started (see WithClient; default 64, negative: no
	// bound).
	MaxRunsPerClient int
	// MaxStartingTurns, when positive, bounds the chat calls starting at
	// once in this process: from the call until its run's start is
	// committed (or the call is refused); the others wait, in the order
	// they came, or until their context ends. A thousand turns arriving
	// together then start a few at a time instead of filling the run
	// queues at once, where they delay every delta of the runs already
	// streaming; their first tokens come later (docs/benchmarks.md).
	// Default 0: no bound (but see BusyStartingTurns).
	MaxStartingTurns int
	// BusyStartingTurns, when positive, bounds the chat calls starting
	// at once, as MaxStartingTurns does, but only while the engine's
	// group commits lag (runtime.Engine.CommitLag over BusyCommitLag): a
	// burst of turns that fills the run store's commits and the
	// processors then starts a few at a time, paced by the commits, so
	// that the deltas of the runs already streaming keep their pace,
	// while a server that keeps up starts every call at once. A call that
	// comes while others wait waits behind them, lag or not. The price is
	// the new turns': under such a burst their first tokens come later,
	// and a server saturated with short turns completes fewer of them a
	// second (docs/benchmarks.md). Default 0: no bound (the server
	// binary's --busy-starting-turns sets ServerBusyStartingTurns).
	// MaxStartingTurns, when set, is the bound instead, always.
	BusyStartingTurns int
	// BusyCommitLag is the commit lag over which BusyStartingTurns
	// applies (default 2ms).
	BusyCommitLag time.Duration
	// MaxChatsPerClient bounds the chats one client owns (see WithClient
	// and CreateChat; default 10000, negative: no bound). Deleting a chat
	// frees its place.
	MaxChatsPerClient int
	// RecoveryInterval is how often Start's loop looks for runs whose
	// process died (default 5s).
	RecoveryInterval time.Duration
	// Retention is the age past which finished runs (with their
	// checkpoints and event logs) are deleted, at Start and every
	// RetentionInterval (default 1h). Default 720h; negative: never.
	Retention         time.Duration
	RetentionInterval time.Duration
	// InterruptedRetention is how long a run interrupted for a human (and
	// never cancelled) is kept. Default 720h; negative: until deleted by hand.
	InterruptedRetention time.Duration
	// DrainTimeout bounds how long Shutdown lets runs finish before it
	// cancels them with cause shutdown (default 10s).
	DrainTimeout time.Duration
	// Logger receives one line per run transition (default: discard).
	Logger *slog.Logger
}

// Service is the chat application. Create it with New, call Start once,
// stop it with Shutdown. Safe for concurrent use.
type Service struct {
	cfg    Config
	log    *slog.Logger
	engine *runtime.Engine
	runs   runtime.Store
	chats  Store
	// join is the chat store as a Joiner when the engine commits joined
	// writes (nil otherwise): a turn's writes then go in its run's commits.
	join  Joiner
	ctl   runcontrol.Controller
	queue runcontrol.ChatQueue
	pub   Publisher

	// base is the parent of every run context; cancelled by Shutdown last.
	base       context.Context
	cancelBase context.CancelFunc

	// starting holds a place for each chat call starting (nil: no
	// bound, Config.MaxStartingTurns or BusyStartingTurns). With lag set
	// (BusyStartingTurns), a call takes a place only while lag is over
	// busyLag or calls wait.
	starting *startGate
	busyLag  time.Duration
	lag      func() time.Duration // the engine's CommitLag

	// refused backs off the recovery of runs whose writes were refused
	// (backoff.go).
	refused refusals
	// endedHolders is what sweepEndedHolders last saw: chat -> the ended
	// run holding its turn (the recovery loop's alone).
	endedHolders map[string]string

	mu        sync.Mutex
	closing   bool
	live      map[string]*LiveRun
	active    int // runs counted against MaxRuns (uncount)
	perChat   map[string]int
	perClient map[string]int
	runsDone  sync.WaitGroup
	// relaunching are the chats whose reservations recovery is starting
	// again here (relaunchChat), one after the other.
	relaunching map[string]chan struct{} // closed when the relaunch ends
}

// Errors of the service's own (not of a request).
var (
	// ErrShuttingDown: the service refuses new runs.
	ErrShuttingDown = errors.New("server is shutting down")
	// ErrTooManyRuns: a run limit of this process is reached.
	ErrTooManyRuns = errors.New("too many active runs")
	// ErrControlUnavailable: run control could not be asked (Redis
	// unreachable, say), so whether a run is bound is not known.
	ErrControlUnavailable = errors.New("run control unavailable")
)

// New builds a Service from cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil || cfg.Engine.Store() == nil || cfg.Store == nil || cfg.Control == nil {
		return nil, errors.New("chat: Engine (with a store), Store and Control are required")
	}
	if cfg.Queue == nil {
		cfg.Queue = runcontrol.NewMemoryChatQueue(cfg.Control)
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = 1000
	}
	if cfg.MaxRunsPerClient == 0 {
		cfg.MaxRunsPerClient = 64
	}
	if cfg.MaxChatsPerClient == 0 {
		cfg.MaxChatsPerClient = 10000
	}
	if cfg.MaxRunsPerChat <= 0 {
		cfg.MaxRunsPerChat = 16
	}
	if cfg.RecoveryInterval <= 0 {
		cfg.RecoveryInterval = 5 * time.Second
	}
	if cfg.Retention == 0 {
		cfg.Retention = 720 * time.Hour
	}
	if cfg.InterruptedRetention == 0 {
		cfg.InterruptedRetention = 720 * time.Hour
	}
	if cfg.RetentionInterval <= 0 {
		cfg.RetentionInterval = time.Hour
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.BusyCommitLag <= 0 {
		cfg.BusyCommitLag = 2 * time.Millisecond
	}
	if cfg.Publisher == nil {
		cfg.Publisher = nopPublisher{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: log, engine: cfg.Engine, runs: cfg.Engine.Store(), chats: cfg.Store,
		ctl: cfg.Control, queue: cfg.Queue, pub: cfg.Publisher, live: map[string]*LiveRun{}, perChat: map[string]int{},
		perClient: map[string]int{}}
	switch {
	case cfg.MaxStartingTurns > 0:
		s.starting = newStartGate(cfg.MaxStartingTurns)
	case cfg.BusyStartingTurns > 0:
		s.starting = newStartGate(cfg.BusyStartingTurns)
		s.busyLag, s.lag = cfg.BusyCommitLag, cfg.Engine.CommitLag
	}
	if j, ok := cfg.Store.(Joiner); ok && cfg.Engine.JoinsWrites() {
		s.join = j
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	return s, nil
}

type nopPublisher struct{}

func (nopPublisher) RunOpened(*LiveRun, int64)        {}
func (nopPublisher) RunEvent(*LiveRun, runtime.Event) {}
func (nopPublisher) RunClosed(*LiveRun)               {}

// GroupPublisher is a Publisher that delivers the events of one group
// commit together: the engine publishes each group commit inside one
// call of PublishGroup (see runtime.Engine.SetPublishGroup).
type GroupPublisher interface {
	Publisher
	PublishGroup(publish func())
}

// SetPublisher replaces the publisher. Call it before Start and before
// the first chat call (the transport does, when it is built on the
// service). A GroupPublisher also wraps the engine's group commits.
func (s *Service) SetPublisher(p Publisher) {
	if p == nil {
		p = nopPublisher{}
	}
	s.pub = p
	if g, ok := p.(GroupPublisher); ok {
		s.engine.SetPublishGroup(g.PublishGroup)
	} else {
		s.engine.SetPublishGroup(nil)
	}
}

// Store returns the chat store.
func (s *Service) Store() Store { return s.chats }

// CreateChat creates c for the client ctx names (WithClient), its owner:
// ErrTooManyChats when that client owns Config.MaxChatsPerClient chats
// already. A chat of no known client is not bounded.
func (s *Service) CreateChat(ctx context.Context, c *Chat) error {
	c.Owner = clientOf(ctx)
	return s.chats.CreateChat(ctx, c, s.cfg.MaxChatsPerClient)
}

// Engine returns the engine that executes the runs.
func (s *Service) Engine() *runtime.Engine { return s.engine }

// Live returns the run bound in this process under id, or nil.
func (s *Service) Live(id string) *LiveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[id]
}

// Bound reports whether run control knows runID as bound in any process
// (a run accepted but not started yet, or executing). When run control
// cannot be asked the answer is not known: the error wraps
// ErrControlUnavailable, and a caller must not act as if the run were
// bound nowhere (recovery would fail a live process's reservation).
func (s *Service) Bound(ctx context.Context, runID string) (bool, error) {
	if s.Live(runID) != nil {
		return true, nil
	}
	ids, err := s.ctl.Active(ctx, runcontrol.RunScope(runID))
	if err != nil {
		return false, fmt.Errorf("%w: run %s: %w", ErrControlUnavailable, runID, err)
	}
	return len(ids) > 0, nil
}

// Closing reports whether Shutdown has begun.
func (s *Service) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// admit registers a run, enforcing the process and per-chat limits.
func (s *Service) admit(lr *LiveRun) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return ErrShuttingDown
	}
	if _, dup := s.live[lr.ID]; dup {
		return fmt.Errorf("%w: run %s", runcontrol.ErrAlreadyBound, lr.ID)
	}
	if s.active >= s.cfg.MaxRuns {
		return fmt.Errorf("%w: the server runs %d (the limit)", ErrTooManyRuns, s.active)
	}
	if s.perChat[lr.ChatID] >= s.cfg.MaxRunsPerChat {
		return fmt.Errorf("%w: the chat has %d runs queued or running (the limit)", ErrTooManyRuns, s.perChat[lr.ChatID])
	}
	if lr.client != "" && s.cfg.MaxRunsPerClient > 0 && s.perClient[lr.client] >= s.cfg.MaxRunsPerClient {
		return fmt.Errorf("%w: this client has %d runs queued or running (the limit)", ErrTooManyRuns, s.perClient[lr.client])
	}
	s.live[lr.ID] = lr
	s.active++
	s.perChat[lr.ChatID]++
	if lr.client != "" {
		s.perClient[lr.client]++
	}
	lr.counted = true
	s.runsDone.Add(1)
	return nil
}

// uncount releases the run's place under the run limits. A run that ends
// does so before its terminal event is let through: a client that reads
// run_completed and sends its next turn at once finds its place free.
func (s *Service) uncount(lr *LiveRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !lr.counted {
		return
	}
	lr.counted = false
	s.active--
	if s.perChat[lr.ChatID]--; s.perChat[lr.ChatID] <= 0 {
		delete(s.perChat, lr.ChatID)
	}
	if lr.client != "" {
		if s.perClient[lr.client]--; s.perClient[lr.client] <= 0 {
			delete(s.perClient, lr.client)
		}
	}
}

// retire unregisters a run that has ended (or never started).
func (s *Service) retire(lr *LiveRun, opened bool) {
	s.uncount(lr)
	s.mu.Lock()
	delete(s.live, lr.ID)
	s.mu.Unlock()
	if opened {
		s.pub.RunClosed(lr)
	}
	close(lr.done)
	s.runsDone.Done()
}

// Shutdown stops the service in order: new runs are refused, running
// runs get until DrainTimeout (or ctx) to finish, the rest are cancelled
// with cause shutdown (runcontrol.ErrShutdown) and awaited, then the
// engine and run control are closed. The caller closes the stores.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	drain, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	if !waitGroup(drain, &s.runsDone) {
		s.mu.Lock()
		ids := make([]string, 0, len(s.live))
		for id := range s.live {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		s.log.Info("shutdown: cancelling runs", "count", len(ids))
		for _, id := range ids {
			_, _ = s.ctl.Cancel(context.Background(), runcontrol.RunScope(id), runcontrol.ErrShutdown)
		}
		grace, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		waitGroup(grace, &s.runsDone)
		cancel2()
	}
	s.cancelBase()
	s.engine.WaitRecovered()
	s.engine.Close()
	if q, ok := s.queue.(interface{ Close() error }); ok {
		_ = q.Close()
	}
	if err := s.ctl.Close(); err != nil {
		return fmt.Errorf("chat: close run control: %w", err)
	}
	return nil
}

// waitGroup waits for wg or ctx; it reports whether wg finished.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
