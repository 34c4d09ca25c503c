// Package sqlite is the embedded durable chatstore.Store: graphs, chats and
// message trees in one SQLite file (WAL mode, pure Go via modernc.org/sqlite).
//
//	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(stateDir, "chats.db")})
//	defer st.Close()
package sqlite
