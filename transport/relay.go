package transport

import "context"

// Relay carries live events between server processes, so a process
// streams a run executing in another one as it happens (without a relay
// it reads the shared event log every PollInterval). It is optional and
// lossy by design: the event log in the store stays the source of truth,
// and a follower fills any gap from it. Implementations are safe for
// concurrent use; transport/redisrelay is the Redis one.
type Relay interface {
	// Publish hands one event of a run executing here to the other
	// processes. It must never block the run: drop rather than wait.
	Publish(runID string, seq int64, typ string, envelope []byte)
	// Subscribe delivers the events other processes publish for runID
	// until stop is called. The channel may skip events (never reorder a
	// publisher's); it is closed after stop.
	Subscribe(ctx context.Context, runID string) (events <-chan RelayEvent, stop func(), err error)
}

// RelayEvent is one event as a Relay delivers it.
type RelayEvent struct {
	Seq      int64
	Type     string
	Envelope []byte
}
