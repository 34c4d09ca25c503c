package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir is the npm project holding the test servers.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Everything returns the command that starts server-everything over
// stdio. When node or the package is missing the test is skipped — or,
// with CI=true, fails: there the servers are part of the test set-up.
func Everything(t testing.TB) (string, []string) {
	t.Helper()
	script := filepath.Join(Dir(), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		msg := "MCP test server not installed (run make mcp-test-servers): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, []string{script, "stdio"}
}
