// Package sqlite is the embedded chat.Store: graphs, chats and message
// trees in the SQLite file of the run store (runtime/store/sqlite), so a
// chat turn's messages and the reservation of its run commit in one
// transaction. The chat store opens no connection of its own: it writes
// through the run store's single writer connection (Update) and reads
// through its read pool (ReadDB), at the run store's synchronous level.
// Its tables are migrated at Open, recorded in chat_schema_migrations.
//
//	runs, err := rsqlite.Open(ctx, rsqlite.Config{Path: filepath.Join(stateDir, "chatgraph.db")})
//	if err != nil { ... }
//	defer runs.Close()
//	chats, err := sqlite.Open(ctx, runs)
//	if err != nil { ... }
//	defer chats.Close() // leaves runs open
package sqlite
