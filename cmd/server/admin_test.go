package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func cli(t *testing.T, stateDir string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	env := map[string]string{"CHATGRAPH_STATE_DIR": stateDir, "CHATGRAPH_LOG_LEVEL": "warn"}
	err := Main(context.Background(), Env{Args: args, Getenv: func(k string) string { return env[k] }, Stdout: &out, Stderr: io.Discard})
	return out.String(), err
}

// The inspection commands work on the state a server left behind: list,
// show (with checkpoint ids), resume an interrupted run, and gc.
func TestRunsCommands(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	g := map[string]any{"name": "approve", "nodes": []any{
		map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
		map[string]any{"id": "gate", "type": "approval", "position": map[string]any{"x": 1, "y": 0}, "data": map[string]any{"prompt": "ok?"}},
		map[string]any{"id": "out", "type": "chat_output", "position": map[string]any{"x": 2, "y": 0}, "data": map[string]any{}},
	}, "edges": []any{
		map[string]any{"id": "e1", "source": "start", "sourceHandle": "message", "target": "gate", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
		map[string]any{"id": "e2", "source": "gate", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": map[string]any{"channel": "flow"}},
	}}
	var gr, ch, ack map[string]any
	require.Equal(t, http.StatusCreated, call(t, "POST", s.url+"/api/v1/graphs", g, &gr))
	require.Equal(t, http.StatusCreated, call(t, "POST", s.url+"/api/v1/chats", map[string]any{"graphId": gr["id"]}, &ch))
	require.Equal(t, http.StatusAccepted, call(t, "POST", s.url+"/api/v1/chats/"+ch["id"].(string)+"/messages", map[string]any{"content": "hi"}, &ack))
	runID := ack["runId"].(string)
	require.Eventually(t, func() bool {
		var run map[string]any
		call(t, "GET", s.url+"/api/v1/runs/"+runID, nil, &run)
		return run["status"] == "interrupted"
	}, 10*time.Second, 20*time.Millisecond)
	s.shutdown(t)

	out, err := cli(t, dir, "runs", "list", "--status", "interrupted")
	require.NoError(t, err)
	require.Contains(t, out, runID)
	require.Contains(t, out, "interrupted")

	out, err = cli(t, dir, "runs", "show", runID)
	require.NoError(t, err)
	require.Contains(t, out, "pending interrupt")
	require.Regexp(t, `gate\s+interrupted`, out)
	require.Contains(t, out, runID+"@", "checkpoint ids are listed")

	out, err = cli(t, dir, "runs", "resume", runID, "--value", `{"approved":true}`)
	require.NoError(t, err)
	require.Contains(t, out, `"type":"run_completed"`)
	require.Contains(t, out, `"replayed":true`, "the finished start node is replayed, not executed")

	_, err = cli(t, dir, "runs", "resume", runID, "--value", `{"approved":true}`)
	require.Error(t, err, "a continued run is not resumed twice")

	out, err = cli(t, dir, "gc", "--older-than", "1ns")
	require.NoError(t, err)
	require.Regexp(t, `deleted [1-9]\d* finished runs`, out)
	out, err = cli(t, dir, "runs", "list")
	require.NoError(t, err)
	// The completed continuation is gone; the interrupted parent is kept.
	require.Equal(t, 2, strings.Count(out, "\n"), "header and the interrupted run: %s", out)
	require.Contains(t, out, runID)

	out, err = cli(t, dir, "gc", "--older-than", "1ns", "--interrupted-older-than", "1ns")
	require.NoError(t, err)
	require.Contains(t, out, "deleted 1 runs interrupted for longer than 1ns")
	out, err = cli(t, dir, "runs", "list")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "\n"), "only the header is left: %s", out)

	_, err = cli(t, dir, "runs", "show")
	require.Error(t, err)
	_, err = cli(t, dir, "gc", "--older-than", "soon")
	require.Error(t, err)
}
