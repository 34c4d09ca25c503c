// Package redisrelay is the Redis transport.Relay: live events of a run
// executing in one server process reach the followers in the others over
// Redis pub/sub, one channel per run.
//
//	relay, err := redisrelay.New(ctx, redisrelay.Config{Client: rdb, Prefix: "chatgraph"})
//	defer relay.Close()
//	srv, err := transport.New(transport.Config{Relay: relay, ...})
//
// Publishing never blocks a run: events go through a bounded queue to one
// publisher goroutine (pipelined PUBLISH); when Redis is slow the queue
// overflows and events are dropped, which followers fill from the event
// log. One pub/sub connection per process serves every follower.
package redisrelay
