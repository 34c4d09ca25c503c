// Command chatgraph is the chatgraph server and its admin tools:
//
//	chatgraph [server] [--addr 127.0.0.1:8080] [--state-dir ./.chatgraph]
//	          [--redis-url redis://...] [--database-url postgres://...]
//	chatgraph runs list [--status interrupted] [--chat ID] [--limit N]
//	chatgraph runs show RUN_ID
//	chatgraph runs resume RUN_ID [--value JSON]
//	chatgraph gc --older-than 720h
//
// Flags fall back to the environment (CHATGRAPH_ADDR, CHATGRAPH_STATE_DIR,
// CHATGRAPH_REDIS_URL, CHATGRAPH_DATABASE_URL, ...); CHATGRAPH_TOKEN, when
// set, is required as a bearer token on every API call. Without Redis and
// Postgres the server is self-contained: SQLite files under the state dir
// and in-process run control. SIGINT/SIGTERM stop it gracefully: new work
// is refused, runs get --drain-timeout to finish, the rest are cancelled
// with cause "shutdown" and continued at the next start.
package main
