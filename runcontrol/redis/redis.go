package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"chatgraph/runcontrol"
)

// Config configures New. Zero fields take the documented defaults.
type Config struct {
	// Client is the Redis connection (required). New subscribes on it;
	// Close does not close it: whoever made it closes it after Close.
	Client goredis.UniversalClient
	// Prefix namespaces every key and the pub/sub channel; controllers
	// that must see each other's runs (all instances of one deployment)
	// use the same Prefix. Keys are "{Prefix}:..." so one controller's keys
	// share a cluster slot. It must not contain '{' or '}'. Default
	// "chatgraph:runcontrol".
	Prefix string
	// IntentTTL is how long a pending intent waits for its run, and how
	// long a cancel mark of a bound run is kept for its owner to see.
	// Default runcontrol.DefaultIntentTTL (60s).
	IntentTTL time.Duration
	// PollInterval is how often the controller re-reads the cancel marks of
	// its bound runs (the safety net under pub/sub) and extends their
	// bindings. Default 200ms.
	PollInterval time.Duration
	// BindingTTL is how long a binding outlives its process if that process
	// dies without releasing it (it is extended at every poll). Default
	// 10s; raised to 5*PollInterval if smaller.
	BindingTTL time.Duration
	// TurnTTL is how long a chat turn (ChatQueue), and a run's place in a
	// chat's line, outlive their process: set it past the time the run
	// takes to be recovered (its lease TTL and a recovery pass) and a run
	// queued behind it to be started again (the same pass), so that each
	// takes its turn or its place back before a run queued after it takes
	// the turn. Default, and at least, BindingTTL.
	TurnTTL time.Duration
	// OpTimeout bounds Redis calls made without a caller's context
	// (polls, release, Close). Default 5s.
	OpTimeout time.Duration
	// Logger receives warnings about Redis errors. Default: discard.
	Logger *slog.Logger
	// Instance is the process's stable name, the same across its restarts
	// (the owner name of its run leases); it must be unique among the
	// processes running at one time. Bind takes over a binding that an
	// earlier process of the same Instance left (a restart that takes its
	// runs back at once: that process is gone, and the run's lease, claimed
	// before Bind, fences it were it not), where it would refuse another
	// process's binding until it expired. Empty: every process is a
	// stranger to its predecessors.
	Instance string
}

const (
	defaultPrefix       = "chatgraph:runcontrol"
	defaultPollInterval = 200 * time.Millisecond
	defaultBindingTTL   = 10 * time.Second
	defaultOpTimeout    = 5 * time.Second
	// healthInterval: a pub/sub connection silent this long is pinged, so a
	// dead connection is found and re-subscribed.
	healthInterval = 5 * time.Second
	// refreshBatch bounds the runs refreshed by one script call.
	refreshBatch = 256
)

// Controller is the multi-instance runcontrol.Controller backed by Redis.
// A cancel received by any instance reaches the run's instance through
// pub/sub and, if that message is lost, through the stored cancel mark that
// the owner polls and that Check reads. Safe for concurrent use.
type Controller struct {
	rdb     goredis.UniversalClient
	base    string // "{prefix}"
	channel string
	ittl    time.Duration
	bttl    time.Duration
	tttl    time.Duration
	poll    time.Duration
	opTO    time.Duration
	log     *slog.Logger
	id      string // this process's owner-token prefix: "[hex(Instance)|]incarnation"
	heir    string // hex(Instance)+"|": bindings of earlier incarnations to take over ("" without Instance)
	seq     atomic.Uint64

	// gate orders Bind and release (shared) against the poll's refresh
	// (exclusive): a refresh never sees a binding that is half written or
	// half released, so it cannot re-create a released binding nor cancel
	// a run through the poll after Bind returned it uncancelled when the
	// intent was there before Bind.
	gate sync.RWMutex

	mu     sync.Mutex
	closed bool
	runs   map[string]*binding

	ps   *goredis.PubSub
	kick chan struct{}
	stop context.CancelFunc
	wg   sync.WaitGroup
}

type binding struct {
	runID    string
	owner    string
	args     []any // scopes, encoded, for the scripts
	cancel   context.CancelCauseFunc
	cause    *runcontrol.CancelError // set once, under Controller.mu
	released sync.Once
}

var _ runcontrol.Controller = (*Controller)(nil)

// New subscribes to the controller's channel (it returns once the
// subscription is confirmed, so no cancel published afterwards is missed)
// and starts the receive and poll loops. Call Close when done.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("runcontrol/redis: Config.Client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("runcontrol/redis: Prefix %q must not contain braces", cfg.Prefix)
	}
	if cfg.IntentTTL <= 0 {
		cfg.IntentTTL = runcontrol.DefaultIntentTTL
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.BindingTTL <= 0 {
		cfg.BindingTTL = defaultBindingTTL
	}
	cfg.BindingTTL = max(cfg.BindingTTL, 5*cfg.PollInterval)
	cfg.TurnTTL = max(cfg.TurnTTL, cfg.BindingTTL)
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = defaultOpTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	heir := ""
	if cfg.Instance != "" {
		// Hex: no instance name can look like the prefix of another one.
		heir = hex.EncodeToString([]byte(cfg.Instance)) + "|"
		id = heir + id
	}
	base := "{" + cfg.Prefix + "}"
	c := &Controller{
		rdb:     cfg.Client,
		base:    base,
		channel: base + ":cancel",
		ittl:    cfg.IntentTTL,
		bttl:    cfg.BindingTTL,
		tttl:    cfg.TurnTTL,
		poll:    cfg.PollInterval,
		opTO:    cfg.OpTimeout,
		log:     cfg.Logger.With("component", "runcontrol/redis", "prefix", cfg.Prefix),
		id:      id,
		heir:    heir,
		runs:    make(map[string]*binding),
		kick:    make(chan struct{}, 1),
	}
	c.ps = c.rdb.Subscribe(ctx, c.channel)
	if _, err := c.ps.Receive(ctx); err != nil { // the subscribe confirmation
		_ = c.ps.Close()
		return nil, fmt.Errorf("runcontrol/redis: subscribe %s: %w", c.channel, err)
	}
	loopCtx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.wg.Add(2)
	go c.receiveLoop(loopCtx)
	go c.pollLoop(loopCtx)
	return c, nil
}

// Bind implements runcontrol.Controller. It makes one Redis call (a
// script) bounded by parent.
func (c *Controller) Bind(parent context.Context, runID string, scopes ...runcontrol.Scope) (context.Context, func(), error) {
	all, err := runcontrol.BindScopes(runID, scopes)
	if err != nil {
		return nil, nil, err
	}
	if parent.Err() != nil {
		return nil, nil, context.Cause(parent)
	}
	ctx, cancel := context.WithCancelCause(parent)
	b := &binding{
		runID:  runID,
		owner:  c.id + "/" + strconv.FormatUint(c.seq.Add(1), 36),
		cancel: cancel,
	}
	for _, s := range all {
		b.args = append(b.args, s.String())
	}

	c.gate.RLock()
	defer c.gate.RUnlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel(runcontrol.ErrClosed)
		return nil, nil, runcontrol.ErrClosed
	}
	if _, ok := c.runs[runID]; ok {
		c.mu.Unlock()
		cancel(runcontrol.ErrAlreadyBound)
		return nil, nil, runcontrol.ErrAlreadyBound
	}
	// Registered locally before the script runs, so a pub/sub message for
	// a Cancel that runs right after the script finds the binding.
	c.runs[runID] = b
	c.mu.Unlock()

	args := append([]any{runID, b.owner, c.bttl.Milliseconds(), c.ittl.Milliseconds(), c.heir, c.id + "/"}, b.args...)
	res, err := bindScript.Run(parent, c.rdb, []string{c.base}, args...).StringSlice()
	if err == nil && len(res) == 0 {
		err = errors.New("empty script reply")
	}
	if err != nil || res[0] == "bound" {
		c.forget(b)
		if err != nil {
			// The script may have run; undo it (owner-checked, idempotent).
			c.releaseRemote(b)
			err = fmt.Errorf("runcontrol/redis: bind %s: %w", runID, err)
		} else {
			err = runcontrol.ErrAlreadyBound
		}
		cancel(err)
		return nil, nil, err
	}
	if res[0] == "cancelled" && len(res) > 1 {
		c.deliver(runID, "", res[1])
	}
	return ctx, func() { c.release(b) }, nil
}

// forget removes b from the local map if it is still there.
func (c *Controller) forget(b *binding) {
	c.mu.Lock()
	if c.runs[b.runID] == b {
		delete(c.runs, b.runID)
	}
	c.mu.Unlock()
}

func (c *Controller) release(b *binding) {
	c.gate.RLock()
	c.forget(b)
	c.releaseRemote(b)
	c.gate.RUnlock()
	b.cancel(context.Canceled)
}

// releaseRemote deletes b's binding in Redis, once.
func (c *Controller) releaseRemote(b *binding) {
	b.released.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opTO)
		defer cancel()
		args := append([]any{b.runID, b.owner}, b.args...)
		if err := releaseScript.Run(ctx, c.rdb, []string{c.base}, args...).Err(); err != nil {
			c.log.Warn("release binding (it expires by itself)", "run", b.runID, "err", err)
		}
	})
}

// deliver cancels the local binding of runID with the encoded cause. A
// non-empty owner must match the binding's (a late message about an
// earlier binding of the same run id is ignored).
func (c *Controller) deliver(runID, owner, raw string) *runcontrol.CancelError {
	return c.cancelHere(runID, owner, decodeCause(raw))
}

// cancelHere cancels this process's binding of runID with ce (see
// deliver), and no other process's.
func (c *Controller) cancelHere(runID, owner string, ce *runcontrol.CancelError) *runcontrol.CancelError {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.runs[runID]
	if b == nil || (owner != "" && owner != b.owner) {
		return ce
	}
	if b.cause == nil {
		b.cause = ce
		b.cancel(ce)
	}
	return b.cause
}

// Cancel implements runcontrol.Controller.
func (c *Controller) Cancel(ctx context.Context, s runcontrol.Scope, cause error) (runcontrol.CancelResult, error) {
	return c.cancel(ctx, s, cause, s.Kind != runcontrol.KindRun)
}

// CancelOrphan implements runcontrol.Controller: the intent is kept under
// the run scope's key, which the run's next Bind (on any process) reads
// and consumes as it does a chat's.
func (c *Controller) CancelOrphan(ctx context.Context, runID string, cause error) (runcontrol.CancelResult, error) {
	return c.cancel(ctx, runcontrol.RunScope(runID), cause, true)
}

// cancel runs cancelScript: the runs bound to s are cancelled or, if
// there are none and keep is set, the intent is stored.
func (c *Controller) cancel(ctx context.Context, s runcontrol.Scope, cause error, keep bool) (runcontrol.CancelResult, error) {
	if err := s.Validate(); err != nil {
		return runcontrol.CancelResult{}, err
	}
	ce, err := runcontrol.NewCancelError(s, cause)
	if err != nil {
		return runcontrol.CancelResult{}, err
	}
	if c.isClosed() {
		return runcontrol.CancelResult{}, runcontrol.ErrClosed
	}
	discard := "1"
	if keep {
		discard = "0"
	}
	res, err := cancelScript.Run(ctx, c.rdb, []string{c.base}, s.String(), discard, encodeCause(ce), c.ittl.Milliseconds()).StringSlice()
	if err != nil {
		return runcontrol.CancelResult{}, fmt.Errorf("runcontrol/redis: cancel %s: %w", s, err)
	}
	if len(res) == 0 {
		return runcontrol.CancelResult{}, fmt.Errorf("runcontrol/redis: cancel %s: empty script reply", s)
	}
	out := runcontrol.CancelResult{Status: res[0]}
	if res[0] == runcontrol.StatusCancelled {
		out.RunIDs = res[1:]
		slices.Sort(out.RunIDs)
	}
	return out, nil
}

// Active implements runcontrol.Controller.
func (c *Controller) Active(ctx context.Context, s runcontrol.Scope) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, runcontrol.ErrClosed
	}
	ids, err := activeScript.Run(ctx, c.rdb, []string{c.base}, s.String()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("runcontrol/redis: active %s: %w", s, err)
	}
	slices.Sort(ids)
	return ids, nil
}

// Check implements runcontrol.Controller: the local cause if the run is
// cancelled here, else the run's cancel mark in Redis (which also cancels
// the local binding). A Redis error is logged and reported as nil (not
// known to be cancelled); the poll keeps trying.
func (c *Controller) Check(ctx context.Context, runID string) error {
	c.mu.Lock()
	b := c.runs[runID]
	var cause *runcontrol.CancelError
	if b != nil {
		cause = b.cause
	}
	c.mu.Unlock()
	if cause != nil {
		return cause
	}
	raw, err := c.rdb.Get(ctx, c.base+":c:"+runID).Result()
	if errors.Is(err, goredis.Nil) {
		return nil
	}
	if err != nil {
		c.log.Warn("check cancel mark", "run", runID, "err", err)
		return nil
	}
	return c.deliver(runID, "", raw)
}

func (c *Controller) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close implements runcontrol.Controller. It does not close Config.Client.
func (c *Controller) Close() error {
	c.gate.Lock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.gate.Unlock()
		return nil
	}
	c.closed = true
	runs := make([]*binding, 0, len(c.runs))
	for _, b := range c.runs {
		runs = append(runs, b)
		if b.cause == nil {
			b.cause = &runcontrol.CancelError{Reason: runcontrol.ErrShutdown, Scope: runcontrol.RunScope(b.runID)}
			b.cancel(b.cause)
		}
	}
	clear(c.runs)
	c.mu.Unlock()
	c.gate.Unlock()

	c.stop()
	err := c.ps.Close()
	c.wg.Wait()
	for _, b := range runs {
		c.releaseRemote(b)
	}
	if err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("runcontrol/redis: close pub/sub: %w", err)
	}
	return nil
}

// receiveLoop delivers published cancels. go-redis reconnects and
// re-subscribes after a connection error; messages published meanwhile are
// lost, so every error and every re-subscription triggers a poll at once.
func (c *Controller) receiveLoop(ctx context.Context) {
	defer c.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		msg, err := c.ps.ReceiveTimeout(ctx, healthInterval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				_ = c.ps.Ping(ctx) // an error here makes the next receive reconnect
				continue
			}
			c.log.Warn("pub/sub receive; re-subscribing", "err", err)
			c.kickPoll()
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *goredis.Subscription: // re-subscribed after a reconnect
			c.kickPoll()
		case *goredis.Message:
			for line := range strings.SplitSeq(m.Payload, "\n") {
				run, rest, ok1 := strings.Cut(line, "\t")
				owner, raw, ok2 := strings.Cut(rest, "\t")
				if ok1 && ok2 {
					c.deliver(run, owner, raw)
				}
			}
		}
	}
}

func (c *Controller) kickPoll() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) pollLoop(ctx context.Context) {
	defer c.wg.Done()
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.refresh(ctx)
	}
}

// refresh extends this controller's bindings and applies their cancel
// marks: the safety net for a lost pub/sub message.
func (c *Controller) refresh(ctx context.Context) {
	c.gate.Lock()
	defer c.gate.Unlock()
	c.mu.Lock()
	runs := make([]*binding, 0, len(c.runs))
	for _, b := range c.runs {
		runs = append(runs, b)
	}
	c.mu.Unlock()
	for len(runs) > 0 {
		n := min(len(runs), refreshBatch)
		batch := runs[:n]
		runs = runs[n:]
		args := []any{c.bttl.Milliseconds(), c.ittl.Milliseconds()}
		for _, b := range batch {
			args = append(args, b.runID, b.owner, len(b.args))
			args = append(args, b.args...)
		}
		opCtx, cancel := context.WithTimeout(ctx, c.opTO)
		res, err := refreshScript.Run(opCtx, c.rdb, []string{c.base}, args...).StringSlice()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("refresh bindings", "err", err)
			}
			return
		}
		for i := 0; i+1 < len(res); i += 2 {
			if res[i+1] == "" {
				c.log.Warn("run id is bound by another owner now", "run", res[i])
				continue
			}
			c.deliver(res[i], "", res[i+1])
		}
	}
}

// wireCause is a CancelError as stored in Redis and published.
type wireCause struct {
	Code   string `json:"code"`
	Scope  string `json:"scope"`
	Detail string `json:"detail,omitempty"`
}

func encodeCause(ce *runcontrol.CancelError) string {
	b, _ := json.Marshal(wireCause{Code: runcontrol.Code(ce.Reason), Scope: ce.Scope.String(), Detail: ce.Detail})
	return string(b)
}

// decodeCause never fails: a cause it cannot read (a newer writer, damage)
// still cancels, as a user cancel that says what it could not read.
func decodeCause(raw string) *runcontrol.CancelError {
	var w wireCause
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		return &runcontrol.CancelError{Reason: runcontrol.ErrUserCancel, Detail: "unreadable cause: " + raw}
	}
	ce := &runcontrol.CancelError{Reason: runcontrol.ReasonForCode(w.Code), Detail: w.Detail}
	if ce.Reason == nil {
		ce.Reason = runcontrol.ErrUserCancel
		ce.Detail = strings.TrimSpace(w.Code + " " + w.Detail)
	}
	ce.Scope, _ = runcontrol.ParseScope(w.Scope)
	return ce
}
