// Package chatscope derives a chat run's scope policy from the graph's
// flow topology — pure functions of (compiled plan, entry node ids), no
// I/O; the run's active subgraph is the kernel's own (Plan.ActiveNodes):
//
//   - Entry agents: agents on the run's active subgraph (what the entry
//     nodes reach by flow edges) with no active agent upstream. They get
//     the chat history; every other agent gets only its upstream payload.
//   - IncludeUserTools: true for an entry agent reached from chat_start
//     nodes whose includeUserTools (default true) is true, through any
//     intermediate non-agent nodes (templates, routers, delays...).
//
// The chat runner builds a Scope once per run and hands it to executors
// in the run's services (nodes.Services{Scope: s}); agents read it through
// the nodes.ChatScope interface, never by importing this package:
//
//	p, err := eng.Compile(graph)
//	s := chatscope.New(p, entryIDs)
//	eng.Invoke(ctx, runtime.RunRequest{Plan: p, EntryNodeIDs: entryIDs,
//		Services: &nodes.Services{Scope: s}, ...})
package chatscope
