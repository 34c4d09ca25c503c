package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lag is the slowest recent commit's time, halved for every
// lagHalfLife since it: a slower commit replaces it, a faster one only
// once the halving has brought it below that one.
func TestCommitLagDecays(t *testing.T) {
	var l commitLag
	t0 := time.Unix(1000, 0)
	require.Zero(t, l.get(t0), "nothing committed yet")

	l.note(t0, 8*time.Millisecond)
	require.Equal(t, 8*time.Millisecond, l.get(t0))
	require.Equal(t, 8*time.Millisecond, l.get(t0.Add(lagHalfLife-time.Nanosecond)))
	require.Equal(t, 4*time.Millisecond, l.get(t0.Add(lagHalfLife)))
	require.Equal(t, 2*time.Millisecond, l.get(t0.Add(2*lagHalfLife)))
	require.Zero(t, l.get(t0.Add(40*lagHalfLife)), "forgotten")

	// A faster commit does not hide the slow one before it...
	l.note(t0.Add(time.Millisecond), time.Millisecond)
	require.Equal(t, 8*time.Millisecond, l.get(t0.Add(time.Millisecond)))
	// ...until the halving has brought it below.
	t1 := t0.Add(3 * lagHalfLife) // 8ms halved three times: 1ms
	l.note(t1, 3*time.Millisecond)
	require.Equal(t, 3*time.Millisecond, l.get(t1))
	// A slower one replaces it at once.
	l.note(t1, 5*time.Millisecond)
	require.Equal(t, 5*time.Millisecond, l.get(t1))
	// A clock that went back reads the peak as it is.
	require.Equal(t, 5*time.Millisecond, l.get(t1.Add(-time.Second)))
}
