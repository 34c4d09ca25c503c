package redisrelay

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"chatgraph/transport"
)

// Config configures New.
type Config struct {
	// Client is the Redis connection (required; not closed by Close).
	Client goredis.UniversalClient
	// Prefix names the channels "{Prefix}:ev:<run id>" (default "chatgraph").
	Prefix string
	// Queue bounds the events waiting to be published (default 8192).
	Queue int
	// Logger (default: discard).
	Logger *slog.Logger
}

// Relay implements transport.Relay. Safe for concurrent use.
type Relay struct {
	rdb    goredis.UniversalClient
	prefix string
	log    *slog.Logger
	out    chan outEvent
	ps     *goredis.PubSub

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	subs map[string]map[chan transport.RelayEvent]struct{} // channel name -> followers
}

type outEvent struct {
	channel string
	payload string
}

var _ transport.Relay = (*Relay)(nil)

// New starts the relay's publisher and receiver.
func New(ctx context.Context, cfg Config) (*Relay, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisrelay: Config.Client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "chatgraph"
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 8192
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	r := &Relay{rdb: cfg.Client, prefix: cfg.Prefix, log: cfg.Logger, out: make(chan outEvent, cfg.Queue),
		subs: map[string]map[chan transport.RelayEvent]struct{}{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.ps = cfg.Client.Subscribe(r.ctx)
	r.wg.Add(2)
	go r.publishLoop()
	go r.receiveLoop()
	return r, nil
}

func (r *Relay) channel(runID string) string { return r.prefix + ":ev:" + runID }

// Publish implements transport.Relay.
func (r *Relay) Publish(runID string, seq int64, typ string, envelope []byte) {
	ev := outEvent{channel: r.channel(runID), payload: strconv.FormatInt(seq, 10) + "\t" + typ + "\t" + string(envelope)}
	select {
	case r.out <- ev:
	default: // Redis is behind: followers read this one from the log
	}
}

func (r *Relay) publishLoop() {
	defer r.wg.Done()
	batch := make([]outEvent, 0, 256)
	for {
		select {
		case ev := <-r.out:
			batch = append(batch[:0], ev)
		drain:
			for len(batch) < cap(batch) {
				select {
				case ev := <-r.out:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			_, err := r.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, ev := range batch {
					p.Publish(ctx, ev.channel, ev.payload)
				}
				return nil
			})
			cancel()
			if err != nil && r.ctx.Err() == nil {
				r.log.Warn("relay: publish", "events", len(batch), "err", err)
			}
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *Relay) receiveLoop() {
	defer r.wg.Done()
	for {
		msg, err := r.ps.ReceiveTimeout(r.ctx, 30*time.Second)
		if r.ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				_ = r.ps.Ping(r.ctx)
				continue
			}
			r.log.Warn("relay: receive", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.ctx.Done():
				return
			}
			continue
		}
		m, ok := msg.(*goredis.Message)
		if !ok {
			continue
		}
		seqText, rest, ok1 := strings.Cut(m.Payload, "\t")
		typ, env, ok2 := strings.Cut(rest, "\t")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if !ok1 || !ok2 || err != nil {
			continue
		}
		ev := transport.RelayEvent{Seq: seq, Type: typ, Envelope: []byte(env)}
		r.mu.Lock()
		for ch := range r.subs[m.Channel] {
			select {
			case ch <- ev:
			default: // a slow follower fills the gap from the log
			}
		}
		r.mu.Unlock()
	}
}

// Subscribe implements transport.Relay.
func (r *Relay) Subscribe(ctx context.Context, runID string) (<-chan transport.RelayEvent, func(), error) {
	name := r.channel(runID)
	ch := make(chan transport.RelayEvent, 1024)
	// The lock covers the SUBSCRIBE/UNSUBSCRIBE writes, so a follower
	// arriving as the last one of a run leaves is never unsubscribed.
	r.mu.Lock()
	if len(r.subs[name]) == 0 {
		if err := r.ps.Subscribe(ctx, name); err != nil {
			r.mu.Unlock()
			return nil, nil, err
		}
		r.subs[name] = map[chan transport.RelayEvent]struct{}{}
	}
	r.subs[name][ch] = struct{}{}
	r.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(func() { r.remove(name, ch) }) }, nil
}

func (r *Relay) remove(name string, ch chan transport.RelayEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subs[name], ch)
	close(ch)
	if len(r.subs[name]) == 0 {
		delete(r.subs, name)
		if r.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			defer cancel()
			_ = r.ps.Unsubscribe(ctx, name)
		}
	}
}

// Close stops the relay. Idempotent.
func (r *Relay) Close() error {
	r.cancel()
	err := r.ps.Close()
	r.wg.Wait()
	return err
}
