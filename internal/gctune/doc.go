// Package gctune paces the Go garbage collector of a chatgraph server.
//
// A server streaming many runs allocates fast (every event is encoded,
// stored and framed) while what it keeps live stays small: at 1,000
// streaming runs about 50 MB. Go's collector starts a collection once the
// heap has grown by GOGC percent over the live heap, so a small live heap
// is collected often, and every collection takes CPU from the committer
// and the WebSocket senders while it marks, making the deltas of the
// moment late. A Policy sets GOGC and, with a Floor, raises it while the
// live heap is small, so that no collection starts before the heap
// reaches the floor. It never collects more often than GOGC alone would,
// and the heap stays under the larger of the floor and what GOGC lets
// it grow to.
//
//	restore := gctune.Apply(gctune.Policy{Percent: 400, Floor: 256 << 20})
//	defer restore()
//
// A floor is lowered to a quarter of the memory the process may use (its
// cgroup's limit, as in a container, or the machine's memory) and to half
// of GOMEMLIMIT. A GOGC environment variable wins over a Policy (Apply
// then changes nothing), and a GOMEMLIMIT still bounds the heap: the
// runtime collects as it nears the limit, whatever the floor.
package gctune
