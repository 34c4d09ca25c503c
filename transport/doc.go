// Package transport is chatgraph's outside face: the echo HTTP API of
// docs/api.md and docs/openapi.json, Server-Sent Events and the WebSocket
// protocol, all over one event hub fed by the runtime's event sink.
//
// Every chat action — stream_chat, stream_agent_chat, continue_message,
// retry_message, edit_user_message, and run resume — builds one run request
// and goes through ONE runner: it compiles the graph, scopes it
// (chatscope), binds run control before revealing the run id (so a cancel
// sent earlier still wins), takes the chat's turn (double-texting
// strategy), writes the message tree and executes the run on the runtime.
// Chats and graphs live in a chatstore (memory, SQLite, Postgres); runs,
// checkpoints and event logs in the runtime's store.
//
//	srv, _ := transport.New(transport.Config{Registry: reg, Store: runs, Chats: chats, Control: ctl, Queue: queue})
//	srv.Start(ctx)                     // recovery of runs whose process died
//	http.ListenAndServe(addr, srv.Handler())
//	srv.Shutdown(ctx)                  // drain, then cancel with cause "shutdown"
//
// Errors map to status codes and {error:{code,message,details}} bodies in
// one table (errors.go); a 5xx never carries a stack trace.
package transport
