package llm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEchoStreamsWordByWord(t *testing.T) {
	t.Parallel()
	var got []string
	resp, err := Echo{}.Stream(context.Background(), Request{Messages: []Message{
		{Role: RoleSystem, Content: "be nice"},
		{Role: RoleUser, Content: "hello  big world"},
	}}, func(s string) { got = append(got, s) })
	require.NoError(t, err)
	require.Equal(t, []string{"echo:", " hello", "  big", " world"}, got)
	require.Equal(t, "echo: hello  big world", resp.Content)
	require.Equal(t, "echo: hello  big world", strings.Join(got, ""))
	require.Empty(t, resp.ToolCalls)
}

func TestEchoToolCommand(t *testing.T) {
	t.Parallel()
	req := Request{Messages: []Message{{Role: RoleUser, Content: `/tool calculator {"expression":"6*7"}`}}}
	resp, err := Echo{}.Stream(context.Background(), req, func(string) { t.Fatal("no text for a tool call") })
	require.NoError(t, err)
	require.Len(t, resp.ToolCalls, 1)
	tc := resp.ToolCalls[0]
	require.Equal(t, "calculator", tc.Name)
	require.JSONEq(t, `{"expression":"6*7"}`, tc.Arguments)
	// Deterministic ids.
	again, _ := Echo{}.Stream(context.Background(), req, nil)
	require.Equal(t, tc.ID, again.ToolCalls[0].ID)

	// The tool's result is answered.
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, ToolCalls: resp.ToolCalls},
		Message{Role: RoleTool, ToolCallID: tc.ID, Name: "calculator", Content: "42"})
	var text strings.Builder
	resp, err = Echo{}.Stream(context.Background(), req, func(s string) { text.WriteString(s) })
	require.NoError(t, err)
	require.Equal(t, "tool calculator returned: 42", resp.Content)
	require.Equal(t, resp.Content, text.String())
}

func TestEchoTokenDelayHonoursCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("user cancel")
	n := 0
	start := time.Now()
	_, err := Echo{}.Stream(ctx, Request{TokenDelay: time.Hour, Messages: []Message{{Role: RoleUser, Content: "a b c"}}},
		func(string) {
			n++
			cancel(cause)
		})
	require.ErrorIs(t, err, cause)
	require.Equal(t, 1, n)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestEchoTokenDelay(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := Echo{}.Stream(context.Background(), Request{TokenDelay: 20 * time.Millisecond, Messages: []Message{{Role: RoleUser, Content: "a b c"}}}, nil)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond) // 4 tokens, 3 gaps
}

// Fragments come on the model's schedule: never before they are due,
// and a reader slower than that does not push the later ones back: those
// already due come at once.
func TestEchoTokenDelayIsTheModelsSchedule(t *testing.T) {
	t.Parallel()
	const delay = 50 * time.Millisecond
	start := time.Now()
	var at []time.Duration
	_, err := Echo{}.Stream(context.Background(), Request{TokenDelay: delay,
		Messages: []Message{{Role: RoleUser, Content: "a b c d e"}}}, func(string) {
		at = append(at, time.Since(start))
		if len(at) == 1 {
			time.Sleep(6 * delay) // a slow reader: fragments 1..5 fall due meanwhile
		}
	})
	require.NoError(t, err)
	require.Len(t, at, 6)
	for k, d := range at {
		require.GreaterOrEqual(t, d, time.Duration(k)*delay, "fragment %d came early", k)
	}
	// A pause after each fragment would put 4 × delay between 1 and 5.
	require.Less(t, at[5]-at[1], 2*delay, "fragments already due waited: %v", at)
}

func TestParseToolCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, name, args string
		ok             bool
	}{
		{`/tool calculator {"expression":"1"}`, "calculator", `{"expression":"1"}`, true},
		{"  /tool current_time", "current_time", "{}", true},
		{"/tool\tx   {}  ", "x", "{}", true},
		{"/tool", "", "", false},
		{"/toolx {}", "", "", false},
		{"/tool   ", "", "", false},
		{"please /tool x", "", "", false},
		{"/tool x not json", "x", "not json", true},
	} {
		name, args, ok := ParseToolCommand(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.name, name, tc.in)
		require.Equal(t, tc.args, args, tc.in)
	}
}

func TestWords(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", " a", "a ", "a b", "line one\nline  two ", "\n\n"} {
		require.Equal(t, s, strings.Join(slices.Collect(Words(s)), ""), "%q", s)
	}
	require.Equal(t, []string{"a", " b", "\nc"}, slices.Collect(Words("a b\nc")))
	var first []string
	for w := range Words("a b c") {
		first = append(first, w)
		if len(first) == 2 {
			break // a loop that stops early is not called again
		}
	}
	require.Equal(t, []string{"a", " b"}, first)
}

func TestModelsResolve(t *testing.T) {
	t.Parallel()
	m := NewModels()
	oa, err := NewOpenAI(OpenAIConfig{BaseURL: "http://x"})
	require.NoError(t, err)
	require.NoError(t, m.Register("ollama", oa))
	require.Error(t, m.Register("ollama", oa))
	require.Error(t, m.Register("a/b", oa))

	p, model, err := m.Resolve("")
	require.NoError(t, err)
	require.Equal(t, Echo{}, p)
	require.Equal(t, "echo", model)
	p, model, err = m.Resolve("ollama/llama3.1:8b")
	require.NoError(t, err)
	require.Same(t, oa, p)
	require.Equal(t, "llama3.1:8b", model)

	_, _, err = m.Resolve("gpt-4o")
	var le *Error
	require.ErrorAs(t, err, &le)
	require.Equal(t, CodeUnknownModel, le.ErrorCode())

	m.SetDefault(oa)
	p, model, err = m.Resolve("gpt-4o")
	require.NoError(t, err)
	require.Same(t, oa, p)
	require.Equal(t, "gpt-4o", model)
}

func TestModelsList(t *testing.T) {
	t.Parallel()
	m := NewModels()
	oa, err := NewOpenAI(OpenAIConfig{BaseURL: "http://localhost:11434/v1"})
	require.NoError(t, err)
	an, err := NewAnthropic(AnthropicConfig{APIKey: "k"})
	require.NoError(t, err)
	require.NoError(t, m.Register("ollama", oa, "llama3.1", "qwen2.5"))
	require.NoError(t, m.Register("claude", an, "claude-sonnet-4-5"))
	m.SetDefault(oa)
	require.Equal(t, []ModelInfo{
		{ID: "echo", Provider: "echo", Model: "echo", Type: "echo"},
		{ID: "claude/claude-sonnet-4-5", Provider: "claude", Model: "claude-sonnet-4-5", Type: "anthropic"},
		{ID: "ollama/llama3.1", Provider: "ollama", Model: "llama3.1", Type: "openai"},
		{ID: "ollama/qwen2.5", Provider: "ollama", Model: "qwen2.5", Type: "openai"},
	}, m.List())
	require.Equal(t, []ProviderInfo{
		{Name: "claude", Type: "anthropic", Models: []string{"claude-sonnet-4-5"}},
		{Name: "echo", Type: "echo", Models: []string{"echo"}},
		{Name: "ollama", Type: "openai", Models: []string{"llama3.1", "qwen2.5"}, Default: true},
	}, m.Providers())
}
