package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// message is the turn every client sends: 20 words.
const message = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"

// answer is what the echo model streams back for it.
const answer = "echo: " + message

func main() {
	bin := flag.String("bin", "bin/chatgraph", "the server binary")
	modes := flag.String("durability", "sync,batched", "durability modes to measure")
	clients := flag.String("clients", "1,50", "concurrent clients (each with its own chat, one turn at a time)")
	transports := flag.String("transport", "sse,ws", "sse (POST with Accept: text/event-stream) and/or ws")
	duration := flag.Duration("duration", 10*time.Second, "how long each cell is measured (after a warm-up)")
	warmup := flag.Duration("warmup", 2*time.Second, "warm-up before each cell")
	extra := flag.String("server-flags", "", "more server flags, space separated (e.g. --debug-addr :6060 to profile a cell)")
	flag.IntVar(&turnsPerChat, "turns-per-chat", 20, "turns a client sends in one chat before it opens the next (a chat's history is part of every turn)")
	flag.Parse()
	serverFlags = strings.Fields(*extra)
	fmt.Printf("chatgraph server load, %s, %d CPUs, %s per cell\n\n", time.Now().UTC().Format("2006-01-02"), numCPU(), *duration)
	fmt.Println("| durability | transport | clients | turns/s | first token p50 / p99 | turn p50 / p99 | server CPU per turn | peak RSS | log lines per turn | goroutines per turn |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, mode := range strings.Split(*modes, ",") {
		for _, tr := range strings.Split(*transports, ",") {
			for _, cs := range strings.Split(*clients, ",") {
				n, err := strconv.Atoi(cs)
				if err != nil {
					fail(err)
				}
				r, err := cell(*bin, mode, tr, n, *warmup, *duration)
				if err != nil {
					fail(fmt.Errorf("%s %s %d clients: %w", mode, tr, n, err))
				}
				fmt.Printf("| %s | %s | %d | %.0f | %s / %s | %s / %s | %.2f ms | %.0f MB | %.1f | %.1f |\n", mode, tr, n, r.turnsPerSec,
					ms(r.first, 50), ms(r.first, 99), ms(r.turn, 50), ms(r.turn, 99), r.cpuPerTurn, r.peakRSSMB,
					r.logLinesPerTurn, r.goroutinesPerTurn)
			}
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadbench:", err)
	os.Exit(1)
}

// result is one cell of the table.
type result struct {
	turnsPerSec float64
	first, turn []time.Duration
	cpuPerTurn  float64 // ms of server CPU (user + system) per turn
	peakRSSMB   float64
	// logLinesPerTurn: lines the server logged (at its default level,
	// info) per turn; goroutinesPerTurn: goroutines it started per turn.
	logLinesPerTurn, goroutinesPerTurn float64
}

// server is a running chatgraph server process.
type server struct {
	cmd      *exec.Cmd
	base     string // the API's base URL
	root     string // the server's URL (for /metrics)
	dir      string
	logLines atomic.Int64  // lines the server has written to stderr
	logsDone chan struct{} // closed when its stderr has been read to the end
}

// serverFlags are added to every server's command line.
var serverFlags []string

// turnsPerChat is how long a client's conversations are.
var turnsPerChat int

func startServer(bin, mode string) (*server, error) {
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return nil, err
	}
	// The server logs at its default level, as a deployment does: the
	// lines are counted, and all but info and debug lines shown.
	args := append([]string{"server", "--addr", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"),
		"--durability", mode, "--rate-limit", "-1", "--max-websockets-per-ip", "-1"}, serverFlags...)
	cmd := exec.Command(bin, args...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, logsDone: make(chan struct{})}
	go s.readLogs(logs)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the server did not start: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	// "chatgraph listening on http://127.0.0.1:NNNN (state: ...)"
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[3], "http://") {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("unexpected first line %q", line)
	}
	s.root, s.base = f[3], f[3]+"/api/v1"
	return s, nil
}

// readLogs counts the server's log lines and shows every line but info
// and debug ones (warnings, errors, and whatever the server prints
// before its logger exists).
func (s *server) readLogs(r io.Reader) {
	defer close(s.logsDone)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		s.logLines.Add(1)
		l := sc.Text()
		if !slices.ContainsFunc(quietLevels, func(lv string) bool { return strings.Contains(l, lv) }) {
			fmt.Fprintln(os.Stderr, l)
		}
	}
}

// quietLevels mark the server's info and debug lines (text or JSON).
var quietLevels = []string{"level=INFO", "level=DEBUG", `"level":"INFO"`, `"level":"DEBUG"`}

// goroutinesCreated reads how many goroutines the server has started
// from its /metrics (the Go runtime's /sched/goroutines-created).
func (s *server) goroutinesCreated() (float64, error) {
	resp, err := http.Get(s.root + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_goroutines_created_goroutines_total "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, errors.New("/metrics has no go_sched_goroutines_created_goroutines_total")
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	// Its stderr is read to the end (the process exited) before Wait,
	// which closes the pipe.
	select {
	case <-s.logsDone:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.logsDone
	}
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// cpu returns the server's CPU time so far (user + system).
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces): utime is the
	// 14th field of the line, stime the 15th.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ
}

// peakRSS returns the server's peak resident set (VmHWM) in MB.
func (s *server) peakRSS() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func (s *server) post(path string, body any, out any) error {
	b, _ := json.Marshal(body)
	resp, err := http.Post(s.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s %s", path, resp.Status, msg)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// graph is chat_start -> agent (echo, no token delay) -> chat_output.
func graph() map[string]any {
	flow := map[string]any{"channel": "flow"}
	return map[string]any{"name": "load", "nodes": []any{
		map[string]any{"id": "start", "type": "chat_start", "position": map[string]any{"x": 0, "y": 0}, "data": map[string]any{}},
		map[string]any{"id": "helper", "type": "agent", "position": map[string]any{"x": 1, "y": 0}, "data": map[string]any{"model": "echo", "tokenDelayMs": 0}},
		map[string]any{"id": "out", "type": "chat_output", "position": map[string]any{"x": 2, "y": 0}, "data": map[string]any{}},
	}, "edges": []any{
		map[string]any{"id": "e1", "source": "start", "sourceHandle": "message", "target": "helper", "targetHandle": "input", "data": flow},
		map[string]any{"id": "e2", "source": "helper", "sourceHandle": "output", "target": "out", "targetHandle": "input", "data": flow},
	}}
}

// turnFunc sends one turn in chat chatID and returns when its run
// completed: the time to the first node_delta, and the answer the deltas
// spelled.
type turnFunc func(ctx context.Context, chatID string) (first time.Duration, text string, err error)

func cell(bin, mode, tr string, clients int, warmup, duration time.Duration) (*result, error) {
	s, err := startServer(bin, mode)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	var g struct{ ID string }
	if err := s.post("/graphs", graph(), &g); err != nil {
		return nil, err
	}
	turns := make([]turnFunc, clients)
	for i := range turns {
		if tr == "ws" {
			if turns[i], err = wsClient(s); err != nil {
				return nil, err
			}
		} else {
			turns[i] = sseClient(s)
		}
	}
	var (
		mu       sync.Mutex
		measure  bool
		res      = &result{}
		count    int
		firstErr error
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, turn := range turns {
		wg.Go(func() {
			var chatID string
			for n := 0; ctx.Err() == nil; n++ {
				if n%turnsPerChat == 0 {
					var c struct{ ID string }
					if err := s.post("/chats", map[string]any{"graphId": g.ID}, &c); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
							cancel()
						}
						mu.Unlock()
						return
					}
					chatID = c.ID
				}
				start := time.Now()
				first, text, err := turn(ctx, chatID)
				took := time.Since(start)
				if err == nil && text != answer {
					err = fmt.Errorf("the answer was %q", text)
				}
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil && firstErr == nil:
					firstErr = err
					cancel()
				case err == nil && measure:
					res.first = append(res.first, first)
					res.turn = append(res.turn, took)
					count++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(warmup)
	// The /metrics reads sit outside the CPU window.
	g0, err := s.goroutinesCreated()
	if err != nil {
		cancel()
		return nil, err
	}
	mu.Lock()
	measure = true
	cpu0, err := s.cpu()
	logs0 := s.logLines.Load()
	t0 := time.Now()
	mu.Unlock()
	if err != nil {
		cancel()
		return nil, err
	}
	time.Sleep(duration)
	mu.Lock()
	measure = false
	cpu1, _ := s.cpu()
	logs1 := s.logLines.Load()
	elapsed := time.Since(t0)
	n := count
	mu.Unlock()
	g1, gErr := s.goroutinesCreated()
	cancel()
	wg.Wait()
	if gErr != nil {
		return nil, gErr
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if n == 0 {
		return nil, errors.New("no turn completed")
	}
	res.turnsPerSec = float64(n) / elapsed.Seconds()
	res.cpuPerTurn = float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(n)
	res.peakRSSMB = s.peakRSS()
	res.logLinesPerTurn = float64(logs1-logs0) / float64(n)
	res.goroutinesPerTurn = (g1 - g0) / float64(n)
	return res, nil
}

// envelope is the part of an event the driver reads.
type envelope struct {
	Type string `json:"type"`
	Data struct {
		Text string `json:"text"`
	} `json:"data"`
}

// sseClient sends turns as POST .../messages with Accept: text/event-stream.
func sseClient(s *server) turnFunc {
	hc := &http.Client{}
	body, _ := json.Marshal(map[string]any{"content": message})
	return func(ctx context.Context, chatID string) (time.Duration, string, error) {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/chats/"+chatID+"/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(resp.Body)
			return 0, "", fmt.Errorf("%s %s", resp.Status, msg)
		}
		var first time.Duration
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev envelope
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return 0, "", err
			}
			if done, err := read(ev, start, &first, &text); done || err != nil {
				return first, text.String(), err
			}
		}
		return 0, "", fmt.Errorf("the stream ended before the run: %v", sc.Err())
	}
}

// read takes one event of a turn; done once the run ended.
func read(ev envelope, start time.Time, first *time.Duration, text *strings.Builder) (bool, error) {
	switch ev.Type {
	case "node_delta":
		if *first == 0 {
			*first = time.Since(start)
		}
		text.WriteString(ev.Data.Text)
	case "run_completed":
		return true, nil
	case "run_failed", "run_cancelled", "run_interrupted":
		return true, fmt.Errorf("the run ended %s", ev.Type)
	}
	return false, nil
}

// wsClient sends turns as stream_chat frames on one WebSocket.
func wsClient(s *server) (turnFunc, error) {
	url := "ws" + strings.TrimPrefix(s.base, "http") + "/ws"
	conn, _, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{Subprotocols: []string{"chatgraph.v1"}})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(1 << 20)
	seq := 0
	return func(ctx context.Context, chatID string) (time.Duration, string, error) {
		seq++
		start := time.Now()
		frame, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", chatID, seq), "type": "stream_chat", "chatId": chatID, "content": message})
		if err := conn.Write(ctx, websocket.MessageText, frame); err != nil {
			return 0, "", err
		}
		var first time.Duration
		var text strings.Builder
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return 0, "", err
			}
			var f struct {
				Type  string          `json:"type"`
				Event json.RawMessage `json:"event"`
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(b, &f); err != nil {
				return 0, "", err
			}
			switch f.Type {
			case "error":
				return 0, "", fmt.Errorf("error frame: %s", f.Error)
			case "event":
				var ev envelope
				if err := json.Unmarshal(f.Event, &ev); err != nil {
					return 0, "", err
				}
				if done, err := read(ev, start, &first, &text); done || err != nil {
					return first, text.String(), err
				}
			}
		}
	}, nil
}

func ms(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	d := s[min(len(s)-1, len(s)*p/100)]
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("processor\t:"))
}
