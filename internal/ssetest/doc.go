// Package ssetest reads a run's event stream (GET /api/v1/runs/{id}/events)
// from a running server, as a client does, for tests that follow runs
// across processes, and checks what a stream carries (WholeChunks: text
// deltas made of whole model chunks).
//
//	s, err := ssetest.Open(ctx, baseURL, runID, 0) // after seq 0: from the first event
//	defer s.Close()
//	var ev struct{ Seq int64; Type string }
//	for s.Next(&ev) == nil { ... }
//
// Test code only.
package ssetest
