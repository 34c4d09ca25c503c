package gctune_test

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/gctune"
)

// The tests change the process's collector, so none runs in parallel.

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		p          gctune.Policy
		live, scan int64
		want       int
	}{
		{"no floor", gctune.Policy{Percent: 400}, 50 * mib, 5 * mib, 400},
		{"live heap over the floor", gctune.Policy{Percent: 400, Floor: 256 * mib}, 300 * mib, 5 * mib, 400},
		{"floor within what the percent allows", gctune.Policy{Percent: 400, Floor: 256 * mib}, 60 * mib, 0, 400},
		{"raised to the floor", gctune.Policy{Percent: 400, Floor: 256 * mib}, 40 * mib, 8 * mib, 450},
		{"scan counts in the base", gctune.Policy{Percent: 100, Floor: 100 * mib}, 10 * mib, 10 * mib, 450},
		{"a small heap counts as the runtime's minimum", gctune.Policy{Percent: 100, Floor: 100 * mib}, 1 * mib, 1 * mib, 2475},
		{"empty heap", gctune.Policy{Percent: 100, Floor: 100 * mib}, 0, 0, 2500},
		{"capped", gctune.Policy{Percent: 100, Floor: 1 << 60}, 1, 0, 1 << 20},
		{"percent at least 1", gctune.Policy{Percent: 0}, 10 * mib, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.p.PercentFor(tc.live, tc.scan))
		})
	}
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gogc() uint64 { return read("/gc/gogc:percent") }

// collectUntil runs collections until ok holds, for up to ten seconds
// (the tuner sets GOGC on the runtime's cleanup goroutine, after a
// collection).
func collectUntil(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		require.True(t, time.Now().Before(deadline), "GOGC %d, goal %d MiB", gogc(), read("/gc/heap/goal:bytes")>>20)
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// After every collection a policy with a floor sets the next goal to the
// floor while the live heap is small, and leaves GOGC at its percent
// once the live heap needs more, collection after collection; the
// restore puts back the GOGC found.
func TestApplyRaisesTheGoalToTheFloor(t *testing.T) {
	t.Setenv("GOGC", "")
	const floor = 96 << 20
	before := gogc()
	restore := gctune.Apply(gctune.Policy{Percent: 100, Floor: floor})
	t.Cleanup(restore)
	near := func(goal uint64) bool { return goal > floor*9/10 && goal < floor*11/10 }
	collectUntil(t, func() bool { return gogc() > 100 && near(read("/gc/heap/goal:bytes")) })

	keep := make([]byte, 80<<20) // live heap over half the floor: GOGC 100 gives more than it
	for i := range keep {
		keep[i] = 1
	}
	collectUntil(t, func() bool { return gogc() == 100 })
	require.Greater(t, read("/gc/heap/goal:bytes"), uint64(2*len(keep)*9/10))
	runtime.KeepAlive(keep)

	keep = nil // small again: raised again, after the collections since
	collectUntil(t, func() bool { return gogc() > 100 && near(read("/gc/heap/goal:bytes")) })

	restore()
	require.Equal(t, before, gogc())
	runtime.GC()
	time.Sleep(10 * time.Millisecond) // a stopped tuner's last cleanup changes nothing
	require.Equal(t, before, gogc())
}

func TestApplyWithoutAFloorSetsThePercent(t *testing.T) {
	t.Setenv("GOGC", "")
	before := gogc()
	restore := gctune.Apply(gctune.Policy{Percent: 250})
	t.Cleanup(restore)
	require.Equal(t, uint64(250), gogc())
	restore()
	require.Equal(t, before, gogc())
}

// A GOGC environment variable, which the runtime applied at start, wins.
func TestGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "150")
	before := gogc()
	restore := gctune.Apply(gctune.Policy{Percent: 400, Floor: 1 << 30})
	require.Equal(t, before, gogc())
	runtime.GC()
	require.Equal(t, before, gogc())
	restore()
	require.Equal(t, before, gogc())
}
