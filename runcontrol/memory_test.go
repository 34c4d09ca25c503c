package runcontrol_test

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"chatgraph/runcontrol"
	"chatgraph/runcontrol/controltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	controltest.Run(t, func(t *testing.T, o controltest.Options) func() runcontrol.Controller {
		m := runcontrol.NewMemory(runcontrol.MemoryConfig{IntentTTL: o.IntentTTL})
		t.Cleanup(func() { _ = m.Close() })
		// One process: every "instance" is the same controller.
		return func() runcontrol.Controller { return m }
	})
}

func TestMemoryChatQueueConformance(t *testing.T) {
	t.Parallel()
	controltest.RunChatQueue(t, func(t *testing.T) func() (runcontrol.Controller, runcontrol.ChatQueue) {
		m := runcontrol.NewMemory(runcontrol.MemoryConfig{})
		t.Cleanup(func() { _ = m.Close() })
		q := runcontrol.NewMemoryChatQueue(m)
		return func() (runcontrol.Controller, runcontrol.ChatQueue) { return m, q }
	})
}

func BenchmarkMemoryBindRelease(b *testing.B) {
	m := runcontrol.NewMemory(runcontrol.MemoryConfig{})
	defer m.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, release, err := m.Bind(b.Context(), strconv.Itoa(i), runcontrol.ChatScope("c"), runcontrol.RequestScope(strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

func BenchmarkMemoryCancelThenBind(b *testing.B) {
	m := runcontrol.NewMemory(runcontrol.MemoryConfig{})
	defer m.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		chat := runcontrol.ChatScope(strconv.Itoa(i))
		if _, err := m.Cancel(b.Context(), chat, nil); err != nil {
			b.Fatal(err)
		}
		ctx, release, err := m.Bind(b.Context(), strconv.Itoa(i), chat)
		if err != nil || ctx.Err() == nil {
			b.Fatal("not cancelled", err)
		}
		release()
	}
}

// BenchmarkMemoryCancelLatency: time from Cancel to a bound run's context
// being done, in process, as p50/p99.
func BenchmarkMemoryCancelLatency(b *testing.B) {
	m := runcontrol.NewMemory(runcontrol.MemoryConfig{})
	defer m.Close()
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i)
		ctx, release, err := m.Bind(b.Context(), id, runcontrol.ChatScope(id))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := m.Cancel(b.Context(), runcontrol.ChatScope(id), nil); err != nil {
			b.Fatal(err)
		}
		<-ctx.Done()
		samples = append(samples, time.Since(start))
		release()
	}
	controltest.ReportPercentiles(b, samples)
}
