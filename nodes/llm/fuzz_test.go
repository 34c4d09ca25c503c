package llm

import (
	"bytes"
	"testing"
)

// FuzzStreamDecoder feeds arbitrary bytes through the SSE decoder and the
// chunk accumulator: they must never panic, and a response must come out
// whenever decoding succeeds. Run: go test -run '^$' -fuzz FuzzStreamDecoder ./nodes/llm
func FuzzStreamDecoder(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"x\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\":1}\"}}]}}]}\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n"))
	f.Add([]byte(": ping\r\n\r\ndata:{\"choices\":[]}\r\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":99999999,\"function\":{}}]}}]}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var acc Accumulator
		var text bytes.Buffer
		err := readSSE(bytes.NewReader(b), 1<<16, func(data []byte) error {
			if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
				return errStreamDone
			}
			return acc.AddChunk(data, func(s string) { text.WriteString(s) })
		})
		if err != nil {
			return
		}
		r := acc.Response()
		if r.Content != text.String() {
			t.Fatalf("content %q != streamed %q", r.Content, text.String())
		}
		if len(r.ToolCalls) > maxToolCalls {
			t.Fatalf("%d tool calls", len(r.ToolCalls))
		}
		for _, c := range r.ToolCalls {
			if c.ID == "" || c.Arguments == "" {
				t.Fatalf("incomplete call %+v", c)
			}
		}
	})
}
