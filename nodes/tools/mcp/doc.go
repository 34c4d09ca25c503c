// Package mcp makes the tools of MCP servers (Model Context Protocol)
// chatgraph tools, through the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) as a client.
//
// A Server is one configured MCP server — a command spoken to over stdio,
// or a Streamable HTTP endpoint. It connects lazily on first use, keeps
// one session, lists its tools (cached until the server says its tool
// list changed) and reconnects after the session broke. It is a
// tools.Source: add it to a tools.Registry and a tool node names its
// tools "server/tool".
//
//	srv, err := mcp.New(mcp.Config{Name: "everything", Command: "npx",
//		Args: []string{"-y", "@modelcontextprotocol/server-everything"}})
//	_ = registry.AddSource("everything", srv) // tool nodes: "everything/echo"
//	defer srv.Close()                         // ends the session and the process
//
// A call honours ctx: cancelling it (the run was cancelled, the node timed
// out) sends notifications/cancelled to the server and returns at once.
// A tool that reports isError, or a failed call, is an error the agent
// hands the model as the call's result.
package mcp
