package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rt "chatgraph/runtime"
)

// BenchmarkAdapterTurns: one chat turn (a 20-word echo answer, read to
// the end) through chatgraph's own SSE and through the protocol
// adapters, 8 clients at once; turns/s and the p50/p99 of one turn.
func BenchmarkAdapterTurns(b *testing.B) {
	const clients, perClient = 8, 10
	content := strings.TrimSpace(strings.Repeat("word ", 19))
	for _, kind := range []string{"sse", "openai-stream", "openai", "agui"} {
		b.Run(kind, func(b *testing.B) {
			e := benchEnv(b, rt.DurabilitySync)
			graphID := e.saveGraph(basicGraph(""))
			turn := func(c, i int) {
				var resp *http.Response
				switch kind {
				case "sse":
					var ch map[string]any
					e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
					resp = e.openSSE(context.Background(), "POST", "/api/v1/chats/"+ch["id"].(string)+"/messages",
						map[string]any{"content": content}, nil).resp
				case "openai-stream", "openai":
					body := map[string]any{"model": graphID, "stream": kind == "openai-stream",
						"messages": []any{map[string]any{"role": "user", "content": content}}}
					if kind == "openai" {
						resp = e.do("POST", "/v1/chat/completions", body, nil)
						e.mustStatus(resp, http.StatusOK)
						return
					}
					resp = e.openSSE(context.Background(), "POST", "/v1/chat/completions", body, nil).resp
				case "agui":
					resp = e.openSSE(context.Background(), "POST", "/api/v1/ag-ui/graphs/"+graphID, map[string]any{
						"threadId": fmt.Sprintf("bench-%d-%d-%d", b.N, c, i), "runId": "r",
						"messages": []any{map[string]any{"id": "u", "role": "user", "content": content}}}, nil).resp
				}
				_ = readAll(resp)
				resp.Body.Close()
			}
			for b.Loop() {
				var mu sync.Mutex
				var took []float64
				var wg sync.WaitGroup
				start := time.Now()
				for c := range clients {
					wg.Go(func() {
						for i := range perClient {
							t0 := time.Now()
							turn(c, i)
							mu.Lock()
							took = append(took, float64(time.Since(t0).Microseconds())/1000)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(clients*perClient)/time.Since(start).Seconds(), "turns/s")
				b.ReportMetric(quantile(took, 0.5), "p50-ms")
				b.ReportMetric(quantile(took, 0.99), "p99-ms")
			}
		})
	}
}
