// Package postgres is the Postgres chat.Store for several server
// processes: graphs, chats and messages in the run store's schema and
// connection pool (runtime/store/postgres), so BeginTurn writes a turn's
// messages and its run's reservation in one transaction.
//
//	runs, _ := rpostgres.Open(ctx, rpostgres.Config{URL: url, Schema: "chatgraph"})
//	chats, _ := postgres.Open(ctx, runs)
package postgres
