package runtime_test

import (
	"context"
	"testing"
	"time"

	"chatgraph/runtime"
)

// FuzzDecodeValidate feeds arbitrary bytes through the graph decoder,
// validation and (for valid graphs) a run: none of it may panic, and a
// graph that validates without errors must compile.
func FuzzDecodeValidate(f *testing.F) {
	seeds := []string{
		`{"id":"g","nodes":[{"id":"s","type":"start"},{"id":"a","type":"step"}],"edges":[{"id":"e1","source":"s","sourceHandle":"out","target":"a","targetHandle":"in","data":{"channel":"flow"}}]}`,
		`{"id":"g","nodes":[{"id":"s","type":"start"},{"id":"a","type":"step"},{"id":"b","type":"step"}],"edges":[{"id":"e1","source":"a","sourceHandle":"out","target":"b","targetHandle":"in","data":{"channel":"flow"}},{"id":"e2","source":"b","sourceHandle":"out","target":"a","targetHandle":"in","data":{"channel":"flow","when":"always"}}]}`,
		`{"nodes":[{"id":"p","type":"producer"},{"id":"c","type":"consumer"}],"edges":[{"id":"l","source":"p","sourceHandle":"link","target":"c","targetHandle":"deps","data":{"channel":"link"}}]}`,
		`{"nodes":[{"id":"s","type":"start","data":{"retry":{"maxAttempts":3,"jitter":true}}}],"edges":[{"id":"e","source":"s","target":"s","data":{"channel":"flow","condition":"output.x > 1"}}]}`,
		`{"nodes":[{"id":"s","type":"start"},{"id":"a","type":"step"}],"edges":[{"id":"e","source":"s","sourceHandle":"out","target":"a","targetHandle":"in","data":{"channel":"flow","condition":"size(output) > 1 && output.exists(k, k == 'a')"}}]}`,
		`{}`, `[]`, `null`, `{"nodes":null,"edges":[{}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	k := newKit(f)
	e := k.engine(f, nil, func(c *runtime.Config) { c.CancelGrace = 10 * time.Millisecond })
	f.Fuzz(func(t *testing.T, b []byte) {
		g, ds := runtime.DecodeGraph(b)
		if g == nil {
			if len(ds) == 0 {
				t.Fatal("decode failed without a diagnostic")
			}
			return
		}
		g.ID = "" // never cache fuzzed plans
		// Only harmless data reaches the test executors.
		for i := range g.Nodes {
			g.Nodes[i].Data = nil
		}
		vd := e.Validate(g)
		p, err := e.Compile(g)
		if vd.HasErrors() != (err != nil) {
			t.Fatalf("Validate and Compile disagree: %v vs %v", vd, err)
		}
		if p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = e.Invoke(ctx, runtime.RunRequest{Plan: p, Input: "x"})
	})
}
