// Package transport is chatgraph's outside face, an adapter over
// chat.Service: the echo HTTP API of docs/api.md and docs/openapi.json,
// Server-Sent Events and the WebSocket protocol, one event hub fed by the
// service's runs (the Server is its chat.Publisher), and metrics.
//
// HTTP routes and WebSocket frames become the same client command and go
// through one table (commands.go) onto the service, so validation, cancel
// fallbacks and error texts are written once. Two protocol adapters
// speak other clients' contracts onto the same service and event stream:
// AG-UI 1.0 (agui.go, POST /api/v1/ag-ui/graphs/{id}) and the OpenAI chat
// completions API (openai.go, /v1/models and /v1/chat/completions, errors
// in OpenAI's shape); what they share is in adapter.go. The transport
// reaches no node type and no store implementation: cmd/server wires those.
//
//	svc, _ := chat.New(chat.Config{Engine: eng, Store: chats, Control: ctl})
//	srv, _ := transport.New(transport.Config{Chat: svc})
//	srv.Start(ctx)                     // the service's recovery and retention
//	http.ListenAndServe(addr, srv.Handler())
//	srv.Shutdown(ctx)                  // drain, then cancel with cause "shutdown"
//
// Errors map to status codes and {error:{code,message,details}} bodies in
// one table (errors.go); a 5xx never carries a stack trace.
package transport
