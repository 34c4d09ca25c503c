package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"chatgraph/chat"
	"chatgraph/internal/gctune"
	rt "chatgraph/runtime"
)

// Benchmarks are measurements, not pass/fail timings. Run them with
//
//	go test -run '^$' -bench . -benchtime 1x ./transport
//
// and see docs/api.md for results.

// benchEnv is a server for benchmarks in durability mode d: no run or
// connection limits, no pings, the turns starting at once bounded as the
// server binary bounds them by default (chat.ServerBusyStartingTurns
// while the commits lag) unless maxStartingEnv or busyStartingEnv says
// otherwise; opts change the rest.
func benchEnv(b *testing.B, d rt.Durability, opts ...option) *env {
	maxStarting, busyStarting := turnsEnv(b, maxStartingEnv, 0), turnsEnv(b, busyStartingEnv, chat.ServerBusyStartingTurns)
	return newEnvTB(b, append([]option{func(c *transportConfig) {
		c.MaxRuns, c.WSPing, c.Engine.Durability = 100000, time.Hour, d
		c.MaxWebSocketsPerIP, c.MaxRunsPerClient = -1, -1 // every benchmark client is on loopback
		c.MaxStartingTurns, c.BusyStartingTurns = maxStarting, busyStarting
		if v := os.Getenv(busyLagEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				b.Fatalf("%s=%q: %v", busyLagEnv, v, err)
			}
			c.BusyCommitLag = d
		}
	}}, opts...)...)
}

// turnsEnv is the count of turns the environment variable name holds
// (-1 or more), or def when it is unset.
func turnsEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 {
		b.Fatalf("%s=%q: want a count of turns", name, v)
	}
	return n
}

// maxStartingEnv, when set, bounds the chat calls the benchmarks' server
// starts at once (chat.Config.MaxStartingTurns, the server's
// --max-starting-turns); unset, as by default, nothing bounds them
// always. busyStartingEnv sets the bound while the commits lag
// (chat.Config.BusyStartingTurns, the server's --busy-starting-turns;
// unset, the server's default, chat.ServerBusyStartingTurns; 0, none), and
// busyLagEnv the lag (--busy-commit-lag, default 2 ms).
const (
	maxStartingEnv  = "CHATGRAPH_BENCH_MAX_STARTING_TURNS"
	busyStartingEnv = "CHATGRAPH_BENCH_BUSY_STARTING_TURNS"
	busyLagEnv      = "CHATGRAPH_BENCH_BUSY_COMMIT_LAG"
	gcHeapFloorEnv  = "CHATGRAPH_BENCH_GC_HEAP_FLOOR_MIB"
)

// writeCounter counts the run store's write transactions and sums the
// time group commits (write_batches) take, waiting for the writer
// included (not the WAL fsync: the store runs it once the writer is free,
// one for every transaction written before it; syncs counts those).
type writeCounter struct{ n, commits, commitNs atomic.Int64 }

func (w *writeCounter) observe(op string, d time.Duration, err error) {
	if err == nil && rt.WriteOp(op) {
		w.n.Add(1)
	}
	if op == "write_batches" {
		w.commits.Add(1)
		w.commitNs.Add(int64(d))
	}
}

// modes runs a benchmark once per durability mode of the run store.
func modes(b *testing.B, f func(b *testing.B, d rt.Durability)) {
	for _, d := range []rt.Durability{rt.DurabilitySync, rt.DurabilityBatched} {
		b.Run(string(d), func(b *testing.B) { f(b, d) })
	}
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[int(q*float64(len(xs)-1))]
}

// BenchmarkEventLatencyWebSocket: 1,000 concurrent runs streamed over 50
// WebSocket connections, each answering 100 words 20 ms apart (50,000
// deltas/s offered once all stream); the latency of each node_delta from
// the runtime emitting it (its envelope time) to the client reading it,
// the process's CPU time per event read (server and in-process clients),
// the frames the server wrote per write to a connection, and the median
// and 99th percentile of the time from a delta's emit to its publishing
// (publish-p50-µs, publish-p99-µs: the commit's share of the latency,
// from the server's histogram, each placed within its bucket), and the
// median, 99th percentile and longest of the store's WAL fsyncs
// (sync-p50-µs, sync-p99-µs, sync-max-µs: the disk's share). The 1,000 turns start at once, and
// starting a turn costs far more than streaming a delta, so the deltas
// emitted while runs still start wait behind that burst: steady-p50 and
// steady-p99 take only the deltas emitted while all 1,000 runs stream
// (after the last run's first delta and before the first run's last),
// start-p99 those emitted before (while turns start) and end-p99 those
// emitted after (while turns end). over-5ms-% is the share of all deltas
// that took longer than the p99 target's 5 ms (the p99 is within it when
// this is at most 1 %), and start-, steady- and end-over-5ms-% split
// that share by the phase the deltas were emitted in.
// first-delta-p50-ms and first-delta-p99-ms are what starting a turn
// took: from a client sending it to reading its first delta (the echo
// model sends its first word at once). steal-% is the share of the
// machine's CPU time its hypervisor took while the clients ran (from
// /proc/stat, where there is one): a virtual machine's figures are only
// comparable at similar steal. machine-busy-% is the share of the
// machine's CPU time, all cores and all processes, that was not idle
// over the same span: how close to saturation the load ran (near 100,
// every hop of a delta waits in a run queue, and no change on the path
// of one delta shows in its latency). alloc-B/event is the heap the process
// (server and in-process clients) allocated per event read, gc-cycles the
// garbage collections while the clients ran: a collection's marking
// takes CPU from the committer and the senders, and its assists tax the
// goroutines that allocate most.
func BenchmarkEventLatencyWebSocket(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 20, 100, false, false) })
}

// BenchmarkEventLatencyWebSocketLong: BenchmarkEventLatencyWebSocket's
// load streaming five times as long (500 words a run, about 10 s with
// all 1,000 streaming), so that the steady window holds the garbage
// collections a sustained load brings: the 2-second window of the
// saturated benchmark can fall between two of them.
func BenchmarkEventLatencyWebSocketLong(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 20, 500, false, false) })
}

// BenchmarkEventLatencyWebSocketPaced: 1,000 runs of 20 words 100 ms
// apart (10,000 deltas/s offered), a load two cores carry with the
// start burst included.
func BenchmarkEventLatencyWebSocketPaced(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 100, 20, false, false) })
}

// BenchmarkEventLatencyWebSocketLight: 1,000 runs of 10 words a second
// apart (1,000 deltas/s offered): the event path with the machine mostly
// idle. The runs start together, so their deltas come in waves, about
// once a second each: peak-deltas/s says how dense a wave is.
func BenchmarkEventLatencyWebSocketLight(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 1000, 10, false, false) })
}

// BenchmarkEventLatencyWebSocketLightSpread: the runs of
// BenchmarkEventLatencyWebSocketLight started one after another over a
// second, so that 1,000 deltas/s come at independent moments instead of
// in waves.
func BenchmarkEventLatencyWebSocketLightSpread(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 1000, 10, true, false) })
}

// BenchmarkEventLatencyWebSocketRemote: the load of
// BenchmarkEventLatencyWebSocket with its clients in a process of their
// own, as a server's clients are: they read when the kernel wakes them,
// not when the server's Go scheduler next polls the network, and
// cpu-µs/event is the server's alone (client-cpu-µs/event the clients').
// They share the machine's two cores with the server all the same.
func BenchmarkEventLatencyWebSocketRemote(b *testing.B) {
	modes(b, func(b *testing.B, d rt.Durability) { benchEventLatency(b, d, 20, 100, false, true) })
}

// BenchmarkEventLatencyWebSocketRates finds the load up to which the
// latency target (sync: p50 <= 1 ms, p99 <= 5 ms) holds: 1,000 runs in
// sync mode, started one after another over one word interval (as in
// LightSpread), their words paced so that together they offer `deltas`
// deltas a second for about four seconds, read by clients in the
// benchmark's process (clients=goroutines) or in a process of their own
// (clients=process, as in BenchmarkEventLatencyWebSocketRemote).
func BenchmarkEventLatencyWebSocketRates(b *testing.B) {
	for _, rate := range []int{2500, 5000, 10000, 20000} {
		for _, remote := range []bool{false, true} {
			clients := map[bool]string{false: "goroutines", true: "process"}[remote]
			b.Run(fmt.Sprintf("deltas=%d/clients=%s", rate, clients), func(b *testing.B) {
				delayMs := 1000 * 1000 / rate // each of the 1,000 runs
				benchEventLatency(b, rt.DurabilitySync, delayMs, max(10, 4000/delayMs), true, remote)
			})
		}
	}
}

// delta is one node_delta a benchmark client read: when the run emitted
// it (Unix nanoseconds), how long it took to arrive (µs), and whether it
// was its run's first. It holds no pointer, so that the hundreds of
// thousands the clients keep are not scanned by every collection of the
// process they share with the server.
type delta struct {
	Emitted int64
	Latency float64
	First   bool
}

// emitted is when the run emitted the delta.
func (d delta) emitted() time.Time { return time.Unix(0, d.Emitted) }

// latencyLoad is what the clients of a latency benchmark do: Conns
// WebSocket connections to URL, each sending its share of Chats a turn of
// Words words (the graph streams them TokenDelayMs apart) and reading
// every event to each run's end. With Spread, run k of the turns is sent
// k/len(Chats) of a word interval after Start, instead of all at once.
type latencyLoad struct {
	URL, Token   string
	Chats        []string
	Conns        int
	Words        int
	TokenDelayMs int
	Spread       bool
	Start        time.Time
}

// latencyResult is what the clients read: every delta, the events in
// all, and the steady window (from the last run's first delta to the
// first run's last); Began and Ended bound the clients' work.
type latencyResult struct {
	Deltas []delta
	// FirstDelta is, per turn, the time from the client sending it to
	// reading its first delta (µs): what starting a turn took.
	FirstDelta           []float64
	Events               int64
	SteadyFrom, SteadyTo time.Time
	Began, Ended         time.Time
	Errors               []string
}

// latencies returns the deltas' latencies (µs): all of them, and those
// of the deltas emitted before, in and after the steady window (while
// turns still start, while all stream, while turns end).
func (res latencyResult) latencies() (all, start, steady, end []float64) {
	all = make([]float64, 0, len(res.Deltas))
	for _, x := range res.Deltas {
		all = append(all, x.Latency)
		switch {
		case x.emitted().Before(res.SteadyFrom):
			start = append(start, x.Latency)
		case x.emitted().After(res.SteadyTo):
			end = append(end, x.Latency)
		default:
			steady = append(steady, x.Latency)
		}
	}
	return all, start, steady, end
}

// p99BudgetUs is the p99 the latency target allows (µs): sync mode
// p99 <= 5 ms.
const p99BudgetUs = 5000

// overBudget counts the latencies in lat over p99BudgetUs.
func overBudget(lat []float64) int {
	over := 0
	for _, l := range lat {
		if l > p99BudgetUs {
			over++
		}
	}
	return over
}

// reportLatency reports what a latency benchmark's clients read (their
// errors fail it): the deltas' p50 and p99, the steady window's, the p99
// before it (while turns start) and after it (while turns end), and the
// process's CPU per event and the events a second over took. It returns
// the steady window's latencies.
func reportLatency(b *testing.B, res latencyResult, cpu, took time.Duration) (steady []float64) {
	for _, msg := range res.Errors {
		b.Error(msg)
	}
	lat, starting, steady, ending := res.latencies()
	b.ReportMetric(quantile(lat, 0.5), "p50-µs")
	b.ReportMetric(quantile(lat, 0.99), "p99-µs")
	b.ReportMetric(quantile(steady, 0.5), "steady-p50-µs")
	b.ReportMetric(quantile(steady, 0.99), "steady-p99-µs")
	if len(starting) > 0 {
		b.ReportMetric(quantile(starting, 0.99), "start-p99-µs")
	}
	if len(ending) > 0 {
		b.ReportMetric(quantile(ending, 0.99), "end-p99-µs")
	}
	// The p99 is within budget when at most 1 % of the deltas are over
	// it: each phase's share of all deltas over it says which phase
	// spends that 1 %.
	// The phases partition the deltas, so their counts add up to the
	// whole run's.
	share := func(n int) float64 { return 100 * float64(n) / float64(max(len(lat), 1)) }
	start, steadyOver, end := overBudget(starting), overBudget(steady), overBudget(ending)
	b.ReportMetric(share(start), "start-over-5ms-%")
	b.ReportMetric(share(steadyOver), "steady-over-5ms-%")
	b.ReportMetric(share(end), "end-over-5ms-%")
	b.ReportMetric(share(start+steadyOver+end), "over-5ms-%")
	b.ReportMetric(float64(cpu.Microseconds())/float64(res.Events), "cpu-µs/event")
	b.ReportMetric(float64(res.Events)/took.Seconds(), "events/s")
	return steady
}

// runLatencyClients runs load's clients and returns what they read.
func runLatencyClients(load latencyLoad) latencyResult {
	var (
		mu  sync.Mutex
		res = latencyResult{Began: time.Now()}
		wg  sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		res.Errors = append(res.Errors, err.Error())
		mu.Unlock()
	}
	content := strings.Repeat("word ", load.Words)
	mine := len(load.Chats) / load.Conns
	for c := range load.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			opts := &websocket.DialOptions{Subprotocols: []string{"chatgraph.v1"}}
			if load.Token != "" {
				opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + load.Token}}
			}
			dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
			conn, _, err := websocket.Dial(dialCtx, "ws"+strings.TrimPrefix(load.URL, "http")+"/api/v1/ws", opts)
			dialCancel()
			if err != nil {
				fail(err)
				return
			}
			defer conn.CloseNow()
			conn.SetReadLimit(1 << 20)
			var sentMu sync.Mutex
			sent := make(map[string]time.Time, mine) // chat id -> when its turn was sent
			send := func() {
				for i := range mine {
					if load.Spread {
						// Run k = i*Conns + c starts k/len(Chats) of a word
						// interval after the first.
						k := i*load.Conns + c
						at := time.Duration(k) * time.Duration(load.TokenDelayMs) * time.Millisecond / time.Duration(len(load.Chats))
						time.Sleep(time.Until(load.Start.Add(at)))
					}
					f, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("b%d-%d", c, i), "type": "stream_chat",
						"chatId": load.Chats[c*mine+i], "content": content})
					sentMu.Lock()
					sent[load.Chats[c*mine+i]] = time.Now()
					sentMu.Unlock()
					if err := conn.Write(ctx, websocket.MessageText, f); err != nil {
						fail(err)
						return
					}
				}
			}
			if load.Spread {
				// Read the runs started so far meanwhile; the sends end
				// before the connection closes.
				sent := make(chan struct{})
				go func() { defer close(sent); send() }()
				defer func() { <-sent }()
			} else {
				send()
			}
			done := 0
			local := make([]delta, 0, mine*load.Words)
			firstDelta := make([]float64, 0, mine)
			var events int64
			type span struct{ first, last time.Time } // a run's first and last delta
			runs := make(map[string]*span, mine)
			// The clients may share the server's process and its two
			// cores, so they read lean: frames into one buffer, reads
			// without a context that can end (coder/websocket would arm a
			// timer per read; the connection closes at the deadline
			// instead), and only the fields they use parsed, in place:
			// they allocate nothing per frame, so that the server's
			// garbage collector does not collect theirs.
			stop := context.AfterFunc(ctx, func() { conn.CloseNow() })
			defer stop()
			var frame bytes.Buffer
			for done < mine {
				_, r, err := conn.Reader(context.Background())
				if err == nil {
					frame.Reset()
					_, err = frame.ReadFrom(r)
				}
				if err != nil {
					fail(err)
					return
				}
				now := time.Now()
				// The strings the parse returns lie in frame's buffer:
				// what outlives the frame is copied.
				b := frame.Bytes()
				msg := unsafe.String(unsafe.SliceData(b), len(b))
				if gjson.Get(msg, "type").Str != "event" {
					continue
				}
				ev := gjson.Get(msg, "event")
				events++
				switch ev.Get("type").Str {
				case "node_delta":
					t := ev.Get("time").Str
					at, err := time.Parse(time.RFC3339Nano, t)
					if err != nil {
						fail(fmt.Errorf("event time %q: %w", strings.Clone(t), err))
						return
					}
					run := ev.Get("runId").Str
					sp := runs[run]
					local = append(local, delta{at.UnixNano(), float64(now.Sub(at).Microseconds()), sp == nil})
					if sp == nil {
						sp = &span{first: at}
						runs[strings.Clone(run)] = sp
						sentMu.Lock()
						firstDelta = append(firstDelta, float64(now.Sub(sent[ev.Get("chatId").Str]).Microseconds()))
						sentMu.Unlock()
					}
					sp.last = at
				case "run_completed", "run_failed", "run_cancelled":
					done++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Deltas = append(res.Deltas, local...)
			res.FirstDelta = append(res.FirstDelta, firstDelta...)
			res.Events += events
			for _, sp := range runs {
				if sp.first.After(res.SteadyFrom) {
					res.SteadyFrom = sp.first
				}
				if res.SteadyTo.IsZero() || sp.last.Before(res.SteadyTo) {
					res.SteadyTo = sp.last
				}
			}
		}()
	}
	wg.Wait()
	res.Ended = time.Now()
	return res
}

// The environment of a latency benchmark's client process: the file
// with its latencyLoad, and the file to write its latencyResult to.
const (
	latencyLoadEnv   = "CHATGRAPH_LATENCY_LOAD"
	latencyResultEnv = "CHATGRAPH_LATENCY_RESULT"
)

// TestHelperLatencyClients is the client process of the latency
// benchmarks whose clients run apart from the server.
func TestHelperLatencyClients(t *testing.T) {
	path := os.Getenv(latencyLoadEnv)
	if path == "" {
		t.Skip("a helper process of the event latency benchmarks")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var load latencyLoad
	if err := json.Unmarshal(raw, &load); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(runLatencyClients(load))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(latencyResultEnv), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// remoteLatencyClients runs load's clients in a process of their own and
// returns what they read and the CPU time they took.
func remoteLatencyClients(b *testing.B, load latencyLoad) (latencyResult, time.Duration) {
	dir := b.TempDir()
	raw, err := json.Marshal(load)
	if err != nil {
		b.Fatal(err)
	}
	loadPath, resultPath := dir+"/load.json", dir+"/result.json"
	if err := os.WriteFile(loadPath, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLatencyClients$")
	cmd.Env = append(os.Environ(), latencyLoadEnv+"="+loadPath, latencyResultEnv+"="+resultPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("latency clients: %v\n%s", err, out)
	}
	raw, err = os.ReadFile(resultPath)
	if err != nil {
		b.Fatal(err)
	}
	var res latencyResult
	if err := json.Unmarshal(raw, &res); err != nil {
		b.Fatal(err)
	}
	return res, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// benchEventLatency streams 1,000 runs of `words` words tokenDelayMs
// apart over 50 WebSocket connections; spread starts run k of the 1,000
// k/1,000 of a word interval after the first, instead of all at once;
// remote runs the clients in a process of their own.
func benchEventLatency(b *testing.B, d rt.Durability, tokenDelayMs, words int, spread, remote bool) {
	const runs, conns = 1000, 50
	// The garbage collector as the server binary runs it (gctune.Server),
	// not the test binary's; a GOGC environment variable wins, as in the
	// server, and gcHeapFloorEnv sets another floor (0: none).
	gc := gctune.Server
	if v := os.Getenv(gcHeapFloorEnv); v != "" {
		mib, err := strconv.ParseInt(v, 10, 64)
		if err != nil || mib < 0 {
			b.Fatalf("%s=%q: want MiB", gcHeapFloorEnv, v)
		}
		gc.Floor = mib << 20
	}
	defer gctune.Apply(gc)()
	var writes writeCounter
	timeline := newCommitTimeline(b)
	e := benchEnv(b, d, func(c *transportConfig) {
		c.Engine.StoreObserver = writes.observe
		if timeline != nil {
			c.Engine.CommitObserver = timeline.observe
		}
	})
	graphID, _ := e.newChat(basicGraph(fmt.Sprintf(`{"tokenDelayMs": %d}`, tokenDelayMs)))
	chats := make([]string, runs)
	for i := range chats {
		var ch map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
		chats[i] = ch["id"].(string)
	}
	var walSyncs syncTimes
	if s, ok := e.store.(interface {
		ObserveSyncs(func(time.Duration, error))
	}); ok {
		s.ObserveSyncs(walSyncs.observe)
		defer s.ObserveSyncs(nil)
	}
	for b.Loop() {
		walSyncs.reset()
		frames0, wsWrites0 := wsWriteCounts(e)
		published0 := publishDelays(e)
		sched0 := schedLatencies()
		writes0, commits0, commitNs0 := writes.n.Load(), writes.commits.Load(), writes.commitNs.Load()
		load := latencyLoad{URL: e.url, Token: e.token, Chats: chats, Conns: conns, Words: words,
			TokenDelayMs: tokenDelayMs, Spread: spread}
		var res latencyResult
		var clientCPU time.Duration
		alloc0, gcs0 := heapCounters()
		stopProfile := profilePhase(b)
		start, cpu0 := time.Now(), cpuTime()
		timeline.begin(start)
		steal0, idle0, machine0 := machineTimes()
		if remote {
			// The helper starts in a few milliseconds; its spread starts
			// count from a moment it is surely up.
			load.Start = start.Add(200 * time.Millisecond)
			res, clientCPU = remoteLatencyClients(b, load)
		} else {
			load.Start = start
			res = runLatencyClients(load)
		}
		took, cpu := res.Ended.Sub(res.Began), cpuTime()-cpu0
		stopProfile()
		timeline.write(res.Deltas)
		alloc, gcs := heapCounters()
		b.ReportMetric(float64(alloc-alloc0)/float64(res.Events), "alloc-B/event")
		b.ReportMetric(float64(gcs-gcs0), "gc-cycles")
		if steal, idle, machine := machineTimes(); machine > machine0 {
			b.ReportMetric(100*float64(steal-steal0)/float64(machine-machine0), "steal-%")
			b.ReportMetric(100-100*float64(idle-idle0)/float64(machine-machine0), "machine-busy-%")
		}
		sched := sched0.since()
		b.ReportMetric(sched.quantile(0.5)*1e6, "sched-p50-µs")
		b.ReportMetric(sched.quantile(0.99)*1e6, "sched-p99-µs")
		frames, wsWrites := wsWriteCounts(e)
		if wsWrites > wsWrites0 {
			b.ReportMetric((frames-frames0)/(wsWrites-wsWrites0), "frames/write")
		}
		fsyncs := walSyncs.report(b)
		if published := publishDelays(e).minus(published0); len(published.counts) > 0 {
			b.ReportMetric(published.interpolated(0.5)*1e6, "publish-p50-µs")
			b.ReportMetric(published.interpolated(0.99)*1e6, "publish-p99-µs")
		}
		steady := reportLatency(b, res, cpu, took)
		if remote {
			b.ReportMetric(float64(clientCPU.Microseconds())/float64(res.Events), "client-cpu-µs/event")
		}
		b.ReportMetric(quantile(res.FirstDelta, 0.5)/1e3, "first-delta-p50-ms")
		b.ReportMetric(quantile(res.FirstDelta, 0.99)/1e3, "first-delta-p99-ms")
		if w := res.SteadyTo.Sub(res.SteadyFrom).Seconds(); w > 0 {
			b.ReportMetric(float64(len(steady))/w, "steady-deltas/s")
			b.ReportMetric(peakRate(res.Deltas, res.SteadyFrom, res.SteadyTo), "peak-deltas/s")
		}
		b.ReportMetric(float64(writes.n.Load()-writes0)/took.Seconds(), "writes/s")
		b.ReportMetric(float64(fsyncs)/took.Seconds(), "fsyncs/s")
		if n := writes.commits.Load() - commits0; n > 0 {
			b.ReportMetric(float64(writes.commitNs.Load()-commitNs0)/float64(n)/1e6, "ms/commit")
		}
	}
}

// histogram counts samples in buckets: counts[i] lies between
// buckets[i] and buckets[i+1] (the Go scheduler's waits, schedLatencies;
// the server's publish delays, publishDelays).
type histogram struct {
	counts  []uint64
	buckets []float64
}

func schedLatencies() histogram {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	h := m[0].Value.Float64Histogram()
	return histogram{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// since is the histogram of the waits since h was read.
func (h histogram) since() histogram { return schedLatencies().minus(h) }

// minus is what h counted since old, a reading of the same histogram.
func (h histogram) minus(old histogram) histogram {
	out := histogram{counts: slices.Clone(h.counts), buckets: h.buckets}
	for i := range old.counts {
		out.counts[i] -= old.counts[i]
	}
	return out
}

// interpolated is h's q quantile, in seconds, placed within its bucket as
// if the bucket's samples were spread evenly over it (the lower bound of
// the last, unbounded bucket).
func (h histogram) interpolated(q float64) float64 {
	var total uint64
	for _, n := range h.counts {
		total += n
	}
	want, seen := q*float64(total), 0.0
	for i, n := range h.counts {
		if n > 0 && seen+float64(n) > want {
			lo, hi := h.buckets[i], h.buckets[i+1]
			if math.IsInf(hi, 1) {
				return lo
			}
			return lo + (hi-lo)*(want-seen)/float64(n)
		}
		seen += float64(n)
	}
	return 0
}

// quantile is h's q quantile, in seconds: the upper bound of its bucket.
func (h histogram) quantile(q float64) float64 {
	var total uint64
	for _, n := range h.counts {
		total += n
	}
	want, seen := uint64(q*float64(total)), uint64(0)
	for i, n := range h.counts {
		if seen += n; seen > want {
			return h.buckets[i+1]
		}
	}
	return 0
}

// peakRate is how densely the deltas emitted from `from` to `to` came:
// the 99th percentile, over the 10 ms intervals of that window, of the
// deltas emitted in one interval, per second.
func peakRate(all []delta, from, to time.Time) float64 {
	const slot = 10 * time.Millisecond
	per := make([]float64, to.Sub(from)/slot+1)
	for _, x := range all {
		if e := x.emitted(); !e.Before(from) && !e.After(to) {
			per[e.Sub(from)/slot]++
		}
	}
	return quantile(per, 0.99) * float64(time.Second/slot)
}

// wsWriteCounts reads the server's WebSocket frames and writes so far
// from /metrics.
func wsWriteCounts(e *env) (frames, writes float64) {
	return e.metric("chatgraph_websocket_frames_total"), e.metric("chatgraph_websocket_writes_total")
}

// publishDelays reads the server's histogram of token deltas' delays
// from emit to publishing (chatgraph_event_publish_delay_seconds, kind
// delta) so far.
func publishDelays(e *env) histogram {
	const prefix = `chatgraph_event_publish_delay_seconds_bucket{kind="delta",le="`
	var h histogram
	type bucket struct{ le, cum float64 }
	var bs []bucket
	for series, v := range e.metrics() {
		le, ok := strings.CutPrefix(series, prefix)
		if !ok {
			continue
		}
		bound, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
		if err != nil {
			e.t.Fatalf("%s: %v", series, err)
		}
		bs = append(bs, bucket{bound, v})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	h.buckets = []float64{0}
	var prev float64
	for _, b := range bs {
		h.buckets = append(h.buckets, b.le)
		h.counts = append(h.counts, uint64(b.cum-prev))
		prev = b.cum
	}
	return h
}

// syncTimes are the durations of the WAL fsyncs the env's SQLite store
// ran (Store.ObserveSyncs), or of the floor's fdatasyncs, in µs.
type syncTimes struct {
	mu sync.Mutex
	us []float64
}

func (t *syncTimes) observe(d time.Duration, _ error) {
	t.mu.Lock()
	t.us = append(t.us, float64(d.Nanoseconds())/1e3)
	t.mu.Unlock()
}

func (t *syncTimes) reset() {
	t.mu.Lock()
	t.us = t.us[:0]
	t.mu.Unlock()
}

// report reports the syncs' median, 99th percentile and longest (a sync
// of tens of milliseconds or more is the disk stalling: every delta in
// flight waits for it), and returns how many there were.
func (t *syncTimes) report(b *testing.B) int {
	t.mu.Lock()
	us := slices.Clone(t.us)
	t.mu.Unlock()
	if len(us) > 0 {
		b.ReportMetric(quantile(us, 0.5), "sync-p50-µs")
		b.ReportMetric(quantile(us, 0.99), "sync-p99-µs")
		b.ReportMetric(slices.Max(us), "sync-max-µs")
	}
	return len(us)
}

// BenchmarkIdleWebSockets: 9,000 idle WebSocket connections held by a
// client subprocess; the server's heap, stacks and RSS per connection.
func BenchmarkIdleWebSockets(b *testing.B) {
	const n = 9000
	e := benchEnv(b, rt.DurabilitySync)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := rssKiB()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdleClients$")
		cmd.Env = append(os.Environ(), "CHATGRAPH_IDLE_CLIENTS_URL="+e.url, "CHATGRAPH_IDLE_CLIENTS="+strconv.Itoa(n))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ready") {
			b.Fatalf("client helper: %q %v", line, err)
		}
		waitFor(b, "the server to hold every connection", func() bool {
			return e.metric(`chatgraph_active_streams{transport="websocket"}`) == n
		})
		runtime.GC()
		runtime.ReadMemStats(&after)
		rssAfter := rssKiB()
		used := float64((after.HeapInuse + after.StackInuse) - (before.HeapInuse + before.StackInuse))
		b.ReportMetric(used/n/1024, "heap+stack-KiB/conn")
		b.ReportMetric(float64(rssAfter-rssBefore)/n, "RSS-KiB/conn")
		b.ReportMetric(float64(runtime.NumGoroutine())/n, "goroutines/conn")
		_ = stdin.Close()
		_ = cmd.Wait()
	}
}

// TestHelperIdleClients is the client process of BenchmarkIdleWebSockets.
func TestHelperIdleClients(t *testing.T) {
	url := os.Getenv("CHATGRAPH_IDLE_CLIENTS_URL")
	if url == "" {
		t.Skip("a helper process of BenchmarkIdleWebSockets")
	}
	n, _ := strconv.Atoi(os.Getenv("CHATGRAPH_IDLE_CLIENTS"))
	conns := make([]*websocket.Conn, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/api/v1/ws", &websocket.DialOptions{Subprotocols: []string{"chatgraph.v1"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.CloseNow()
	}
}

// cpuTime is the process's user and system CPU time so far (server and
// in-process clients together).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapCounters reads the bytes the process has allocated on the heap and
// the garbage collections it has completed.
func heapCounters() (allocated, cycles uint64) {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m)
	return m[0].Value.Uint64(), m[1].Value.Uint64()
}

// machineTimes reads the machine's CPU time from /proc/stat: what the
// hypervisor took from this virtual machine (steal), the cores' idle
// time (idle and iowait) and all of it, in clock ticks; zeros where
// /proc/stat cannot be read.
func machineTimes() (steal, idle, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, 0
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]:
	// the guest times are counted in user and nice already.
	for i, f := range fields[1:9] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, 0
		}
		total += n
		switch i {
		case 3, 4: // idle, iowait
			idle += n
		case 7:
			steal = n
		}
	}
	return steal, idle, total
}

func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			n, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkChatThroughputSSE: 32 clients sending chat messages with
// Accept: text/event-stream, each reading its stream to the end.
func BenchmarkChatThroughputSSE(b *testing.B) { modes(b, benchThroughput) }

func benchThroughput(b *testing.B, d rt.Durability) {
	const clients, perClient = 32, 20
	e := benchEnv(b, d)
	graphID, _ := e.newChat(basicGraph(""))
	chats := make([]string, clients)
	for i := range chats {
		var ch map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats", map[string]any{"graphId": graphID}, &ch), http.StatusCreated)
		chats[i] = ch["id"].(string)
	}
	for b.Loop() {
		var events atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perClient {
					s := e.openSSE(context.Background(), "POST", "/api/v1/chats/"+chats[c]+"/messages",
						map[string]any{"content": "the quick brown fox"}, nil)
					for {
						if _, err := s.next(false); err != nil {
							break
						}
						events.Add(1)
					}
					s.resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		b.ReportMetric(float64(clients*perClient)/took.Seconds(), "requests/s")
		b.ReportMetric(float64(events.Load())/took.Seconds(), "events/s")
	}
}

// profilePhaseEnv names a file for a CPU profile of a latency
// benchmark's measured phase alone (the clients' run, not the chats'
// creation before it), tracePhaseEnv one for an execution trace of it
// (runtime/trace: go tool trace reads it, and golang.org/x/exp/trace
// gives each goroutine's waits for a processor); unset, nothing is
// recorded. profileFromEnv and profileForEnv narrow both to a window of
// the phase, as Go durations: where it begins, counted from the phase's
// start, and how long it lasts — the 1,000 turns starting (FOR=300ms),
// say, or ending (FROM=2.05s), apart from the streaming between.
const (
	profilePhaseEnv = "CHATGRAPH_BENCH_CPUPROFILE"
	tracePhaseEnv   = "CHATGRAPH_BENCH_TRACE"
	profileFromEnv  = "CHATGRAPH_BENCH_PROFILE_FROM"
	profileForEnv   = "CHATGRAPH_BENCH_PROFILE_FOR"
	// heapPhaseEnv names a file for a heap profile taken at the window's
	// end: what is live then (it forces two collections, which the
	// latencies after it show).
	heapPhaseEnv = "CHATGRAPH_BENCH_HEAPPROFILE"
)

// profilePhase starts what the environment asks for (profilePhaseEnv,
// tracePhaseEnv), in its window; the returned func ends it, if the
// window has not ended it already.
func profilePhase(b *testing.B) func() {
	p := &phaseProfile{b: b}
	for _, out := range []struct {
		env  string
		file **os.File
	}{{profilePhaseEnv, &p.cpu}, {tracePhaseEnv, &p.trace}, {heapPhaseEnv, &p.heap}} {
		if path := os.Getenv(out.env); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			*out.file = f
		}
	}
	if p.cpu == nil && p.trace == nil && p.heap == nil {
		return func() {}
	}
	from, span := envDuration(b, profileFromEnv), envDuration(b, profileForEnv)
	p.from = from
	if from > 0 {
		time.AfterFunc(from, p.start)
	} else {
		p.start()
	}
	if span > 0 {
		time.AfterFunc(from+span, p.stop)
	}
	return p.stop
}

// envDuration is the Go duration in the environment variable env (0 when
// unset).
func envDuration(b *testing.B, env string) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a duration such as 300ms", env, v)
	}
	return d
}

// phaseProfile is the CPU profile and execution trace of a latency
// benchmark's measured phase (profilePhase): started once, stopped once,
// never started after it stopped.
type phaseProfile struct {
	b          *testing.B
	cpu, trace *os.File      // nil: not asked for
	heap       *os.File      // nil: not asked for
	from       time.Duration // the window's start

	mu               sync.Mutex
	started, stopped bool
}

func (p *phaseProfile) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.started = true
	// What did not start is let go here, so that stop does not end a
	// profile or trace someone else started (-test.cpuprofile, say).
	if p.cpu != nil {
		if err := pprof.StartCPUProfile(p.cpu); err != nil {
			p.b.Error(err)
			p.cpu.Close()
			p.cpu = nil
		}
	}
	if p.trace != nil {
		if err := trace.Start(p.trace); err != nil {
			p.b.Error(err)
			p.trace.Close()
			p.trace = nil
		}
	}
}

func (p *phaseProfile) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	if !p.started {
		p.b.Errorf("%s=%v: the measured phase ended before the window began; nothing recorded", profileFromEnv, p.from)
	}
	if p.started && p.cpu != nil {
		pprof.StopCPUProfile()
	}
	if p.started && p.trace != nil {
		trace.Stop()
	}
	if p.started && p.heap != nil {
		// Two collections, so that the profile is of the heap now (a
		// profile shows the heap as of the collection before the last).
		runtime.GC()
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(p.heap, 0); err != nil {
			p.b.Error(err)
		}
	}
	for _, f := range []*os.File{p.cpu, p.trace, p.heap} {
		if f != nil {
			if err := f.Close(); err != nil {
				p.b.Error(err)
			}
		}
	}
}

// timelineEnv names a file for a timeline of a latency benchmark's
// measured phase (unset: none): a line per timelineStep of the phase,
// from its start, with the group commits the committer began in it
// (runtime.Config.CommitObserver) — how many, how long the store took to
// write them in all and at most, the longest time one took to be
// published, the runs they created and ended, the events they carried —
// and the deltas emitted in it: how many, how many took over 5 ms, and
// how many of each were their run's first. Where the deltas over budget
// lie, beside what the committer was doing then.
const timelineEnv = "CHATGRAPH_BENCH_TIMELINE"

// timelineStep is the span of a line of the timeline.
const timelineStep = 25 * time.Millisecond

// commitTimeline records the group commits of a latency benchmark's
// measured phase for its timeline.
type commitTimeline struct {
	b     *testing.B
	path  string
	mu    sync.Mutex
	start time.Time // the phase's (zero: not begun)
	gcs   []rt.GroupCommit
	// collected holds when each garbage collection of the phase was
	// seen to have ended (polled every gcPoll by the goroutine that
	// stopGC stops).
	collected []time.Time
	stopGC    func()
}

// gcPoll is how often a timeline looks for collections that ended.
const gcPoll = time.Millisecond

// newCommitTimeline returns a recorder when timelineEnv asks for a
// timeline, else nil (whose methods do nothing).
func newCommitTimeline(b *testing.B) *commitTimeline {
	path := os.Getenv(timelineEnv)
	if path == "" {
		return nil
	}
	return &commitTimeline{b: b, path: path}
}

func (t *commitTimeline) observe(gc rt.GroupCommit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.start.IsZero() && !gc.Began.Before(t.start) {
		t.gcs = append(t.gcs, gc)
	}
}

// begin starts recording the commits of a phase that starts at start.
func (t *commitTimeline) begin(start time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start, t.gcs, t.collected = start, nil, nil
	quit, done := make(chan struct{}), make(chan struct{})
	t.stopGC = func() { close(quit); <-done }
	go func() {
		defer close(done)
		tick := time.NewTicker(gcPoll)
		defer tick.Stop()
		_, last := heapCounters()
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				if _, n := heapCounters(); n != last {
					t.mu.Lock()
					for ; last < n; last++ {
						t.collected = append(t.collected, now)
					}
					t.mu.Unlock()
				}
			}
		}
	}()
}

// write writes the timeline of the phase, with the deltas its clients
// read, to the file (the last phase's, when the benchmark runs several).
func (t *commitTimeline) write(deltas []delta) {
	if t == nil {
		return
	}
	t.stopGC()
	t.mu.Lock()
	start, gcs, collected := t.start, t.gcs, t.collected
	t.start, t.gcs, t.collected = time.Time{}, nil, nil
	t.mu.Unlock()
	type step struct {
		commits, creates, finishes, events int
		deltas, over, first, firstOver     int
		written, maxWritten, maxPublished  time.Duration
		collections                        int
	}
	var steps []step
	at := func(tm time.Time) *step {
		i := max(0, int(tm.Sub(start)/timelineStep))
		for len(steps) <= i {
			steps = append(steps, step{})
		}
		return &steps[i]
	}
	for _, gc := range gcs {
		s := at(gc.Began)
		s.commits++
		s.creates += gc.Creates
		s.finishes += gc.Finishes
		s.events += gc.Events
		s.written += gc.Written
		s.maxWritten = max(s.maxWritten, gc.Written)
		s.maxPublished = max(s.maxPublished, gc.Published)
	}
	for _, tm := range collected {
		at(tm).collections++
	}
	for _, d := range deltas {
		s := at(d.emitted())
		over := d.Latency > 5000
		s.deltas++
		if over {
			s.over++
		}
		if d.First {
			s.first++
			if over {
				s.firstOver++
			}
		}
	}
	var out bytes.Buffer
	out.WriteString("from_ms\tcommits\twritten_ms\tmax_written_ms\tmax_published_ms\tcreates\tfinishes\tevents\tdeltas\tover_5ms\tfirst\tfirst_over_5ms\tgc_ended\n")
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for i, s := range steps {
		fmt.Fprintf(&out, "%d\t%d\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i*int(timelineStep/time.Millisecond),
			s.commits, ms(s.written), ms(s.maxWritten), ms(s.maxPublished), s.creates, s.finishes, s.events, s.deltas, s.over, s.first, s.firstOver, s.collections)
	}
	if err := os.WriteFile(t.path, out.Bytes(), 0o644); err != nil {
		t.b.Error(err)
	}
}
