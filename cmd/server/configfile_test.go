package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/mcptest"
)

// replayOpenAI serves a recorded OpenAI stream and records the
// Authorization headers it receives.
func replayOpenAI(t *testing.T) (*httptest.Server, func() []string) {
	raw, err := os.ReadFile("../../nodes/llm/testdata/openai/text.http")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), auth...) }
}

// The server with a --config file: its providers' models and its MCP
// server's tools are offered to the editor (never a secret), an agent
// uses a configured provider with the key from the environment, and a
// tool node calls a tool of the MCP server.
func TestConfigFileProvidersAndMCP(t *testing.T) {
	t.Parallel()
	node, args := mcptest.Everything(t)
	llmSrv, auth := replayOpenAI(t)
	dir := t.TempDir()
	cfg := map[string]any{
		"providers": map[string]any{"local": map[string]any{"type": "openai", "baseURL": llmSrv.URL + "/v1",
			"apiKeyEnv": "TEST_LLM_KEY", "models": []string{"gpt-test"}}},
		"mcpServers": map[string]any{"everything": map[string]any{"command": node, "args": args}},
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(dir, "chatgraph.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	s := startServerEnv(t, filepath.Join(dir, "state"), map[string]string{"TEST_LLM_KEY": "sk-e2e-secret", "CHATGRAPH_CONFIG": path})

	req, _ := http.NewRequest("GET", s.url+"/api/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(raw), "sk-e2e-secret")
	require.NotContains(t, string(raw), llmSrv.URL)
	var models struct {
		Models []struct{ ID, Provider, Type string }
	}
	require.NoError(t, json.Unmarshal(raw, &models))
	var ids []string
	for _, m := range models.Models {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"echo", "local/gpt-test"}, ids)

	var nts []struct {
		Type       string
		DataSchema struct {
			Properties struct {
				Name  struct{ Enum []string }
				Model struct{ Examples []string }
			}
		}
		Tools []struct {
			Name, Description, Server string
			Parameters                map[string]any
		}
	}
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/api/v1/node-types", nil, &nts))
	var found bool
	for _, nt := range nts {
		if nt.Type == "agent" {
			require.Equal(t, []string{"echo", "local/gpt-test"}, nt.DataSchema.Properties.Model.Examples)
		}
		if nt.Type != "tool" {
			require.Empty(t, nt.Tools)
			continue
		}
		require.Contains(t, nt.DataSchema.Properties.Name.Enum, "calculator")
		require.Contains(t, nt.DataSchema.Properties.Name.Enum, "everything/get-sum")
		for _, tool := range nt.Tools {
			if tool.Name == "everything/get-sum" {
				found = true
				require.Equal(t, "everything", tool.Server)
				require.Equal(t, "Returns the sum of two numbers", tool.Description)
				require.Equal(t, "object", tool.Parameters["type"])
			}
		}
	}
	require.True(t, found, "the MCP tool is in the palette")

	// An agent on the configured provider: the key from the environment
	// reaches the API.
	chatID := newChat(t, s.url, `{"model":"local/gpt-test"}`)
	types, _ := sse(t, s.url+"/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi"})
	require.Equal(t, "run_completed", types[len(types)-1])
	require.Equal(t, []string{"Bearer sk-e2e-secret"}, auth())
	var chat struct {
		Messages []struct{ Role, Content string }
	}
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/api/v1/chats/"+chatID, nil, &chat))
	require.Equal(t, "Hello! How can I help?", chat.Messages[len(chat.Messages)-1].Content)

	// A tool node naming the MCP server's tool.
	g := graph(`{}`)
	g["nodes"] = append(g["nodes"].([]any), map[string]any{"id": "sum", "type": "tool", "position": map[string]any{"x": 200, "y": 200},
		"data": map[string]any{"name": "everything/get-sum"}})
	g["edges"] = append(g["edges"].([]any), map[string]any{"id": "e3", "source": "sum", "sourceHandle": "tool", "target": "a1",
		"targetHandle": "tools", "data": map[string]any{"channel": "link"}})
	var saved, c map[string]any
	require.Equal(t, http.StatusCreated, call(t, "POST", s.url+"/api/v1/graphs", g, &saved))
	require.Equal(t, http.StatusCreated, call(t, "POST", s.url+"/api/v1/chats", map[string]any{"graphId": saved["id"]}, &c))
	chatID = c["id"].(string)
	types, _ = sse(t, s.url+"/api/v1/chats/"+chatID+"/messages", map[string]any{"content": `/tool get-sum {"a":1,"b":2}`})
	require.Contains(t, strings.Join(types, " "), "tool_result")
	require.Equal(t, "run_completed", types[len(types)-1])
	require.Equal(t, http.StatusOK, call(t, "GET", s.url+"/api/v1/chats/"+chatID, nil, &chat))
	require.Equal(t, "tool get-sum returned: The sum of 1 and 2 is 3.", chat.Messages[len(chat.Messages)-1].Content)
}

// A config file naming an unset variable stops the server at start with
// an error naming the variable.
func TestConfigFileErrorsStopStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"providers":{"x":{"type":"anthropic","apiKeyEnv":"NOT_SET_KEY"}}}`), 0o600))
	err := Main(t.Context(), Env{Args: []string{"server", "--config", path, "--state-dir", dir, "--addr", "127.0.0.1:0"},
		Getenv: func(string) string { return "" }})
	require.ErrorContains(t, err, "NOT_SET_KEY is not set")
}
