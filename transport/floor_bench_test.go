package transport_test

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"chatgraph/transport"
)

// BenchmarkEventLatencyFloor measures what the saturated load of
// BenchmarkEventLatencyWebSocket costs on this machine with no chatgraph
// in the way: the same in-process clients (runLatencyClients: 1,000
// turns of 100 words 20 ms apart over 50 WebSocket connections) against
// a server that does only what commit-then-publish must. Each turn is a
// goroutine that wakes on a timer for each word and adds its event's
// frame to a shared buffer; one committer writes what the buffer holds to
// a file; one publisher syncs it (fdatasync, with fsync=on) and then
// writes each connection's frames of what the sync made durable with one
// system call, while the committer writes the next frames. No graph, run state, store schema, hub or
// chat: the rest of BenchmarkEventLatencyWebSocket's latency and CPU is
// chatgraph's own.
func BenchmarkEventLatencyFloor(b *testing.B) {
	floorFsyncModes(b, 20, 100, false)
}

// BenchmarkEventLatencyFloorLeader: BenchmarkEventLatencyFloor's load
// against a floor that commits with no goroutine of its own. A turn that
// emits a frame while no commit is in progress leads: it writes what is
// pending, syncs it and writes the connections' frames itself, and goes
// on doing so while frames are pending; the turns that emit meanwhile
// only add their frames. No frame waits for a goroutine to be woken
// between its write, its sync and its publishing, at the cost of one
// publishing no longer overlapping the next sync. The best floor found
// on this machine (docs/benchmarks.md).
func BenchmarkEventLatencyFloorLeader(b *testing.B) {
	floorFsyncModes(b, 20, 100, true)
}

// BenchmarkEventLatencyFloorPaced: the floor of
// BenchmarkEventLatencyWebSocketPaced's load (1,000 runs of 20 words 100
// ms apart, 10,000 deltas/s offered).
func BenchmarkEventLatencyFloorPaced(b *testing.B) {
	floorFsyncModes(b, 100, 20, false)
}

// BenchmarkEventLatencyFloorRates: the floor of
// BenchmarkEventLatencyWebSocketRates/…/clients=goroutines (the runs'
// starts spread over a word interval, their words paced to offer
// `deltas` deltas a second), with fsync.
func BenchmarkEventLatencyFloorRates(b *testing.B) {
	floorRates(b, false)
}

// BenchmarkEventLatencyFloorLeaderPaced: the leader floor
// (BenchmarkEventLatencyFloorLeader) of BenchmarkEventLatencyWebSocketPaced's
// load.
func BenchmarkEventLatencyFloorLeaderPaced(b *testing.B) {
	floorFsyncModes(b, 100, 20, true)
}

// BenchmarkEventLatencyFloorLeaderRates: the leader floor of
// BenchmarkEventLatencyWebSocketRates/…/clients=goroutines, with fsync.
func BenchmarkEventLatencyFloorLeaderRates(b *testing.B) {
	floorRates(b, true)
}

// floorFsyncModes runs a floor (leader: the leader floor) at a load of
// 1,000 runs of words words tokenDelayMs apart, with and without fsync.
func floorFsyncModes(b *testing.B, tokenDelayMs, words int, leader bool) {
	for _, mode := range []struct {
		name           string
		fsync, inPlace bool
	}{{"on", true, false}, {"in-place", true, true}, {"off", false, false}} {
		b.Run("fsync="+mode.name, func(b *testing.B) {
			benchLatencyFloor(b, floorLog{fsync: mode.fsync, inPlace: mode.inPlace}, tokenDelayMs, words, false, leader)
		})
	}
}

// floorLog is how a floor keeps its log: with fsync, each commit is
// fdatasynced before it is published; inPlace (with fsync) writes the
// log over a file written and synced beforehand instead of appending to
// an empty one, as SQLite writes its WAL from the start again after a
// checkpoint: the sync then has only data to flush, no file size (ext4
// commits its journal for an append's new size).
type floorLog struct {
	fsync, inPlace bool
}

// floorLogSize is the file an in-place floor log writes over, cyclically.
const floorLogSize = 64 << 20

// floorRates runs a floor (leader: the leader floor) at
// BenchmarkEventLatencyWebSocketRates' loads, with fsync.
func floorRates(b *testing.B, leader bool) {
	for _, rate := range []int{2500, 5000, 10000, 20000} {
		b.Run("deltas="+strconv.Itoa(rate), func(b *testing.B) {
			delayMs := 1000 * 1000 / rate
			benchLatencyFloor(b, floorLog{fsync: true}, delayMs, max(10, 4000/delayMs), true, leader)
		})
	}
}

// benchLatencyFloor runs the floor's load; leader picks the floor that
// commits on the emitting turns' goroutines (BenchmarkEventLatencyFloorLeader)
// over the one with a committer and a publisher.
func benchLatencyFloor(b *testing.B, lg floorLog, tokenDelayMs, words int, spread, leader bool) {
	const runs, conns = 1000, 50
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if lg.inPlace {
		// Write the file's blocks, so that the log's writes find them
		// allocated.
		zero := make([]byte, 1<<20)
		for off := int64(0); off < floorLogSize; off += int64(len(zero)) {
			if _, err := f.WriteAt(zero, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	fl := &floor{log: f, floorLog: lg, words: words, delay: time.Duration(tokenDelayMs) * time.Millisecond,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), leader: leader}
	fl.idle.L = &fl.mu
	if !leader {
		go fl.commit()
	}
	go fl.serve(ln)
	defer func() {
		ln.Close()
		fl.close()
	}()
	chats := make([]string, runs)
	for i := range chats {
		chats[i] = "chat" + strconv.Itoa(i)
	}
	for b.Loop() {
		commits0 := fl.commitCount()
		fl.syncs.reset()
		start, cpu0 := time.Now(), cpuTime()
		res := runLatencyClients(latencyLoad{URL: "http://" + ln.Addr().String(), Chats: chats, Conns: conns,
			Words: words, TokenDelayMs: tokenDelayMs, Spread: spread, Start: start})
		took, cpu := res.Ended.Sub(res.Began), cpuTime()-cpu0
		reportLatency(b, res, cpu, took)
		b.ReportMetric(float64(fl.commitCount()-commits0)/took.Seconds(), "commits/s")
		fl.syncs.report(b)
	}
}

// floor is BenchmarkEventLatencyFloor's server.
type floor struct {
	log *os.File
	floorLog
	off   int64 // where the next in-place write begins (inPlace: cyclically)
	words int
	delay time.Duration

	mu      sync.Mutex
	pending []floorFrame // emitted, not yet written to the log
	done    bool
	wake    chan struct{} // the committer's: pending has frames
	stopped chan struct{} // closed once the publisher has returned
	commits int
	conns   []*floorConn
	syncs   syncTimes // each fdatasync's time, with fsync=on

	// leader: the turns commit (lead); leading says one does, and idle
	// is signalled when it stops.
	leader  bool
	leading bool
	idle    sync.Cond
	buf     []byte // the log write being made, reused (one writer at a time)
}

// floorFrame is one event's WebSocket frame and the connection it goes
// to.
type floorFrame struct {
	conn  *floorConn
	bytes []byte
}

type floorConn struct {
	c   net.Conn
	buf []byte // the frames of the commit being published
}

func (fl *floor) commitCount() int {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.commits
}

func (fl *floor) close() {
	fl.mu.Lock()
	fl.done = true
	for _, c := range fl.conns {
		c.c.Close()
	}
	if fl.leader {
		// A leader stops at its next batch now; the log closes after its
		// last write.
		for fl.leading {
			fl.idle.Wait()
		}
		fl.mu.Unlock()
		return
	}
	fl.mu.Unlock()
	fl.signal()
	<-fl.stopped // the log closes after its last write
}

func (fl *floor) signal() {
	select {
	case fl.wake <- struct{}{}:
	default:
	}
}

// emit adds a frame for conn; in a leader floor the caller commits it
// itself when no other turn does.
func (fl *floor) emit(c *floorConn, frame []byte) {
	fl.mu.Lock()
	fl.pending = append(fl.pending, floorFrame{c, frame})
	if fl.leader {
		lead := !fl.leading
		fl.leading = true
		fl.mu.Unlock()
		if lead {
			fl.lead()
		}
		return
	}
	fl.mu.Unlock()
	fl.signal()
}

// lead commits in a leader floor: while frames are pending it writes
// them to the log, syncs them (with fsync) and writes each connection's
// frames, and then it is the leader no longer. Frames are never left
// pending without a leader: a leader takes what was added while it
// wrote, and the first frame added after it stopped makes its turn the
// next. (fl.leading set by the caller)
func (fl *floor) lead() {
	for {
		fl.mu.Lock()
		batch := fl.pending
		fl.pending = nil
		if len(batch) == 0 || fl.done {
			fl.leading = false
			fl.idle.Broadcast()
			fl.mu.Unlock()
			return
		}
		fl.mu.Unlock()
		fl.write(batch)
		fl.syncAndPublish(batch)
	}
}

// write appends a batch's frames to the log (writes them over it, in
// place).
func (fl *floor) write(batch []floorFrame) {
	fl.buf = fl.buf[:0]
	for _, fr := range batch {
		fl.buf = append(fl.buf, fr.bytes...)
	}
	if !fl.inPlace {
		if _, err := fl.log.Write(fl.buf); err != nil {
			panic(err)
		}
		return
	}
	for rest := fl.buf; len(rest) > 0; {
		n := min(len(rest), int(floorLogSize-fl.off))
		if _, err := fl.log.WriteAt(rest[:n], fl.off); err != nil {
			panic(err)
		}
		rest, fl.off = rest[n:], (fl.off+int64(n))%floorLogSize
	}
}

// syncAndPublish makes the written batch durable (with fsync), counts
// the commit and publishes it.
func (fl *floor) syncAndPublish(batch []floorFrame) {
	fl.sync()
	fl.mu.Lock()
	fl.commits++
	fl.mu.Unlock()
	fl.publish(batch)
}

// sync makes the log's writes durable (with fsync) and times it.
func (fl *floor) sync() {
	if !fl.fsync {
		return
	}
	at := time.Now()
	if err := syscall.Fdatasync(int(fl.log.Fd())); err != nil {
		panic(err)
	}
	fl.syncs.observe(time.Since(at), nil)
}

// commit writes the pending frames to the log as they come and hands
// each write to the publisher. The publisher syncs the log (with fsync)
// once for every write made before the sync began, then writes those
// writes' frames at once, with no other goroutine in between; the writes
// made meanwhile wait for its next sync. This is the pipeline of the
// engine's committer with a store that defers its sync (runtime.md,
// "Durability").
func (fl *floor) commit() {
	written := make(chan []floorFrame, 1024)
	go fl.publisher(written)
	defer close(written)
	for range fl.wake {
		fl.mu.Lock()
		if fl.done {
			fl.mu.Unlock()
			return
		}
		batch := fl.pending
		fl.pending = nil
		fl.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		fl.write(batch)
		written <- batch
	}
}

// publisher syncs and publishes what commit wrote.
func (fl *floor) publisher(written chan []floorFrame) {
	defer close(fl.stopped)
	for batch := range written {
	more:
		for {
			select {
			case next, ok := <-written:
				if !ok {
					break more
				}
				batch = append(batch, next...)
			default:
				break more
			}
		}
		fl.syncAndPublish(batch)
	}
}

// publish writes each connection's frames of a commit with one write.
func (fl *floor) publish(batch []floorFrame) {
	var touched []*floorConn
	for _, fr := range batch {
		if len(fr.conn.buf) == 0 {
			touched = append(touched, fr.conn)
		}
		fr.conn.buf = append(fr.conn.buf, fr.bytes...)
	}
	for _, c := range touched {
		_, _ = c.c.Write(c.buf)
		c.buf = c.buf[:0]
	}
}

func (fl *floor) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go fl.conn(c)
	}
}

// conn takes a WebSocket connection: the handshake, then the turns the
// client sends, each a goroutine that streams its words.
func (fl *floor) conn(c net.Conn) {
	r := bufio.NewReader(c)
	req, err := http.ReadRequest(r)
	if err != nil {
		c.Close()
		return
	}
	h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Protocol: chatgraph.v1\r\nSec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(h[:])+"\r\n\r\n"); err != nil {
		c.Close()
		return
	}
	fc := &floorConn{c: c}
	fl.mu.Lock()
	fl.conns = append(fl.conns, fc)
	fl.mu.Unlock()
	run := 0
	for {
		msg, err := readClientFrame(r)
		if err != nil {
			return
		}
		chat := gjson.GetBytes(msg, "chatId").Str
		run++
		go fl.turn(fc, c.RemoteAddr().String()+"-"+strconv.Itoa(run), chat)
	}
}

// turn streams one turn's words, one frame each, then its end.
func (fl *floor) turn(c *floorConn, runID, chatID string) {
	t := time.NewTimer(0)
	<-t.C
	for seq := 1; seq <= fl.words+1; seq++ {
		typ, data := "node_delta", `{"text":"word "}`
		if seq > fl.words {
			typ, data = "run_completed", `{}`
		}
		ev := `{"type":"event","event":{"seq":` + strconv.Itoa(seq) + `,"runId":"` + runID + `","chatId":"` + chatID +
			`","type":"` + typ + `","nodeId":"agent","attempt":1,"time":"` + time.Now().UTC().Format(time.RFC3339Nano) +
			`","data":` + data + `}}`
		fl.emit(c, transport.AppendTextFrame(nil, []byte(ev)))
		if seq < fl.words {
			t.Reset(fl.delay)
			<-t.C
		}
	}
}

// readClientFrame reads one masked, final frame from a client.
func readClientFrame(r *bufio.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[0]&0x0f == 0x8 {
		return nil, errors.New("closed")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			return nil, err
		}
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			return nil, err
		}
		n = binary.BigEndian.Uint64(x[:])
	}
	var mask [4]byte
	if _, err := io.ReadFull(r, mask[:]); err != nil {
		return nil, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	for i := range p {
		p[i] ^= mask[i%4]
	}
	return p, nil
}
