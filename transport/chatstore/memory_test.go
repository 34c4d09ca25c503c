package chatstore_test

import (
	"testing"

	"chatgraph/transport/chatstore"
	"chatgraph/transport/chatstore/chatstoretest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	chatstoretest.Run(t, func(*testing.T) chatstore.Store { return chatstore.NewMemory() })
}
