package transport_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// normalizer makes wire JSON comparable: generated ids become stable
// names in order of appearance, times and durations constants.
type normalizer struct {
	ids map[string]string
	n   map[string]int
}

var generatedID = regexp.MustCompile(`\b([rcmg])_[a-z2-7]{20}\b`)
var longHex = regexp.MustCompile(`[0-9a-f]{16,}`)

func newNormalizer() *normalizer { return &normalizer{ids: map[string]string{}, n: map[string]int{}} }

func (z *normalizer) str(s string) string {
	s = generatedID.ReplaceAllStringFunc(s, func(id string) string {
		if v, ok := z.ids[id]; ok {
			return v
		}
		z.n[id[:1]]++
		v := fmt.Sprintf("%s_%d", id[:1], z.n[id[:1]])
		z.ids[id] = v
		return v
	})
	return longHex.ReplaceAllString(s, "<hash>")
}

func (z *normalizer) walk(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			e := x[k]
			switch k {
			case "time", "createdAt", "updatedAt", "startedAt", "timestamp", "created":
				x[k] = "<time>"
			case "durationMs":
				x[k] = 0
			case "result":
				if s, ok := e.(string); ok && strings.Contains(s, "T") && strings.HasSuffix(s, "Z") {
					x[k] = "<time>"
					continue
				}
				x[k] = z.walk(e)
			default:
				x[k] = z.walk(e)
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = z.walk(x[i])
		}
		return x
	case string:
		return z.str(x)
	}
	return v
}

func (z *normalizer) line(raw string) string {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(z.walk(v))
	return string(b)
}

func checkGolden(t *testing.T, name string, lines map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(lines[k])
		b.WriteByte('\n')
	}
	path := "testdata/" + name
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run %s -update", t.Name())
	require.Equal(t, string(want), b.String(), "the wire format changed: if on purpose, run go test -run %s -update", t.Name())
}

// TestGoldenEvents pins one JSON line per event type.
func TestGoldenEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := map[string]string{}
	collect := func(g map[string]any, content string, cancelAfterDelta bool) {
		_, chatID := e.newChat(g)
		z := newNormalizer()
		s := e.openSSE(sseCtx(t), "POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": content}, nil)
		for {
			ev, err := s.next(false)
			if err != nil {
				break
			}
			line := z.line(ev.Raw)
			key := ev.Type
			if key == "node_started" && ev.Data["nodeId"] == "a1" {
				key = "node_started (agent)"
			}
			if _, ok := first[key]; !ok {
				first[key] = line
			}
			if cancelAfterDelta && ev.Type == "node_delta" {
				e.mustStatus(e.do("POST", "/api/v1/runs/"+ev.Data["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
				cancelAfterDelta = false
			}
		}
	}
	// Words 100 ms apart: each its own delta (words that come faster than
	// their commit share one).
	collect(basicGraph(`{"tokenDelayMs": 100}`), "hello world", false)
	calc := basicGraph("")
	calc["nodes"] = append(calc["nodes"].([]any), map[string]any{"id": "calc", "type": "tool", "data": map[string]any{"name": "calculator"}})
	calc["edges"] = append(calc["edges"].([]any), edge("l1", "calc", "tool", "a1", "tools", "link"))
	collect(calc, `/tool calculator {"expression":"6*7"}`, false)
	collect(approvalGraph(), `/tool calculator {"expression":"6*7"}`, false)
	// Words 2 s apart: the cancel, sent on the first delta, lands before
	// the second, so the cancelled node and run keep their seqs.
	collect(basicGraph(`{"tokenDelayMs": 2000}`), strings.Repeat("w ", 100), true)
	collect(flakyGraph(1, 2), "retry me", false)
	collect(flakyGraph(5, 1), "fail me", false)
	for _, want := range []string{"run_started", "run_completed", "run_failed", "run_cancelled", "run_interrupted",
		"node_started", "node_completed", "node_failed", "node_cancelled", "node_interrupted", "node_skipped",
		"node_retrying", "node_delta", "tool_call", "tool_result", "approval_required", "edge_taken", "node_started (agent)"} {
		require.Contains(t, first, want)
	}
	checkGolden(t, "events.golden", first)
}

// flakyGraph is chat_start -> flaky -> chat_output.
func flakyGraph(failTimes, maxAttempts int) map[string]any {
	return map[string]any{
		"name": "flaky",
		"nodes": []any{
			map[string]any{"id": "start", "type": "chat_start", "data": map[string]any{}},
			map[string]any{"id": "f1", "type": "flaky", "data": map[string]any{"failTimes": failTimes, "retry": map[string]any{"maxAttempts": maxAttempts}}},
			map[string]any{"id": "out", "type": "chat_output", "data": map[string]any{}},
		},
		"edges": []any{edge("e1", "start", "message", "f1", "input", "flow"), edge("e2", "f1", "output", "out", "input", "flow")},
	}
}

// TestGoldenErrors pins the error body of every error code.
func TestGoldenErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *transportConfig) {
		c.Token = "tok"
		c.BodyLimit = 4096
		c.RateLimit, c.RateBurst = 0.001, 40
		c.MaxChatsPerClient = 1
	})
	graphID, chatID := e.newChat(basicGraph(`{"tokenDelayMs": 50}`))
	z := newNormalizer()
	lines := map[string]string{}
	add := func(code string, resp *http.Response, want int) {
		t.Helper()
		e.mustStatus(resp, want)
		var b errBody
		raw := new(strings.Builder)
		_, _ = fmt.Fprint(raw, readAll(resp))
		require.NoError(t, json.Unmarshal([]byte(raw.String()), &b))
		require.Equal(t, code, b.Error.Code)
		lines[code] = fmt.Sprintf("%d %s", want, z.line(raw.String()))
	}
	add("invalid_json", e.do("POST", "/api/v1/chats", `{"graphId":`, nil), 400)
	g := basicGraph("")
	g["edges"].([]any)[0].(map[string]any)["data"] = map[string]any{}
	add("invalid_graph", e.do("POST", "/api/v1/graphs", g, nil), 400)
	add("not_found", e.do("GET", "/api/v1/chats/c_nope", nil, nil), 404)
	var tk map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": strings.Repeat("w ", 40)}, &tk), http.StatusAccepted)
	add("conflict", e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "x", "multitaskStrategy": "reject"}, nil), 409)
	anon := *e
	anon.token = ""
	add("unauthorized", anon.do("GET", "/api/v1/graphs", nil, nil), 401)
	add("payload_too_large", e.do("POST", "/api/v1/graphs", `{"name":"`+strings.Repeat("x", 5000)+`"}`, nil), 413)
	add("method_not_allowed", e.do("PATCH", "/api/v1/graphs", nil, nil), 405)
	add("cross_origin", e.send("POST", "/api/v1/graphs", "{}", map[string]string{"Origin": "http://evil.example",
		"Content-Type": "application/json", "Authorization": "Bearer tok"}), 403)
	add("unsupported_media_type", e.send("POST", "/api/v1/graphs", "{}", map[string]string{"Content-Type": "text/plain",
		"Authorization": "Bearer tok"}), 415)
	add("host_not_allowed", e.send("GET", "/api/v1/graphs", "", map[string]string{"Host": "evil.example", "Authorization": "Bearer tok"}), 421)
	e.mustStatus(e.do("POST", "/api/v1/runs/"+tk["runId"].(string)+"/cancel", nil, nil), http.StatusAccepted)
	add("quota_exceeded", e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, nil), 429)
	var limited *http.Response
	for range 100 {
		if r := e.do("GET", "/api/v1/graphs", nil, nil); r.StatusCode == http.StatusTooManyRequests {
			limited = r
			break
		}
	}
	require.NotNil(t, limited)
	add("rate_limited", limited, 429)
	checkGolden(t, "errors.golden", lines)
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
