package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"chatgraph/chat"
	"chatgraph/chat/store/memory"
	"chatgraph/chat/store/storetest"
	"chatgraph/runtime"
	rmemory "chatgraph/runtime/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) (chat.Store, runtime.Store) {
		runs := rmemory.New()
		return memory.New(runs), runs
	}, storetest.Expiry(memory.SetNow, memory.Tombstones))
}
