package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"chatgraph/internal/mcptest"
	"chatgraph/nodes/tools"
	"chatgraph/nodes/tools/mcp"
)

func names(ts []tools.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Spec().Name)
	}
	return out
}

func find(t *testing.T, ts []tools.Tool, name string) tools.Tool {
	t.Helper()
	for _, x := range ts {
		if x.Spec().Name == name {
			return x
		}
	}
	t.Fatalf("no tool %q in %v", name, names(ts))
	return nil
}

func everything(t *testing.T) *mcp.Server {
	t.Helper()
	cmd, args := mcptest.Everything(t)
	srv, err := mcp.New(mcp.Config{Name: "everything", Command: cmd, Args: args})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// server-everything, a real MCP server, over stdio: its tools with their
// schemas, a call, a failing call, and a cancel in the middle of a long
// call after which the session still works.
func TestEverythingOverStdio(t *testing.T) {
	t.Parallel()
	srv := everything(t)
	ctx := context.Background()
	ts, err := srv.Tools(ctx)
	require.NoError(t, err)
	sum := find(t, ts, "get-sum")
	require.Equal(t, "Returns the sum of two numbers", sum.Spec().Description)
	var schema struct {
		Type       string         `json:"type"`
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	require.NoError(t, json.Unmarshal(sum.Spec().Parameters, &schema))
	require.Equal(t, "object", schema.Type)
	require.ElementsMatch(t, []string{"a", "b"}, schema.Required)

	out, err := sum.Invoke(ctx, tools.Call{ID: "1", Arguments: json.RawMessage(`{"a":2,"b":3}`)})
	require.NoError(t, err)
	require.Equal(t, "The sum of 2 and 3 is 5.", out)

	// The server rejects arguments its schema does not allow: an error
	// the model can read, not a crash.
	_, err = sum.Invoke(ctx, tools.Call{ID: "2", Arguments: json.RawMessage(`{"a":"two"}`)})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "connection closed")

	long := find(t, ts, "trigger-long-running-operation")
	cctx, cancel := context.WithCancelCause(ctx)
	cause := errors.New("run cancelled")
	time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	_, err = long.Invoke(cctx, tools.Call{ID: "3", Arguments: json.RawMessage(`{"duration":30,"steps":30}`)})
	require.ErrorIs(t, err, cause)
	require.Less(t, time.Since(start), 10*time.Second, "the call returned when cancelled, not when the 30 s operation ended")

	// Same session, still usable.
	out, err = sum.Invoke(ctx, tools.Call{ID: "4", Arguments: json.RawMessage(`{"a":40,"b":2}`)})
	require.NoError(t, err)
	require.Equal(t, "The sum of 40 and 2 is 42.", out)

	require.NoError(t, srv.Close())
	_, err = srv.Tools(ctx)
	require.ErrorIs(t, err, mcp.ErrClosed)
}

// An MCP server over Streamable HTTP (the Go SDK's own server, in
// process): configured headers are sent, tools/list changes are picked
// up, isError results are errors, and a server that went away is
// reconnected.
func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	server := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "greet", Description: "Greets.", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &a)
			if a.Name == "" {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "name is empty"}}}, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hello " + a.Name}}}, nil
		})
	var auth atomic.Value
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)

	srv, err := mcp.New(mcp.Config{Name: "web", URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer t0k"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	ts, err := srv.Tools(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"greet"}, names(ts))
	require.Equal(t, "Bearer t0k", auth.Load())

	out, err := ts[0].Invoke(ctx, tools.Call{Arguments: json.RawMessage(`{"name":"Ada"}`)})
	require.NoError(t, err)
	require.Equal(t, "hello Ada", out)
	_, err = ts[0].Invoke(ctx, tools.Call{Arguments: json.RawMessage(`{"name":""}`)})
	require.EqualError(t, err, "name is empty")

	// A tool added while connected: the server notifies, the next
	// listing has it.
	server.AddTool(&sdk.Tool{Name: "farewell.v2", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "bye"}}}, nil
		})
	require.Eventually(t, func() bool {
		ts, err = srv.Tools(ctx)
		return err == nil && len(ts) == 2
	}, 10*time.Second, 20*time.Millisecond)
	require.ElementsMatch(t, []string{"greet", "farewell_v2"}, names(ts), "names models reject are sanitised")
	out, err = find(t, ts, "farewell_v2").Invoke(ctx, tools.Call{})
	require.NoError(t, err)
	require.Equal(t, "bye", out)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg mcp.Config
		msg string
	}{
		{mcp.Config{Name: "a/b", Command: "x"}, "invalid server name"},
		{mcp.Config{Name: "x"}, "set command"},
		{mcp.Config{Name: "x", Command: "c", URL: "http://h"}, "not both"},
		{mcp.Config{Name: "x", URL: "ftp://h"}, "http or https"},
	} {
		_, err := mcp.New(tc.cfg)
		require.ErrorContains(t, err, tc.msg)
	}
}

// A command that is not an MCP server: a clear error, and no panic.
func TestConnectFailure(t *testing.T) {
	t.Parallel()
	srv, err := mcp.New(mcp.Config{Name: "bad", Command: "/bin/true", ConnectTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer srv.Close()
	_, err = srv.Tools(context.Background())
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "connect"), err.Error())
}
