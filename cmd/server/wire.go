package main

import (
	"log/slog"
	"time"

	"chatgraph/chat"
	setupcfg "chatgraph/config"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/transport"
)

// syncObservable is a run store that syncs its writes itself and times
// each sync (the SQLite store: rsqlite.Store.ObserveSyncs).
type syncObservable interface {
	ObserveSyncs(func(d time.Duration, err error))
}

// walSyncOp is the op under which /metrics times the SQLite store's WAL
// syncs (chatgraph_store_operation_duration_seconds).
const walSyncOp = "wal_sync"

// newServer wires the layers: the engine on the run store, the chat
// service on the engine and the chat store, the transport on the service.
// relay may be nil (one process, or followers reading the log).
func newServer(c *config, st *stores, reg *runtime.Registry, setup *setupcfg.Setup, ctl runcontrol.Controller, queue runcontrol.ChatQueue,
	relay transport.Relay, log *slog.Logger) (*transport.Server, error) {
	metrics := transport.NewRegistry()
	observe := transport.StoreObserver(metrics)
	if s, ok := st.runs.(syncObservable); ok {
		// The SQLite store's own WAL syncs, timed beside its calls.
		s.ObserveSyncs(func(d time.Duration, err error) { observe(walSyncOp, d, err) })
	}
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: st.runs, Durability: runtime.Durability(c.durability),
		MaxRunDuration: c.maxRunDuration, Logger: log, StoreObserver: observe, CommitObserver: transport.CommitObserver(metrics),
		Owner: c.owner, LeaseTTL: c.leaseTTL})
	if err != nil {
		return nil, err
	}
	svc, err := chat.New(chat.Config{Engine: eng, Store: st.chats, Control: ctl, Queue: queue, DrainTimeout: c.drainTimeout,
		Retention: c.retention, InterruptedRetention: c.interruptedRetention, Logger: log, RecoveryInterval: c.recoveryInterval(),
		MaxRunsPerClient: c.maxRunsPerClient, MaxChatsPerClient: c.maxChatsPerClient, MaxStartingTurns: c.maxStartingTurns,
		BusyStartingTurns: c.busyStartingTurns, BusyCommitLag: c.busyCommitLag, Tools: setup.Tools})
	if err != nil {
		eng.Close()
		return nil, err
	}
	nodeTypes, models := catalog(reg, setup)
	srv, err := transport.New(transport.Config{Chat: svc, Relay: relay, Token: c.token, AllowedOrigins: splitList(c.allowedOrigins),
		AllowedHosts: splitList(c.allowedHosts), TrustedProxies: splitList(c.trustedProxies),
		BodyLimit: c.bodyLimit, BodyReadTimeout: c.bodyReadTimeout, RateLimit: c.rateLimit, MaxWebSocketsPerIP: c.maxWebSocketsPerIP,
		UI: webUI(), Logger: log, Metrics: metrics, NodeTypes: nodeTypes, Models: models})
	if err != nil {
		eng.Close()
		return nil, err
	}
	return srv, nil
}
