package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"chatgraph/nodes/tools"
	"chatgraph/nodes/tools/mcp"
)

// With CHATGRAPH_MCP_TEST_SERVER=1 the test binary is a stdio MCP server
// (the Go SDK's) with tools that report its process and environment, and
// one that makes it exit.
func TestMain(m *testing.M) {
	if os.Getenv("CHATGRAPH_MCP_TEST_SERVER") == "1" {
		serveStdio()
		return
	}
	os.Exit(m.Run())
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

func serveStdio() {
	server := sdk.NewServer(&sdk.Implementation{Name: "test-stdio", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	server.AddTool(&sdk.Tool{Name: "pid", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text(strconv.Itoa(os.Getpid())), nil
	})
	server.AddTool(&sdk.Tool{Name: "env", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text(os.Getenv("FROM_CONFIG") + "|" + os.Getenv("CHATGRAPH_PARENT_SECRET")), nil
	})
	server.AddTool(&sdk.Tool{Name: "crash", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	_ = server.Run(context.Background(), &sdk.StdioTransport{})
}

func invoke(t *testing.T, srv *mcp.Server, name string) (string, error) {
	t.Helper()
	ts, err := srv.Tools(context.Background())
	require.NoError(t, err)
	return find(t, ts, name).Invoke(context.Background(), tools.Call{})
}

// A stdio server gets only its configured environment plus the basics
// (never chatgraph's secrets); when its process dies the call fails with
// an error the model reads, and the next use starts a new process.
func TestStdioEnvironmentAndReconnect(t *testing.T) {
	t.Setenv("CHATGRAPH_PARENT_SECRET", "do-not-leak")
	exe, err := os.Executable()
	require.NoError(t, err)
	srv, err := mcp.New(mcp.Config{Name: "local", Command: exe,
		Env: map[string]string{"CHATGRAPH_MCP_TEST_SERVER": "1", "FROM_CONFIG": "configured"}})
	require.NoError(t, err)
	defer srv.Close()

	out, err := invoke(t, srv, "env")
	require.NoError(t, err)
	require.Equal(t, "configured|", out)

	pid1, err := invoke(t, srv, "pid")
	require.NoError(t, err)
	_, err = invoke(t, srv, "crash")
	require.Error(t, err, "the process died during the call")

	pid2, err := invoke(t, srv, "pid")
	require.NoError(t, err, "reconnected")
	require.NotEqual(t, pid1, pid2, "a new process serves the session")
}
