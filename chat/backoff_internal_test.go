package chat

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// Each refusal in a row doubles the wait, from base to maxRecoveryBackoff;
// a run whose writes were taken starts again from base.
func TestRefusalsDoubleTheWait(t *testing.T) {
	var r refusals
	now, base, refused := time.Unix(1000, 0), 5*time.Second, errors.New("refused")
	require.NoError(t, r.wait("r1", now))
	var waits []time.Duration
	for range 10 {
		waits = append(waits, r.note("r1", refused, now, base))
	}
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 320 * time.Second, maxRecoveryBackoff, maxRecoveryBackoff, maxRecoveryBackoff}, waits)
	err := r.wait("r1", now.Add(maxRecoveryBackoff-time.Millisecond))
	require.ErrorIs(t, err, runtime.ErrRecoverLater)
	require.Contains(t, err.Error(), "refused 10 times in a row, the last: refused")
	require.NoError(t, r.wait("r1", now.Add(maxRecoveryBackoff)))
	require.NoError(t, r.wait("r2", now), "another run")
	for range 100 {
		r.note("r3", refused, now, base)
	}
	require.Equal(t, maxRecoveryBackoff, r.note("r3", refused, now, base), "no overflow")
	r.forget("r1")
	require.Equal(t, base, r.note("r1", refused, now, base))
}
