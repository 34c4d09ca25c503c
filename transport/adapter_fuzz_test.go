package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"chatgraph/chat"
)

// FuzzAdapterBodies: any body on the OpenAI chat completions and AG-UI
// endpoints answers below 500 (a run that starts streams; its own failure
// is not the server's), errors as JSON in each API's shape, and never
// panics.
func FuzzAdapterBodies(f *testing.F) {
	for _, s := range []string{
		`{"model":"g1","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"g1","stream":true,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"model":"g1","messages":[{"role":"user","content":"/tool t {}"}],"tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}]}`,
		`{"model":"g1","messages":[{"role":"tool","tool_call_id":"r_abc.i1","content":"x"}]}`,
		`{"model":"g1","messages":[{"role":"tool","tool_call_id":"r_.","content":"x"}]}`,
		`{"model":"g1","messages":[],"n":3}`, `{"model":"","messages":null}`, `[]`, `{}`, `null`,
		`{"threadId":"t1","runId":"r","messages":[{"id":"u","role":"user","content":"hi"}],"tools":[],"forwardedProps":{"agentNodeId":"a"}}`,
		`{"threadId":"t1","messages":[],"resume":[{"interruptId":"r_x.y","status":"resolved","payload":{"approved":true}}]}`,
		`{"threadId":"t1","messages":[{"id":"t","role":"tool","toolCallId":"r_x.y","content":[{"type":"text","text":"a"}]}]}`,
		`{"threadId":"../x","messages":[{"id":"u","role":"user","content":"hi"}]}`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	g := `{"nodes":[{"id":"s","type":"chat_start","data":{}},{"id":"a","type":"agent","data":{}}],` +
		`"edges":[{"id":"e","source":"s","sourceHandle":"message","target":"a","targetHandle":"input","data":{"channel":"flow"}}]}`
	if err := s.chats.CreateGraph(f.Context(), &chat.Graph{ID: "g1", Name: "g", Body: json.RawMessage(g)}); err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Cleanup(func() { _ = s.Shutdown(f.Context()) })
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range []string{"/v1/chat/completions", "/api/v1/ag-ui/graphs/g1"} {
			req := httptest.NewRequest(http.MethodPost, p, bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("POST %s: %d %s", p, rec.Code, rec.Body.String())
			}
			if rec.Code >= 400 && !bytes.HasPrefix(rec.Body.Bytes(), []byte(`{"error":{`)) {
				t.Fatalf("POST %s: %d without a JSON error: %s", p, rec.Code, rec.Body.String())
			}
		}
	})
}
