// Package runtime is chatgraph's graph kernel: the graph model, strict
// validation, compilation into cached immutable plans, a dynamic parallel
// scheduler, edge routing (when/condition/join), retries, timeouts,
// interrupts, link materialization, the node lifecycle event contract and
// checkpoints with replay on resume.
//
// It is generic: it knows node types only through the Registry (ports and
// an executor factory each) and never names a domain concept. Domain
// dependencies reach executors through FlowContext.Services.
//
// Build, compile, run:
//
//	reg := runtime.NewRegistry()
//	reg.MustRegister(runtime.NodeType{Name: "upper", Ports: ..., New: newUpper})
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: memory.New()})
//	res, err := eng.Invoke(ctx, runtime.RunRequest{Graph: g, Input: "hi", Sink: sink})
//
// Lifecycle contract, enforced here and not by executors: a run emits one
// run_started first and one terminal run event last; every executed node
// emits exactly one node_started and exactly one terminal event
// (node_completed, node_failed, node_cancelled or node_interrupted), with
// retries and domain events in between; a node that never executes emits
// only node_skipped. After a node's terminal event one edge_taken follows
// per taken outgoing flow edge, before the target starts. Seq numbers start
// at 1 per run and have no gaps.
//
// Scheduling: a node is ready when every incoming flow edge from an active
// node is resolved (taken or dead); join "all" needs all taken, "any" at
// least one. Ready nodes run in parallel up to the run's MaxParallel and
// the engine-wide GlobalMaxParallel, in rank order (priority, then depth,
// then id); there is no level barrier. Each node gets its own copy of its
// inputs and outputs are keyed by node id, so results do not depend on
// timing.
package runtime
