// Package mcptest finds the MCP servers chatgraph's tests run for real:
// @modelcontextprotocol/server-everything, pinned in package.json and
// package-lock.json beside this file and installed by `make test`
// (`make mcp-test-servers`, i.e. npm ci here).
//
//	cmd, args := mcptest.Everything(t) // skips, or fails with CI=true, when not installed
//
// Test code only.
package mcptest
