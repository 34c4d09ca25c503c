// Package durabench measures the cost of durability: the W4 workload (a
// chain of 100 trivial nodes) over SQLite in each durability mode and over
// Postgres, throughput of batched runs, and recovery of many runs whose
// process died. Engines are built as the server builds them: on the store
// itself, with a StoreObserver recording into a Prometheus histogram.
// Benchmarks only; results go to docs/benchmarks.md.
package durabench
