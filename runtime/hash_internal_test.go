package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func valueHash(v any) string {
	var k key
	k.value(v)
	h := sha256.Sum256(k.b)
	return hex.EncodeToString(h[:])
}

// A value and its JSON decoding hash alike, so replay decisions do not
// depend on whether an output came from an executor or from a store.
func TestValueHashIsJSONCanonical(t *testing.T) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
		N       int    `json:"n"`
	}
	require.Equal(t, valueHash(msg{"user", "hi", 3}), valueHash(map[string]any{"content": "hi", "role": "user", "n": float64(3)}))
	require.Equal(t, valueHash(7), valueHash(float64(7)))
	require.Equal(t, valueHash([]msg{{N: 1}}), valueHash([]any{map[string]any{"role": "", "content": "", "n": 1.0}}))
	require.NotEqual(t, valueHash("1"), valueHash(1))
	require.NotEqual(t, valueHash(map[string]any{"a": "b"}), valueHash(map[string]any{"a": "c"}))
	require.NotEqual(t, valueHash([]any{"ab", "c"}), valueHash([]any{"a", "bc"}), "strings are length-prefixed")
}
