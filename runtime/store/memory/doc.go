// Package memory is the in-process checkpoint store: run records, node
// checkpoints and event logs kept in maps behind one mutex. It implements
// runtime.Store with the same fencing and seq rules as the durable stores
// (the storetest conformance suite runs against it), plus runtime.Leaser
// (leases between the goroutines of one process), runtime.Inspector,
// runtime.BatchWriter and runtime.EffectLedger.
// It serves tests, benchmarks and servers that need no durability:
// everything is gone when the process ends.
//
//	st := memory.New()
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: st})
package memory
