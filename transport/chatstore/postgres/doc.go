// Package postgres is the shared chatstore.Store: graphs, chats and
// message trees in Postgres (pgx), so several server processes serve one
// deployment. Tables live in one schema, created at Open.
//
//	st, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: "chatgraph"})
//	defer st.Close()
package postgres
