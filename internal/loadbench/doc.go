// Command loadbench measures a chatgraph server from outside, as a
// deployment sees it: it starts the real binary on loopback (a fresh
// SQLite state dir, --rate-limit -1) for each cell of the table, saves
// the graph chat_start -> agent {model: echo, tokenDelayMs: 0} ->
// chat_output, opens one chat per client, and has every client send a
// 20-word message, read the run's events to run_completed, and send the
// next, for a warm-up and then the measured duration.
//
// Each turn's answer (its node_delta texts) must spell the echo model's
// full answer, or the run fails. Reported per cell: turns/s, time to the
// first node_delta and to run_completed (p50/p99), the server process's
// CPU time (user + system from /proc/<pid>/stat) per turn, and its peak
// RSS (VmHWM), the lines it logged (at its default level, info) per turn
// and the goroutines it started per turn (from its /metrics). Turns go
// over SSE (POST .../messages with Accept:
// text/event-stream) or over one WebSocket per client (stream_chat).
//
//	make bench-server        # build, then every cell
//	go run ./internal/loadbench -bin bin/chatgraph -durability sync -clients 50 -transport ws -duration 20s
package main
