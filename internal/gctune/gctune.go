package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Policy is how a process paces its garbage collections.
type Policy struct {
	// Percent is GOGC: a collection starts once the heap has grown this
	// many percent over what the last one left live (at least 1).
	Percent int
	// Floor, when positive, is the heap size in bytes under which no
	// collection starts: while the live heap is small, the percent is
	// raised after every collection so that the next one's goal is Floor.
	// 0: Percent alone.
	Floor int64
}

// Server is the policy the chatgraph server runs by default (its
// --gc-percent and --gc-heap-floor-mib): collect at five times the live
// heap, and not before the heap reaches 256 MiB (docs/benchmarks.md).
var Server = Policy{Percent: 400, Floor: 256 << 20}

// PercentFor is the GOGC that gives the next collection the policy's
// goal, after a collection that left live bytes of heap, and scan bytes
// of goroutine stacks and globals: the policy's Percent, or more while
// that goal would be under Floor. The runtime sizes a goal as live +
// (live+scan) x GOGC/100, and never under its minimum heap, 4 MiB x
// GOGC/100, which a raised GOGC raises too; so the base is at least 4
// MiB.
func (p Policy) PercentFor(live, scan int64) int {
	percent := max(p.Percent, 1)
	if p.Floor <= live {
		return percent
	}
	base := max(live+scan, minHeap)
	raised := (p.Floor - live) * 100 / base
	if raised > maxPercent {
		raised = maxPercent
	}
	return max(percent, int(raised))
}

// minHeap is the runtime's minimum heap goal at GOGC 100.
const minHeap = 4 << 20

// maxPercent bounds a raised GOGC (a nearly empty heap would ask for
// any number).
const maxPercent = 1 << 20

// mu serializes Apply, the restores and the tuners' cycles, so that a
// restore puts back what its Apply found and a stopped tuner changes
// nothing more.
var mu sync.Mutex

// Apply sets the process's collector to p and returns the function that
// puts back the GOGC it found (and stops raising it). The floor it
// applies is at most a quarter of the memory the process may use and
// half of GOMEMLIMIT (see boundedFloor). When the GOGC environment
// variable is set, the runtime has applied it, and Apply changes
// nothing.
func Apply(p Policy) (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	if p.Floor > 0 {
		p.Floor = boundedFloor(p.Floor, os.DirFS("/"), debug.SetMemoryLimit(-1))
	}
	mu.Lock()
	defer mu.Unlock()
	t := &tuner{p: p}
	orig := debug.SetGCPercent(t.percent())
	if p.Floor > 0 {
		t.arm()
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if t.stopped {
			return
		}
		t.stopped = true
		debug.SetGCPercent(orig)
	}
}

// tuner raises GOGC after every collection while p.Floor asks it to;
// stopped is set by its restore (under mu).
type tuner struct {
	p       Policy
	stopped bool
}

// cycleMark is an object the tuner lets go of, so that its cleanup runs
// after the next collection. It is larger than the runtime's tiny
// allocations, which share a block and are freed only together.
type cycleMark struct{ _ [32]byte }

// arm has t.cycle run after the next collection.
func (t *tuner) arm() {
	runtime.AddCleanup(new(cycleMark), (*tuner).cycle, t)
}

// cycle sets GOGC for what the collection just ended left live, and
// waits for the next one.
func (t *tuner) cycle() {
	mu.Lock()
	defer mu.Unlock()
	if t.stopped {
		return
	}
	debug.SetGCPercent(t.percent())
	t.arm()
}

// percent is the GOGC for the heap as the last collection left it.
func (t *tuner) percent() int { return t.p.PercentFor(heapNow()) }

// heapNow reads what the last collection left live: the heap's bytes,
// and the goroutine stacks' and globals' that a goal adds to them.
func heapNow() (live, scan int64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	return v(0), v(1) + v(2)
}
