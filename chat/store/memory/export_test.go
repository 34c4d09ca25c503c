package memory

import (
	"testing"
	"time"

	"chatgraph/chat"
)

// SetNow makes cs, a *Store, read the time from now instead of
// time.Now, for the conformance suite's test of what expires
// (storetest.Expiry). Call it before cs is used.
func SetNow(cs chat.Store, now func() time.Time) { cs.(*Store).clock = now }

// Tombstones is how many tombstones, expired or not, the store keeps for the
// deleted messages of chat chatID in cs, a *Store.
func Tombstones(_ *testing.T, cs chat.Store, chatID string) int {
	s := cs.(*Store)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c, ok := s.chats[chatID]; ok {
		return len(c.gone)
	}
	return 0
}
