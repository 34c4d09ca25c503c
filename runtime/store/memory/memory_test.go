package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
	"chatgraph/runtime/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) runtime.Store { return memory.New() })
}

func open(testing.TB) runtime.Store { return memory.New() }

func BenchmarkAppendEvent(b *testing.B) { storetest.BenchAppendEvent(b, open) }

func BenchmarkSaveCheckpoint(b *testing.B) { storetest.BenchSaveCheckpoint(b, open) }

func BenchmarkWriteBatch(b *testing.B) { storetest.BenchWriteBatch(b, open) }
