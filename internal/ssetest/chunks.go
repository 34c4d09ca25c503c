package ssetest

import (
	"fmt"
	"strings"
)

// WholeChunks checks that a stream's text deltas are the chunks a model
// streamed, in order, each delta one or more whole consecutive chunks
// (chunks that come faster than their commit share a delta).
func WholeChunks(chunks, deltas []string) error {
	i := 0
	for _, d := range deltas {
		j := i
		for rest := d; rest != ""; j++ {
			if j == len(chunks) || !strings.HasPrefix(rest, chunks[j]) {
				return fmt.Errorf("delta %q is not whole chunks from %q", d, chunks[i:])
			}
			rest = rest[len(chunks[j]):]
		}
		if j == i {
			return fmt.Errorf("an empty delta after %d chunks", i)
		}
		i = j
	}
	if i != len(chunks) {
		return fmt.Errorf("the deltas %q end before the chunks %q", deltas, chunks[i:])
	}
	return nil
}
