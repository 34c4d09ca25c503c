// Package postgres is the shared durable checkpoint store: run records,
// node checkpoints, event logs and leases in a Postgres schema (pgx/v5),
// so several server processes serve one deployment. The schema is created
// and migrated at Open; processes starting together take turns under an
// advisory lock.
//
//	st, err := postgres.Open(ctx, postgres.Config{URL: os.Getenv("DATABASE_URL"), Schema: "chatgraph"})
//	if err != nil { ... }
//	defer st.Close()
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: st})
//
// Every write carries a fencing token and is refused with runtime.ErrFenced
// when the run holds a newer one; the check and the write are one
// statement. Leases (runtime.Leaser) decide which process runs what; they
// are measured with the caller's clock (Config.Now). Durable outputs come
// back as their JSON decoding, event Data as json.RawMessage. Completed
// side effects (runtime.EffectLedger) live in the same schema, so no
// process of the deployment repeats one another recorded.
package postgres
