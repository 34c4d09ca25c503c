package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Renewals are spread over a sixth to a third of the TTL, so that runs
// started together do not renew together: every delay lies in that range
// and the delays cover all of it.
func TestRenewalDelaysAreSpread(t *testing.T) {
	const ttl = 15 * time.Second
	lo, hi := ttl/6, ttl/3
	const buckets = 10
	var hits [buckets]int
	for range 10000 {
		d := renewalDelay(ttl)
		require.GreaterOrEqual(t, d, lo)
		require.LessOrEqual(t, d, hi)
		hits[min(int((d-lo)*buckets/(hi-lo)), buckets-1)]++
	}
	for i, n := range hits {
		// Uniform: 1,000 a bucket; a delay that does not vary, or
		// varies over part of the range, leaves buckets nearly empty.
		require.Greater(t, n, 700, "bucket %d of the range [TTL/6, TTL/3] got %d of 10,000 delays", i, n)
	}
}
