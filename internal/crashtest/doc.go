// Package crashtest proves that runs survive kill -9: its test re-executes
// the test binary as a worker process over a real SQLite store, SIGKILLs
// the worker at randomised failpoints (before a node's handler, after the
// handler before its commit, after the commit, inside a retry backoff),
// restarts it, and checks that every run ends with the result it would have
// had without crashes, that no succeeded node ran twice, and that every
// run's log keeps the lifecycle contract with gap-free seqs.
//
// TestCrashStreams does the same to a whole chat server (SQLite, chat
// service, HTTP transport) while a subscriber follows a token-streaming
// run over SSE, in sync and batched durability: SIGKILL from outside after
// a random number of deltas, or from inside just before or just after the
// store commit that holds a chosen delta (in batched mode: inside a
// group-commit interval). The subscriber resumes with Last-Event-ID after
// each restart, and what it received must be exactly the run's final log:
// commit-then-publish means nothing it saw is renumbered or retracted.
//
// Its fencing tests put two engines on two connection pools of one
// Postgres: racing over 1,000 orphaned runs, each run is taken by exactly
// one and no node runs twice; a holder paused past its lease is taken over
// and its late commit is rejected.
package crashtest
