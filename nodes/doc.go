// Package nodes holds chatgraph's built-in node types — chat_start, agent,
// tool, router, template, approval, chat_output, delay, flaky — and all
// their domain behaviour (LLM calls, tool loops, approvals). The runtime
// kernel stays generic; this package plugs into it through
// runtime.NodeType, one file per type.
//
// Register the types explicitly at start-up:
//
//	reg := runtime.NewRegistry()
//	err := nodes.Register(reg, nodes.Deps{Models: models, Tools: toolReg, Ledger: nodes.NewStoreLedger(store)})
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: store})
//
// A chat run passes a ChatInput as the run input and the run's chat scope
// (package chatscope) in the services:
//
//	in := nodes.ChatInput{History: branch, Content: "hi", UserTools: []string{"calculator"}}
//	eng.Invoke(ctx, runtime.RunRequest{Graph: g, Input: in.Value(),
//		Services: &nodes.Services{Scope: chatscope.New(g, entries)}})
//
// An application that keeps the chat itself passes a reference instead of
// the branch (ChatInput.HistoryFrom) and a HistorySource that reads it
// (Services.History), so run records do not copy the chat (package chat
// does).
//
// Payloads between nodes are Messages in their JSON form
// ({"role","content","name"?,"metadata"?}); read any payload with
// AsMessage. Agents stream node_delta, tool_call and tool_result events;
// tools with requireApproval interrupt the run with approval_required and
// resume with {"approved": bool, "reason"?}. A Ledger records completed
// tool calls (and the model steps that led to them) by idempotency key, so
// a resumed or retried agent never executes a completed call again; a
// StoreLedger keeps them in a store implementing runtime.EffectLedger, so
// that holds across restarts and processes (the default MemoryLedger
// forgets on restart).
//
// Subpackages: llm (model providers: the offline echo model and an
// OpenAI-compatible client) and tools (the tool registry and built-ins).
package nodes
