package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"chatgraph/runcontrol"
)

// Chat queue keys (B = the controller's base):
//
//	B:qh:<chat>  hash   the turn holder {run, token}, PX TurnTTL (refreshed by its process)
//	B:qw:<chat>  zset   queued run -> FIFO sequence number
//	B:qx:<chat>  zset   queued run -> liveness expiry (ms), refreshed by the waiter
//	B:qs:<run>   string a queued run was superseded by this run id, PX TurnTTL
//	B:qseq       string the FIFO sequence counter
//	B:turn       channel a chat id whenever its turn may have moved
//
// Queued runs take the turn themselves (the first live one when nobody
// holds it), so a dead holder or waiter costs at most one TurnTTL, never
// a stuck chat. Both outlive their process that long: long enough for
// its runs to be recovered or started again in another process (the
// holder's run taking its turn back, a waiter's taking its place back,
// acquire), so that a run queued behind them does not overtake them.
const queuePrelude = `
local b = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local chat = ARGV[1]
local hk, wk, xk = b..':qh:'..chat, b..':qw:'..chat, b..':qx:'..chat

-- unqueue takes run's place out of the line.
local function unqueue(run)
  redis.call('ZREM', wk, run)
  redis.call('ZREM', xk, run)
end

local function prune()
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', xk, '-inf', now)) do
    unqueue(r)
  end
end

local function live(ttl)
  redis.call('PEXPIRE', wk, ttl)
  redis.call('PEXPIRE', xk, ttl)
end

local function enqueue(run, ttl)
  redis.call('ZADD', wk, redis.call('INCR', b..':qseq'), run)
  redis.call('ZADD', xk, now + ttl, run)
  live(ttl)
end

local function take(run, token, hold)
  redis.call('HSET', hk, 'run', run, 'token', token)
  redis.call('PEXPIRE', hk, hold)
  unqueue(run)
end
`

// acquireScript: ARGV chat, run, token, strategy, place (a waiter's
// TTL), hold (the turn's TTL).
// {"granted"} | {"busy", line...} | {"queued", superseded...}
// A run takes back what its own id holds: the turn, or a place in the
// line, of the same run in a process that is gone (restarted, or taken
// over after the run's lease expired), which would otherwise block the
// chat until it expired or let the runs queued after it overtake it. A
// run back in its place keeps it: what is behind it stays behind it, and
// an interrupt supersedes only what is ahead of it. A reject leaves the
// place as it is (a launch tries for the turn with reject before it
// waits in the line), to be taken back or to expire.
var acquireScript = goredis.NewScript(queuePrelude + `
local run, token, s, place, hold = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
prune()
local holder = redis.call('HGET', hk, 'run')
local waiting = redis.call('ZRANGE', wk, 0, -1)
if holder == run or (not holder and (#waiting == 0 or waiting[1] == run)) then
  take(run, token, hold)
  return {'granted'}
end
local ahead, mine = {}, false
for _, r in ipairs(waiting) do
  if r == run then
    mine = true
    break
  end
  ahead[#ahead + 1] = r
end
local line = {}
if holder then line[1] = holder end
if s == 'reject' then
  for _, r in ipairs(waiting) do
    if r ~= run then line[#line + 1] = r end
  end
  table.insert(line, 1, 'busy')
  return line
end
if s ~= 'enqueue' then
  for _, r in ipairs(ahead) do
    redis.call('SET', b..':qs:'..r, run, 'PX', place)
    unqueue(r)
    line[#line + 1] = r
  end
end
if mine then
  redis.call('ZADD', xk, now + place, run)
  live(place)
else
  enqueue(run, place)
end
if s == 'enqueue' then return {'queued'} end
if #ahead > 0 then redis.call('PUBLISH', b..':turn', chat) end
table.insert(line, 1, 'queued')
return line
`)

// tryScript: ARGV chat, run, token, place, hold.
// {"granted"} | {"waiting"} | {"superseded", by} | {"gone"}
var tryScript = goredis.NewScript(queuePrelude + `
local run, token, place, hold = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local sk = b..':qs:'..run
local by = redis.call('GET', sk)
if by then
  redis.call('DEL', sk)
  return {'superseded', by}
end
prune()
if not redis.call('ZSCORE', wk, run) then return {'gone'} end
if redis.call('EXISTS', hk) == 0 and redis.call('ZRANGE', wk, 0, 0)[1] == run then
  take(run, token, hold)
  return {'granted'}
end
redis.call('ZADD', xk, 'XX', now + place, run)
live(place)
return {'waiting'}
`)

// abandonScript: ARGV chat, run. A waiter leaves the line.
var abandonScript = goredis.NewScript(queuePrelude + `
unqueue(ARGV[2])
redis.call('DEL', b..':qs:'..ARGV[2])
redis.call('PUBLISH', b..':turn', chat)
return 1
`)

// leaveScript: ARGV chat, run. A run that will never take its turn
// leaves the line for good: its place, a supersede waiting for it, and
// the turn if it holds it (a process that died while it did).
var leaveScript = goredis.NewScript(queuePrelude + `
local run = ARGV[2]
unqueue(run)
redis.call('DEL', b..':qs:'..run)
if redis.call('HGET', hk, 'run') == run then redis.call('DEL', hk) end
redis.call('PUBLISH', b..':turn', chat)
return 1
`)

// releaseTurnScript: ARGV chat, token.
var releaseTurnScript = goredis.NewScript(queuePrelude + `
if redis.call('HGET', hk, 'token') ~= ARGV[2] then return 0 end
redis.call('DEL', hk)
redis.call('PUBLISH', b..':turn', chat)
return 1
`)

// holdScript: ARGV hold (the turn's TTL), then chat, token pairs. Extends the turns still
// held; returns the tokens that are not.
var holdScript = goredis.NewScript(`
local b, lease, lost = KEYS[1], tonumber(ARGV[1]), {}
for i = 2, #ARGV, 2 do
  local hk = b..':qh:'..ARGV[i]
  if redis.call('HGET', hk, 'token') == ARGV[i + 1] then
    redis.call('PEXPIRE', hk, lease)
  else
    lost[#lost + 1] = ARGV[i + 1]
  end
end
return lost
`)

// ChatQueue is the multi-instance runcontrol.ChatQueue: one turn per chat
// across every process that shares the Controller's Prefix. The holder's
// process extends the turn's lease every PollInterval; a turn whose lease
// ran out (process dead, Redis unreachable for TurnTTL) passes to the
// next queued run, and its holder, if alive, is cancelled with
// runcontrol.ErrLeaseLost. Waiters wake on a pub/sub message and poll every
// PollInterval as a safety net. Safe for concurrent use; Close when done.
type ChatQueue struct {
	ctl     *Controller
	channel string
	ps      *goredis.PubSub

	mu      sync.Mutex
	closed  bool
	held    map[string]heldTurn                   // token -> turn
	watches map[string]map[chan struct{}]struct{} // chat -> wake-ups

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type heldTurn struct{ chat, run string }

var (
	_ runcontrol.ChatQueue = (*ChatQueue)(nil)
	_ runcontrol.Lingering = (*ChatQueue)(nil)
)

// NewChatQueue subscribes to the turn channel of ctl's prefix and starts
// the lease loop. It uses ctl's client, prefix, PollInterval and TurnTTL
// (the turn's and a waiter's place's lease); superseded runs are
// cancelled through ctl.
func NewChatQueue(ctx context.Context, ctl *Controller) (*ChatQueue, error) {
	q := &ChatQueue{
		ctl:     ctl,
		channel: ctl.base + ":turn",
		held:    make(map[string]heldTurn),
		watches: make(map[string]map[chan struct{}]struct{}),
	}
	q.ps = ctl.rdb.Subscribe(ctx, q.channel)
	if _, err := q.ps.Receive(ctx); err != nil {
		_ = q.ps.Close()
		return nil, fmt.Errorf("runcontrol/redis: subscribe %s: %w", q.channel, err)
	}
	loopCtx, stop := context.WithCancel(context.Background())
	q.stop = stop
	q.wg.Add(2)
	go q.receiveLoop(loopCtx)
	go q.holdLoop(loopCtx)
	return q, nil
}

func (q *ChatQueue) keys() []string { return []string{q.ctl.base} }

// Acquire implements runcontrol.ChatQueue.
func (q *ChatQueue) Acquire(ctx context.Context, chatID, runID string, s runcontrol.Strategy) (*runcontrol.Turn, error) {
	if err := runcontrol.CheckAcquire(chatID, runID, s); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return nil, runcontrol.ErrClosed
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	token := runID + "/" + hex.EncodeToString(rb[:])
	// A waiter's place outlives its process as long as a held turn does.
	place, hold := q.ctl.tttl.Milliseconds(), q.ctl.tttl.Milliseconds()

	wake := q.watch(chatID) // before the script: no release message is missed
	defer q.unwatch(chatID, wake)
	res, err := acquireScript.Run(ctx, q.ctl.rdb, q.keys(), chatID, runID, token, string(s), place, hold).StringSlice()
	if err == nil && len(res) == 0 {
		err = errors.New("empty script reply")
	}
	if err != nil {
		return nil, fmt.Errorf("runcontrol/redis: acquire turn of chat %s: %w", chatID, err)
	}
	var superseded []string
	switch res[0] {
	case "granted":
		return q.granted(chatID, runID, token, s, nil), nil
	case "busy":
		return nil, &runcontrol.BusyError{ChatID: chatID, RunIDs: res[1:]}
	case "queued":
		if len(res) > 1 {
			superseded = res[1:]
		}
	}
	runcontrol.Placed(ctx)
	if err := runcontrol.Supersede(ctx, q.ctl, chatID, runID, superseded); err != nil {
		q.abandon(chatID, runID)
		return nil, err
	}

	tick := time.NewTicker(q.ctl.poll)
	defer tick.Stop()
	for {
		res, err := tryScript.Run(ctx, q.ctl.rdb, q.keys(), chatID, runID, token, place, hold).StringSlice()
		if err == nil && len(res) == 0 {
			err = errors.New("empty script reply")
		}
		switch {
		case ctx.Err() != nil:
			q.abandon(chatID, runID)
			return nil, context.Cause(ctx)
		case err != nil:
			q.ctl.log.Warn("chat queue: try turn", "chat", chatID, "run", runID, "err", err)
		case res[0] == "granted":
			return q.granted(chatID, runID, token, s, superseded), nil
		case res[0] == "superseded" && len(res) > 1:
			return nil, runcontrol.SupersededBy(chatID, res[1])
		case res[0] == "gone":
			return nil, fmt.Errorf("runcontrol/redis: run %s lost its place in the queue of chat %s (lease expired)", runID, chatID)
		}
		select {
		case <-ctx.Done():
			q.abandon(chatID, runID)
			return nil, context.Cause(ctx)
		case <-wake:
		case <-tick.C:
		}
	}
}

func (q *ChatQueue) granted(chatID, runID, token string, s runcontrol.Strategy, superseded []string) *runcontrol.Turn {
	q.mu.Lock()
	q.held[token] = heldTurn{chat: chatID, run: runID}
	q.mu.Unlock()
	return runcontrol.NewTurn(chatID, runID, s, superseded, func() {
		q.mu.Lock()
		delete(q.held, token)
		q.mu.Unlock()
		q.releaseTurn(chatID, token)
	})
}

func (q *ChatQueue) releaseTurn(chatID, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), q.ctl.opTO)
	defer cancel()
	if err := releaseTurnScript.Run(ctx, q.ctl.rdb, q.keys(), chatID, token).Err(); err != nil {
		q.ctl.log.Warn("chat queue: release turn (its lease runs out by itself)", "chat", chatID, "err", err)
	}
}

func (q *ChatQueue) abandon(chatID, runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), q.ctl.opTO)
	defer cancel()
	if err := abandonScript.Run(ctx, q.ctl.rdb, q.keys(), chatID, runID).Err(); err != nil {
		q.ctl.log.Warn("chat queue: leave line (the place expires by itself)", "chat", chatID, "run", runID, "err", err)
	}
}

// Holder implements runcontrol.Lingering.
func (q *ChatQueue) Holder(ctx context.Context, chatID string) (string, error) {
	if err := runcontrol.ChatScope(chatID).Validate(); err != nil {
		return "", err
	}
	run, err := q.ctl.rdb.HGet(ctx, q.ctl.base+":qh:"+chatID, "run").Result()
	if errors.Is(err, goredis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("runcontrol/redis: the turn of chat %s: %w", chatID, err)
	}
	return run, nil
}

// Leave implements runcontrol.Lingering.
func (q *ChatQueue) Leave(ctx context.Context, chatID, runID string) error {
	if err := runcontrol.CheckAcquire(chatID, runID, runcontrol.Enqueue); err != nil {
		return err
	}
	if err := leaveScript.Run(ctx, q.ctl.rdb, q.keys(), chatID, runID).Err(); err != nil {
		return fmt.Errorf("runcontrol/redis: run %s leaves the line of chat %s: %w", runID, chatID, err)
	}
	return nil
}

func (q *ChatQueue) watch(chatID string) chan struct{} {
	ch := make(chan struct{}, 1)
	q.mu.Lock()
	if q.watches[chatID] == nil {
		q.watches[chatID] = make(map[chan struct{}]struct{})
	}
	q.watches[chatID][ch] = struct{}{}
	q.mu.Unlock()
	return ch
}

func (q *ChatQueue) unwatch(chatID string, ch chan struct{}) {
	q.mu.Lock()
	delete(q.watches[chatID], ch)
	if len(q.watches[chatID]) == 0 {
		delete(q.watches, chatID)
	}
	q.mu.Unlock()
}

func (q *ChatQueue) receiveLoop(ctx context.Context) {
	defer q.wg.Done()
	for {
		msg, err := q.ps.ReceiveTimeout(ctx, healthInterval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// go-redis re-subscribes on the next receive; waiters poll
			// meanwhile.
			if !isTimeout(err) {
				q.ctl.log.Warn("chat queue: pub/sub receive", "err", err)
				if !sleepCtx(ctx, 100*time.Millisecond) {
					return
				}
			} else {
				_ = q.ps.Ping(ctx)
			}
			continue
		}
		m, ok := msg.(*goredis.Message)
		if !ok {
			continue
		}
		q.mu.Lock()
		for ch := range q.watches[m.Payload] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		q.mu.Unlock()
	}
}

// holdLoop extends the leases of the turns this process holds; a turn that
// was lost has its run here cancelled with ErrLeaseLost.
func (q *ChatQueue) holdLoop(ctx context.Context) {
	defer q.wg.Done()
	tick := time.NewTicker(q.ctl.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		q.mu.Lock()
		args := []any{q.ctl.tttl.Milliseconds()}
		for token, h := range q.held {
			args = append(args, h.chat, token)
		}
		q.mu.Unlock()
		if len(args) == 1 {
			continue
		}
		opCtx, cancel := context.WithTimeout(ctx, q.ctl.opTO)
		lost, err := holdScript.Run(opCtx, q.ctl.rdb, q.keys(), args...).StringSlice()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				q.ctl.log.Warn("chat queue: extend turn leases", "err", err)
			}
			continue
		}
		for _, token := range lost {
			// Released meanwhile (deleted before its release script ran,
			// so before this answer): not lost.
			q.mu.Lock()
			h, ok := q.held[token]
			delete(q.held, token)
			q.mu.Unlock()
			if !ok {
				continue
			}
			q.ctl.log.Warn("chat queue: turn lease lost", "chat", h.chat, "run", h.run)
			// Only the run here: the same run may be bound in another
			// process now, which recovered it and took its turn back.
			ce, _ := runcontrol.NewCancelError(runcontrol.RunScope(h.run),
				fmt.Errorf("%w: turn of chat %s", runcontrol.ErrLeaseLost, h.chat))
			q.ctl.cancelHere(h.run, "", ce)
		}
	}
}

// Close stops the queue's loops and releases the turns still held here.
// It does not close the Controller. Idempotent.
func (q *ChatQueue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	held := q.held
	q.held = make(map[string]heldTurn)
	q.mu.Unlock()
	q.stop()
	err := q.ps.Close()
	q.wg.Wait()
	for token, h := range held {
		q.releaseTurn(h.chat, token)
	}
	if err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("runcontrol/redis: close chat queue pub/sub: %w", err)
	}
	return nil
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// sleepCtx waits d unless ctx ends first (then it reports false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
