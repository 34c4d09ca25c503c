package transport

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"chatgraph/chat"
	chatmemory "chatgraph/chat/store/memory"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// FuzzDecodeClientFrame: any bytes a WebSocket client sends decode to a
// frame, a bad-frame close, or an error frame below 500 — never a panic.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","type":"stream_chat","chatId":"c","content":"hi"}`,
		`{"id":"2","type":"cancel","clientRequestId":"x"}`,
		`{"id":"3","type":"subscribe","runId":"r","afterSeq":5}`,
		`{"id":"4","type":"resume","runId":"r","value":{"approved":true}}`,
		`{"type":7}`, `{"afterSeq":"x"}`, `[]`, `null`, `"x"`, `{`, ``, `{"userTools":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeClientFrame(b)
		switch {
		case errors.Is(err, errBadFrame):
		case err != nil:
			if fr == nil {
				t.Fatal("an error frame needs the frame (for its id)")
			}
			if e := apiError(err); e.Status >= 500 {
				t.Fatalf("status %d for %q", e.Status, b)
			}
		case fr == nil || fr.Type == "":
			t.Fatalf("decoded %q without a type", b)
		}
	})
}

func fuzzServer(t testing.TB) *Server {
	reg := runtime.NewRegistry()
	if err := nodes.Register(reg, nodes.Deps{}); err != nil {
		t.Fatal(err)
	}
	runs := memory.New()
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: runs})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := chat.New(chat.Config{Engine: eng, Store: chatmemory.New(runs), Control: runcontrol.NewMemory(runcontrol.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Chat: svc, RateLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzRequestBodies: any body on the graph save, validate and chat
// calls answers below 500, as JSON, and never panics.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"g","nodes":[{"id":"s","type":"chat_start","data":{}},{"id":"a","type":"agent","data":{}}],"edges":[{"id":"e","source":"s","sourceHandle":"message","target":"a","targetHandle":"input","data":{"channel":"flow"}}]}`,
		`{"nodes":[{"id":"s","type":"chat_start"}],"edges":[{"id":"e","source":"s","target":"s","data":{}}]}`,
		`{"nodes":[{"id":1}]}`, `{"edges":{}}`, `{"nodes":null,"edges":null}`, `[]`, `{}`, `{"id":"../x"}`,
		`{"content":"hi","multitaskStrategy":"reject"}`, `{"content":"hi","userTools":["calculator"],"parentId":null}`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	h := s.Handler()
	f.Cleanup(func() { _ = s.Shutdown(f.Context()) })
	paths := []string{"/api/v1/graphs", "/api/v1/graphs/validate", "/api/v1/graphs/g1", "/api/v1/chats",
		"/api/v1/chats/c1/messages", "/api/v1/chats/c1/agent-messages", "/api/v1/chats/c1/cancel"}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, p := range paths {
			method := http.MethodPost
			if i == 2 {
				method = http.MethodPut
			}
			// A loopback Host: the request reaches the decoders.
			req := httptest.NewRequest(method, "http://127.0.0.1"+p, bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusMisdirectedRequest {
				t.Fatalf("%s %s: refused by the Host check, not fuzzing the decoders", method, p)
			}
			if rec.Code >= 500 {
				t.Fatalf("%s %s: %d %s", method, p, rec.Code, rec.Body.String())
			}
			if rec.Code >= 400 && !bytes.HasPrefix(rec.Body.Bytes(), []byte(`{"error":`)) {
				t.Fatalf("%s %s: %d without a JSON error: %s", method, p, rec.Code, rec.Body.String())
			}
		}
	})
}
