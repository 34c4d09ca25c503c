// Package sqlite is the embedded durable checkpoint store: run records,
// node checkpoints, event logs and leases in one SQLite file (WAL mode,
// pure Go via modernc.org/sqlite, no cgo). It is the default store of a
// single server; the schema is migrated at Open.
//
//	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(stateDir, "chatgraph.db")})
//	if err != nil { ... }
//	defer st.Close()
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: st})
//
// Every write carries a fencing token and is refused with runtime.ErrFenced
// when the run holds a newer one; the check and the write are one
// statement or one transaction. Several processes may open the same file:
// SQLite's lock serialises their writes and leases (runtime.Leaser) decide
// who runs what. Durable outputs and event payloads come back as their
// JSON decoding (event Data as json.RawMessage). Completed side effects
// (runtime.EffectLedger) live in the same file, so a restarted server
// never repeats them.
//
// A run's events are appended to a table in commit order (the tail) and
// move into the table ordered by run a segment at a time, one row a
// segment, so that a group commit of many streaming runs writes a few
// pages, not one per run (tail.go, chunk.go).
package sqlite
