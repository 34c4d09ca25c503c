package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
)

// OwnerLockKey is the advisory lock CreateChat takes for owner in schema.
func OwnerLockKey(schema, owner string) int64 { return lockKey(schema, "chat owner", owner) }

// SetNow makes cs, a *Store, read the time from now instead of
// time.Now, for the conformance suite's test of what expires
// (storetest.Expiry). Call it before cs is used.
func SetNow(cs chat.Store, now func() time.Time) { cs.(*Store).clock = now }

// Tombstones is how many rows, expired or not, chat_message_tombstones
// holds for the deleted messages of chat chatID in cs, a *Store.
func Tombstones(t *testing.T, cs chat.Store, chatID string) int {
	t.Helper()
	s := cs.(*Store)
	var n int
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*) FROM chat_message_tombstones WHERE chat_id = $1`, chatID).Scan(&n))
	return n
}
