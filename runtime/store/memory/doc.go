// Package memory is the in-process checkpoint store: run records, node
// checkpoints and event logs kept in maps behind one mutex. It implements
// runtime.Store with the same fencing and seq rules as the durable stores
// (the storetest conformance suite runs against it), and serves tests,
// benchmarks and servers that need no durability.
//
//	st := memory.New()
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: st})
package memory
