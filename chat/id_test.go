package chat_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chat"
)

// Ids keep their format (prefix + 20 characters of [a-z2-7]), differ
// within one millisecond, and sort by creation time: an id made later
// sorts after every earlier one.
func TestNewIDSortsByTime(t *testing.T) {
	format := regexp.MustCompile(`^r_[a-z2-7]{20}$`)
	seen := map[string]bool{}
	var batches [][]string
	for range 3 {
		var ids []string
		for range 500 {
			id := chat.NewID("r_")
			require.Regexp(t, format, id)
			require.False(t, seen[id], "a repeated id")
			seen[id] = true
			ids = append(ids, id)
		}
		batches = append(batches, ids)
		time.Sleep(2 * time.Millisecond)
	}
	for i := 1; i < len(batches); i++ {
		for _, earlier := range batches[i-1] {
			for _, later := range batches[i] {
				require.Less(t, earlier, later)
			}
		}
	}
}
