// Package redis is the multi-instance runcontrol.Controller and
// runcontrol.ChatQueue, for deployments where several server processes
// share one Redis:
//
//	ctl, err := redis.New(ctx, redis.Config{Client: rdb, Prefix: "chatgraph:prod", Logger: log})
//	if err != nil { ... }
//	defer ctl.Close()            // before rdb.Close()
//	queue, err := redis.NewChatQueue(ctx, ctl)
//	if err != nil { ... }
//	defer queue.Close()          // before ctl.Close()
//
// Every operation is one Lua script on keys under "{Prefix}:" (one hash
// tag, so one cluster slot), which makes Bind and Cancel atomic with
// respect to each other: a cancel is either stored as an intent before a
// Bind looks for it, or finds the binding. A cancel reaches the process
// running the run through pub/sub on "{Prefix}:cancel"; if that message is
// lost (a reconnect), the stored cancel mark is found by the owner's poll
// (every PollInterval, and at once after re-subscribing) or by Check,
// which the runtime calls at node start.
//
// Bindings carry a lease (BindingTTL) their process extends at every poll,
// so a crashed process's runs stop being listed; if Redis loses its data,
// every live process re-writes its bindings at the next poll. Pending
// intents and cancel marks are lost with the data; the durable store stays
// the source of truth for run status.
//
// The chat queue keeps one turn per chat across processes: the holder's
// process extends the turn's lease; queued runs take the turn themselves
// when it is free, woken by pub/sub on "{Prefix}:turn" or by their poll.
package redis
