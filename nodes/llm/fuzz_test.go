package llm

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	assestream "github.com/anthropics/anthropic-sdk-go/packages/ssestream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

func sseResponse(b []byte) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(b))}
}

// FuzzStreamDecoder feeds arbitrary bytes as a stream body through both
// SDKs' decoders and chatgraph's collectors: they must never panic, the
// streamed text must be the answer's text, and tool calls must come out
// complete. Run: go test -run '^$' -fuzz FuzzStreamDecoder ./nodes/llm
func FuzzStreamDecoder(f *testing.F) {
	for _, name := range []string{"openai/text.http", "openai/tool_calls.http", "openai/disconnect.http",
		"anthropic/text.http", "anthropic/tool_use.http", "anthropic/overloaded_event.http"} {
		_, body := readTranscript(f, name)
		f.Add(body)
	}
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":99999999,\"function\":{}}]}}]}\n\n"))
	f.Add([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n"))
	// A second message_start after text, and a start that carries text.
	f.Add([]byte("event: x\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"a\"}}\n\n" +
		"event: x\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\nevent: x\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add([]byte("event: x\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}}\n\n" +
		"event: x\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzCollect(t, b)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("collectors hang on %q", b)
		}
	})
}

func fuzzCollect(t *testing.T, b []byte) {
	{
		var text bytes.Buffer
		onText := func(s string) { text.WriteString(s) }
		r, err := collectOpenAI(ssestream.NewStream[openai.ChatCompletionChunk](ssestream.NewDecoder(sseResponse(b)), nil), func() {}, onText)
		if err == nil {
			if r.Content != text.String() {
				t.Errorf("openai: content %q != streamed %q", r.Content, text.String())
			}
			if len(r.ToolCalls) > maxToolCalls {
				t.Errorf("%d tool calls", len(r.ToolCalls))
			}
			for _, c := range r.ToolCalls {
				if c.ID == "" || c.Arguments == "" {
					t.Errorf("incomplete call %+v", c)
				}
			}
		}
		text.Reset()
		msg, err := collectAnthropic(assestream.NewStream[anthropic.MessageStreamEventUnion](assestream.NewDecoder(sseResponse(b)), nil), func() {}, onText)
		if err == nil {
			r := anthropicResponse(msg)
			if r.Content != text.String() {
				t.Errorf("anthropic: content %q != streamed %q", r.Content, text.String())
			}
			for _, c := range r.ToolCalls {
				if c.Arguments == "" {
					t.Errorf("incomplete call %+v", c)
				}
			}
		}
	}
}
