package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"chatgraph/runtime"
)

// A run's compacted log is kept together, keyed by run id and seq (a
// chunk of events a row in event_chunks, chunk.go; one event a row in
// events in files written before chunks, and by Open's move of the tail),
// which is what reading a log wants and what a group commit of
// streaming runs does not: every run in the commit dirties a page of its
// own, and the commit writes every one of those pages to the WAL. A
// thousand runs streaming a delta each is a thousand pages, 4 MiB of WAL
// for 150 KiB of events.
//
// So a streaming run's events go to event_tail first: a table in commit
// order, whose new rows fill its last pages. A row of it is a page, the
// events of every run one write transaction kept in the tail (page.go);
// the tail numbers events, not pages, so a "row" below is an event's
// number in the tail, and a segment may begin inside a page. A run's
// events there since its log was last compacted are its segment;
// run_tails holds the segment's first row (tail_from), the run's token
// and a last seq, one small row per run with a segment. A segment moves
// into event_chunks in one write — when it reaches compactAt events, when
// the run ends or lets go of its lease (the batch has Finish or Release),
// or when it is so old that it holds back the truncation of the tail — so
// each run writes its compacted log once per segment, not once per
// commit. A run that goes on
// writing keeps its run_tails row, and its segment begins anew there,
// empty (compact). Rows of compacted segments stay in event_tail until
// truncations delete the pages wholly below the oldest segment's first
// row, a bounded number at a time.
//
// The store remembers the segments it appended (tails): compacting a
// segment writes the remembered events, and reading a log takes them from
// memory, without a scan of the tail. What the file says decides: a
// remembered segment is used only if run_tails names the same first row
// and the last seq the store last wrote there. A segment the store does
// not remember (another process's on the same file, or one from before a
// restart) is read from event_tail by a scan from its first row. Open
// moves every segment into events, so a restarted server starts with an
// empty tail.
//
// The fast grow. A streaming run's commit appends its rows to event_tail
// and nothing else: run_tails.last_seq is written when a segment starts
// and when a store writes a segment it did not verify, not at every
// commit, so a segment's last seq is the larger of run_tails.last_seq and
// its last row's. What makes that safe is the tail's epoch (the
// tail_epoch row, schema version 6): triggers advance it at every claim
// (a run's token moves) and at every update or delete of a run_tails row,
// whichever store makes it. A write transaction reads the epoch first
// and, when its own statements may have moved it, last (logTx.moved);
// when it finds the epoch where the store's last write transaction
// left it, no other store changed a token or a segment since, and a
// segment the store verified then is still as it remembers it: its token
// and its rows, because another store can only write a segment after a
// write to its run_tails row (it does not remember it as verified), which
// advanced the epoch. Otherwise the store verifies each segment it grows
// once more, with the conditional UPDATE of run_tails that the fast grow
// saves (its last seq, first row and token as remembered).
var (
	// compactAt is the length at which a segment moves into event_chunks.
	compactAt = 64
	// truncateEvery is how many rows the store appends to the tail
	// between two truncations.
	truncateEvery = 1024
	// pinRows is how far behind the tail's end a segment may start
	// before the truncation compacts it.
	pinRows int64 = 1 << 16
)

const (
	// logStateQuery reads what a write to a run's log checks: its token,
	// the log's last seq and its segment's first row (0: none).
	logStateQuery = `SELECT r.token, coalesce(t.last_seq, r.last_seq), coalesce(t.tail_from, 0)
FROM runs r LEFT JOIN run_tails t ON t.run_id = r.id WHERE r.id = ?`
	startSegmentQuery = `INSERT INTO run_tails (run_id, tail_from, last_seq, token)
VALUES (?, ?, ?, (SELECT token FROM runs WHERE id = ?))`
	growSegmentQuery = `UPDATE run_tails SET last_seq = ? WHERE run_id = ?`
	// growKnownQuery grows a segment the store remembers but has not
	// verified since the epoch moved, checking in the same statement that
	// the file has it as remembered and the token (run_tails.token is
	// runs.token: the trigger run_tails_token keeps it so, schema.go).
	growKnownQuery  = `UPDATE run_tails SET last_seq = ? WHERE run_id = ? AND last_seq = ? AND tail_from = ? AND token <= ?`
	endSegmentQuery = `DELETE FROM run_tails WHERE run_id = ?`
	// restartSegmentQuery begins a compacted run's segment anew, empty,
	// at the tail's next row.
	restartSegmentQuery = `UPDATE run_tails SET tail_from = ?, last_seq = ? WHERE run_id = ?`
	compactedQuery      = `UPDATE runs SET last_seq = ? WHERE id = ?`
	oldestSegmentQuery  = `SELECT min(tail_from) FROM run_tails`
	pinningQuery        = `SELECT run_id, tail_from, last_seq FROM run_tails WHERE tail_from < ?`
	// truncateQuery deletes the pages wholly below an event (page.go):
	// the one that holds it stays.
	truncateQuery  = `DELETE FROM event_tail WHERE id < ?1 AND id + n <= ?1`
	tailFirstQuery = `SELECT coalesce(min(id), 0) FROM event_tail`
	tailStateQuery = `SELECT tail_from, last_seq FROM run_tails WHERE run_id = ?`
	epochQuery     = `SELECT n FROM tail_epoch WHERE id = 1`
	// beginLogQuery is what a write transaction to the logs reads first:
	// the tail's epoch and the tail's next row id (the event after the
	// last page's).
	beginLogQuery = `SELECT e.n, coalesce((SELECT t.id + t.n FROM event_tail t ORDER BY t.id DESC LIMIT 1), 1)
FROM tail_epoch e WHERE e.id = 1`
)

// eventRow is one event of a segment: id is its number in the tail (0
// until it has one). insertTail encodes ev into its page, so a
// remembered segment holds its events and nothing else.
type eventRow struct {
	id int64
	ev *runtime.Event
}

// segment is a run's events in event_tail since its log was last
// compacted: from is the first row's id (run_tails.tail_from). fileLast is
// the last seq the store wrote to run_tails.last_seq, token the token it
// was verified with, and gen the store's generation (tails.gen) in which
// that happened: the store may grow the segment without a statement while
// its generation is gen.
type segment struct {
	from     int64
	rows     []eventRow
	fileLast int64
	token    int64
	gen      uint64
}

// tails is what the store remembers of the segments it appended. A
// segment's rows are only ever appended to: a reader keeps the slice it
// copied while the writer appends past its end.
type tails struct {
	mu   sync.Mutex
	segs map[string]*segment
	// free are cleared segments for the next write transactions
	// (logTx.newSegment), txSegs the map of the writer's transaction
	// (logTx.segs), reused: both are the writer's, under the writer gate.
	free   []*segment
	txSegs map[string]*segment
	// appended counts the rows appended since the last truncation (the
	// writer's, under the writer gate).
	appended int
	// gen is the store's generation: it moves on when a write transaction
	// finds the tail's epoch anywhere but at epoch, where the store's last
	// write transaction left it (epochKnown: there was one).
	gen        uint64
	epoch      int64
	epochKnown bool
}

// get returns run's remembered segment, if any.
func (t *tails) get(runID string) segment {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seg := t.segs[runID]; seg != nil {
		return *seg
	}
	return segment{}
}

// lastSeqFromMemory completes r.LastSeq, read from the file with the
// first row of the run's segment (from, 0: none), from the segment the
// store remembers: fast grows do not write run_tails.last_seq, so the
// log's last seq is its segment's last row's. It reports false when the
// store does not remember the segment as the file has it: then
// completeLastSeq reads the tail, in the read transaction that read r.
func (s *Store) lastSeqFromMemory(r *runtime.RunRecord, from int64) bool {
	if from == 0 {
		return true
	}
	seg := s.tails.get(r.ID)
	if seg.from != from || seg.fileLast != r.LastSeq {
		return false
	}
	r.LastSeq = max(r.LastSeq, seg.last())
	return true
}

// completeLastSeq completes r.LastSeq, read in tx with the first row of
// the run's segment (from, 0: none): from the store's memory when it
// remembers the segment as the file has it (lastSeqFromMemory), else from
// the segment's rows in the tail, read in tx.
func (s *Store) completeLastSeq(ctx context.Context, tx *sql.Tx, r *runtime.RunRecord, from int64) error {
	if s.lastSeqFromMemory(r, from) {
		return nil
	}
	// Only the seqs are wanted: the pages' events of the run are not kept.
	err := readPages(ctx, s.rs, tx, from, func(id int64, run []byte) bool { return id >= from && string(run) == r.ID },
		func(_ int64, _ []byte, e *runtime.Event) error {
			r.LastSeq = max(r.LastSeq, e.Seq)
			return nil
		})
	if err != nil {
		return fmt.Errorf("segment of %s: %w", r.ID, err)
	}
	return nil
}

// last is the seq of the segment's last event; for an empty segment, the
// last seq written with it (a segment a compaction began anew; 0: none).
func (seg segment) last() int64 {
	if len(seg.rows) == 0 {
		return seg.fileLast
	}
	return seg.rows[len(seg.rows)-1].ev.Seq
}

// forget drops the segments of runs.
func (t *tails) forget(runIDs []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range runIDs {
		delete(t.segs, id)
	}
}

// logTx is one write transaction's changes to run logs: the checks and
// run_tails writes run as the batches come, the rows are inserted at the
// end (insert), and the store's memory of segments changes only once the
// transaction committed (committed).
type logTx struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
	// gen is the store's generation in this transaction (a new one when
	// the epoch moved since the store's last write transaction); epoch
	// is the tail's epoch as the transaction leaves it.
	gen   uint64
	epoch int64
	// next is the next event_tail id (read as the transaction begins).
	next int64
	// moved says that a statement of the transaction may have moved the
	// epoch: an update or delete of a run_tails row, or a write that is
	// not the log's own (a creation, a finish, joined writes). The
	// transaction then reads the epoch once more at its end; otherwise
	// it ends where the first read found it. A transaction marked moved
	// that did not move it only costs that read. One that moved it
	// unmarked would leave the store remembering an epoch below the
	// file's, which the next transaction takes for another store's write
	// (the epoch only grows): it then verifies its segments once more.
	// Safe either way.
	moved bool
	// segs are the segments as the transaction leaves them (nil: none).
	segs map[string]*segment
	// tail is the rows to insert into event_tail (in the store's
	// buffer), chunks the compacted segments to insert into event_chunks;
	// appended counts the tail's rows once inserted.
	tail     []eventRow
	chunks   []chunkRow
	appended int
	// truncated is the first row kept by the transaction's truncation
	// (0: none).
	truncated int64
	// finishing is the run whose batch ends it while its events are
	// appended: its end's compaction leaves the log's last seq in
	// finishLast for the finish's statement to write (finishRun).
	finishing  string
	finishLast int64
	// fresh are the runs the transaction created and whose log it has
	// not yet written (created): their token and last seq are the ones
	// it inserted, and they have no segment, so their first append needs
	// no read of the run's state (nil: none).
	fresh map[string]freshRun
}

// freshRun is a run a write transaction created: the token and last seq
// it inserted.
type freshRun struct{ token, last int64 }

// created records that the transaction inserted runID with token and
// last seq last.
func (l *logTx) created(runID string, token, last int64) {
	if l.fresh == nil {
		l.fresh = map[string]freshRun{}
	}
	l.fresh[runID] = freshRun{token, last}
}

// state is logState in the transaction: a run it created and has not
// yet appended to is known without a read.
func (l *logTx) state(runID string, token int64) (last, from int64, err error) {
	if fr, ok := l.fresh[runID]; ok {
		delete(l.fresh, runID) // its first append writes a segment
		if token < fr.token {
			return 0, 0, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, runID, fr.token, token)
		}
		return fr.last, 0, nil
	}
	return l.s.logState(l.ctx, l.tx, runID, token)
}

// newLogTx starts a logTx in tx, reading the tail's epoch and next row id.
func (s *Store) newLogTx(ctx context.Context, tx *sql.Tx) (*logTx, error) {
	if s.tails.txSegs == nil {
		s.tails.txSegs = map[string]*segment{}
	}
	clear(s.tails.txSegs) // a transaction that failed to commit may have left some
	l := &logTx{s: s, ctx: ctx, tx: tx, segs: s.tails.txSegs, tail: s.tailRows[:0]}
	if err := s.queryRowHot(ctx, beginLogQuery).Scan(&l.epoch, &l.next); err != nil {
		return nil, fmt.Errorf("read the tail's epoch and end: %w", err)
	}
	t := &s.tails
	t.mu.Lock()
	l.gen = t.gen
	if !t.epochKnown || t.epoch != l.epoch {
		l.gen++ // someone else wrote: verify every segment once more
	}
	t.mu.Unlock()
	return l, nil
}

// inLogTx runs fn in a write transaction (inTxGated) with a logTx on it,
// inserts the rows fn appended and, once the transaction committed,
// makes the store remember the segments as it left them.
func (s *Store) inLogTx(ctx context.Context, urgent bool, fn func(*logTx) error) error {
	var lt *logTx
	return s.inTxGatedThen(ctx, urgent, func(tx *sql.Tx) error {
		var err error
		if lt, err = s.newLogTx(ctx, tx); err != nil {
			return err
		}
		err = fn(lt)
		if err == nil {
			err = lt.insert()
		}
		if err == nil && lt.moved {
			// The store holds the writer: what moved the epoch since the
			// first read is this transaction's own.
			err = s.queryRowHot(ctx, epochQuery).Scan(&lt.epoch)
		}
		if err != nil {
			lt.rolledBack()
		}
		return err
	}, func() { lt.committed() })
}

// logState reads runID's token, last seq and segment start in tx (nil:
// outside one) and checks token against the run's.
func (s *Store) logState(ctx context.Context, tx *sql.Tx, runID string, token int64) (last, from int64, err error) {
	var row scanner
	if tx == nil {
		row = s.ws.queryRow(ctx, logStateQuery, runID)
	} else {
		row = s.queryRowHot(ctx, logStateQuery, runID)
	}
	var cur int64
	err = row.Scan(&cur, &last, &from)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %s", runtime.ErrRunNotFound, runID)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sqlite store: run %s: %w", runID, err)
	}
	if token < cur {
		return 0, 0, fmt.Errorf("%w: run %s holds token %d, write has %d", runtime.ErrFenced, runID, cur, token)
	}
	return last, from, nil
}

// append appends evs (not empty) to runID's log, checking the token and
// that evs continue the log; end says the run stops writing (its segment
// moves into event_chunks now).
func (l *logTx) append(runID string, token int64, evs []runtime.Event, end bool) error {
	for i := range evs {
		if evs[i].Seq != evs[0].Seq+int64(i) {
			// Report fencing first, as for any write.
			if _, _, err := l.s.logState(l.ctx, l.tx, runID, token); err != nil {
				return err
			}
			return fmt.Errorf("%w: run %s: batch seqs are not consecutive", runtime.ErrSeqConflict, runID)
		}
	}
	lastSeq := evs[len(evs)-1].Seq
	seg, grown, err := l.growKnown(runID, token, evs, end)
	if err != nil {
		return err
	}
	from := seg.from
	if !grown {
		last, f, err := l.state(runID, token)
		if err != nil {
			return err
		}
		from = f
		if seg, err = l.segment(runID, from, last); err != nil {
			return err
		}
		// Fast grows leave run_tails.last_seq behind the segment's rows.
		last = max(last, seg.last())
		if evs[0].Seq != last+1 {
			return fmt.Errorf("%w: run %s expects seq %d, got %d", runtime.ErrSeqConflict, runID, last+1, evs[0].Seq)
		}
	}
	// The caller keeps its events: the store remembers copies, as the file
	// keeps them (times in UTC microseconds, data as JSON). Only rows that
	// stay in the tail are numbered.
	compacting := end || len(seg.rows)+len(evs) >= compactAt
	segRows := seg.rows
	if segRows == nil {
		// A segment grows to compactAt rows at most: it starts with room
		// for a quarter of them (two growths at most, and a short run's
		// segment holds no room it never uses).
		segRows = make([]eventRow, 0, max(len(evs), compactAt/4))
	}
	own := make([]runtime.Event, len(evs))
	tailFrom := len(l.tail)
	for i := range evs {
		e := &evs[i]
		data, err := e.DataJSON()
		if err != nil {
			return fmt.Errorf("event %d data: %w", e.Seq, err)
		}
		own[i] = runtime.Event{Seq: e.Seq, RunID: runID, ChatID: e.ChatID, Type: e.Type, NodeID: e.NodeID,
			Attempt: e.Attempt, Time: fromMicros(micros(e.Time))}
		if data != nil {
			own[i].Data = json.RawMessage(data)
		}
		row := eventRow{ev: &own[i]}
		if !compacting {
			row.id = l.next
			l.next++
			l.tail = append(l.tail, row)
		}
		segRows = append(segRows, row)
	}
	if compacting {
		return l.compact(runID, token, from, segRows, lastSeq, end)
	}
	fileLast := seg.fileLast // a grow leaves run_tails as it was
	switch {
	case from == 0:
		from, fileLast = l.tail[tailFrom].id, lastSeq
		err = l.s.execHot(l.ctx, startSegmentQuery, []any{runID, from, lastSeq, runID})
	case !grown:
		fileLast, l.moved = lastSeq, true
		err = l.s.execHot(l.ctx, growSegmentQuery, []any{lastSeq, runID})
	}
	if err != nil {
		return err
	}
	*l.newSegment(runID) = segment{from: from, rows: segRows, fileLast: fileLast, token: token, gen: l.gen}
	return nil
}

// newSegment returns the segment to hold runID's segment as the
// transaction leaves it, and lists it in l.segs: the one the transaction
// already made, else one off the store's free list (see committed).
func (l *logTx) newSegment(runID string) *segment {
	if seg := l.segs[runID]; seg != nil {
		return seg
	}
	t := &l.s.tails
	var seg *segment
	if n := len(t.free); n > 0 {
		seg, t.free = t.free[n-1], t.free[:n-1]
	} else {
		seg = new(segment)
	}
	l.segs[runID] = seg
	return seg
}

// freeSegment puts seg on the store's free list, cleared. (the writer's)
func (t *tails) freeSegment(seg *segment) {
	if len(t.free) < maxFreeSegments {
		*seg = segment{}
		t.free = append(t.free, seg)
	}
}

// maxFreeSegments bounds the free list: a commit of as many streaming
// runs takes none anew.
const maxFreeSegments = 4096

// growKnown is append's common case: evs continue the segment the store
// remembers; grown says it is that segment, grown. A segment verified in
// this generation grows with no statement at all (the fast grow, see the
// top of this file), provided token is not below the one it was verified
// with — and so needs none to be checked before it moves into
// event_chunks (end, or full). Any other known segment that stays in the
// tail is verified with one conditional UPDATE, which checks that the
// file has it as remembered and the token, and moves run_tails.last_seq.
// Otherwise append checks and writes step by step.
func (l *logTx) growKnown(runID string, token int64, evs []runtime.Event, end bool) (seg segment, grown bool, err error) {
	known := l.known(runID)
	if known == nil || evs[0].Seq != known.last()+1 {
		return segment{}, false, nil
	}
	if known.gen == l.gen && token >= known.token {
		// Verified in this generation: as the file has it, whether it
		// grows or moves into event_chunks now (end, or full).
		return *known, true, nil
	}
	if end || len(known.rows)+len(evs) >= compactAt {
		return segment{}, false, nil
	}
	newLast := evs[len(evs)-1].Seq
	l.moved = true
	n, err := l.s.execHotRows(l.ctx, growKnownQuery, []any{newLast, runID, known.fileLast, known.from, token})
	if err != nil || n == 0 {
		return segment{}, false, err
	}
	seg = *known
	seg.fileLast = newLast
	return seg, true, nil
}

// end moves runID's segment, if it has one, into event_chunks: the run stops
// writing its log.
func (l *logTx) end(runID string, token int64) error {
	last, from, err := l.state(runID, token)
	if err != nil || from == 0 {
		return err
	}
	seg, err := l.segment(runID, from, last)
	if err != nil {
		return err
	}
	return l.compact(runID, token, from, seg.rows, last, true)
}

// known is runID's segment as this transaction left it or, if the
// transaction did not touch it, as the store remembers it (nil: none).
func (l *logTx) known(runID string) *segment {
	if seg, ok := l.segs[runID]; ok {
		return seg
	}
	l.s.tails.mu.Lock()
	defer l.s.tails.mu.Unlock()
	return l.s.tails.segs[runID]
}

// segment returns runID's segment starting at row from and ending at seq
// last (an empty one when from is 0): as this transaction left it, as the
// store remembers it, or read from the tail when neither is that segment
// (another store on the file may have appended to it).
func (l *logTx) segment(runID string, from, last int64) (segment, error) {
	if from == 0 {
		return segment{}, nil
	}
	if seg := l.known(runID); seg != nil && seg.from == from && seg.fileLast == last {
		return *seg, nil
	}
	got, err := readSegment(l.ctx, l.s.ws, l.tx, runID, from)
	if err != nil {
		return segment{}, err
	}
	return segment{from: from, rows: got}, nil
}

// compact writes rows, runID's whole segment from row from (0: none) and
// any events after it, to event_chunks; the log ends at seq last (or at
// its last row). A run that goes on writing (not end) keeps its
// run_tails row: its segment begins anew, empty, at the tail's next row,
// and run_tails.last_seq holds the log's last seq — one statement, where
// ending the segment took three (the run's last_seq, the row's delete,
// and the next commit's insert of a new one) and the run's next commit a
// verification. Otherwise the segment ends and runs.last_seq takes the
// log's last seq.
func (l *logTx) compact(runID string, token, from int64, rows []eventRow, last int64, end bool) error {
	l.chunks = append(l.chunks, chunks(runID, rows, &l.s.chunkScratch)...)
	if len(rows) > 0 {
		last = max(last, rows[len(rows)-1].ev.Seq)
	}
	if from != 0 && !end {
		l.moved = true
		if err := l.s.execHot(l.ctx, restartSegmentQuery, []any{l.next, last, runID}); err != nil {
			return err
		}
		*l.newSegment(runID) = segment{from: l.next, fileLast: last, token: token, gen: l.gen}
		return nil
	}
	switch {
	case last > 0 && runID == l.finishing:
		l.finishLast = last
	case last > 0:
		if err := l.s.execHot(l.ctx, compactedQuery, []any{last, runID}); err != nil {
			return err
		}
	}
	if from != 0 {
		l.moved = true
		if err := l.s.execHot(l.ctx, endSegmentQuery, []any{runID}); err != nil {
			return err
		}
	}
	l.segs[runID] = nil
	return nil
}

// insert inserts the transaction's rows, first truncating the tail when
// the store appended truncateEvery rows since it last did.
func (l *logTx) insert() error {
	if l.s.tails.appended+len(l.tail) >= truncateEvery {
		if err := l.truncate(); err != nil {
			return fmt.Errorf("truncate the event tail: %w", err)
		}
	}
	if err := l.s.insertTail(l.ctx, l.tail); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	for _, c := range l.chunks {
		if err := l.s.execHot(l.ctx, insertChunkQuery, []any{c.runID, c.first, c.last, c.data}); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
	}
	// The rows are in the file (and the segments hold their own copies):
	// the buffer goes back to the store, holding no event.
	l.appended = len(l.tail)
	l.s.tailRows = keepRows(l.tail)
	l.tail, l.chunks = nil, nil
	return nil
}

// keepRowsMax bounds a row buffer the store keeps for the next write
// transaction.
const keepRowsMax = 4096

// keepRows empties rows for reuse, or drops it when it grew large.
func keepRows(rows []eventRow) []eventRow {
	if cap(rows) > keepRowsMax {
		return nil
	}
	clear(rows)
	return rows[:0]
}

// truncate deletes the tail's rows below the oldest segment, first
// compacting the segments that start more than pinRows/2 rows behind the
// tail's end when the oldest starts pinRows behind it.
func (l *logTx) truncate() error {
	oldest := func() (int64, error) {
		var low sql.NullInt64
		if err := l.s.ws.queryRowIn(l.ctx, l.tx, oldestSegmentQuery).Scan(&low); err != nil {
			return 0, err
		}
		if !low.Valid {
			return l.next, nil
		}
		return low.Int64, nil
	}
	low, err := oldest()
	if err != nil {
		return err
	}
	if l.next-low > pinRows {
		rows, err := l.s.ws.queryIn(l.ctx, l.tx, pinningQuery, l.next-pinRows/2)
		if err != nil {
			return err
		}
		type pin struct{ from, last int64 }
		pinning := map[string]pin{}
		for rows.Next() {
			var id string
			var p pin
			if err := rows.Scan(&id, &p.from, &p.last); err != nil {
				rows.Close()
				return err
			}
			pinning[id] = p
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for id, p := range pinning {
			seg, err := l.segment(id, p.from, p.last)
			if err != nil {
				return err
			}
			if err := l.compact(id, 0, p.from, seg.rows, p.last, true); err != nil {
				return err
			}
		}
		if low, err = oldest(); err != nil {
			return err
		}
	}
	// At most 4 × truncateEvery rows go at once: when the oldest segment has
	// held back the truncation for long (a thousand runs that started
	// together compact together), the rows below it are tens of
	// thousands, and one statement deleting them all held the writer,
	// and every delta waiting for it, for over 15 ms. Truncating four
	// times as many rows as were appended since the last time catches up
	// within a few truncations.
	var first int64
	if err := l.s.queryRowHot(l.ctx, tailFirstQuery).Scan(&first); err != nil {
		return err
	}
	low = min(low, first+4*int64(truncateEvery))
	if _, err := l.s.ws.execIn(l.ctx, l.tx, truncateQuery, low); err != nil {
		return err
	}
	l.truncated = low
	return nil
}

// committed makes the store remember the segments as the committed
// transaction left them, and forget those the truncation passed.
func (l *logTx) committed() {
	t := &l.s.tails
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.segs == nil {
		t.segs = map[string]*segment{}
	}
	// A segment the store remembers takes the transaction's value in
	// place (readers copy it under t.mu), and the transaction's goes back
	// to the free list: a streaming run's commits allocate no segment.
	for id, seg := range l.segs {
		old := t.segs[id]
		switch {
		case seg == nil:
			if old != nil {
				delete(t.segs, id)
				t.freeSegment(old)
			}
		case old != nil:
			*old = *seg
			t.freeSegment(seg)
		default:
			t.segs[id] = seg
		}
	}
	t.gen, t.epoch, t.epochKnown = l.gen, l.epoch, true
	t.appended += l.appended
	if l.truncated != 0 {
		t.appended = 0
		for id, seg := range t.segs {
			if seg.from < l.truncated {
				delete(t.segs, id) // another writer compacted it
				t.freeSegment(seg)
			}
		}
	}
}

// rolledBack returns the segments the transaction made to the free list:
// the store remembers the segments as they were. (the writer's)
func (l *logTx) rolledBack() {
	t := &l.s.tails
	for _, seg := range l.segs {
		if seg != nil {
			t.freeSegment(seg)
		}
	}
}

// scanEvent scans a row of eventsQuery.
func scanEvent(rows *sql.Rows, runID string) (runtime.Event, error) {
	e := runtime.Event{RunID: runID}
	var (
		typ  string
		at   int64
		data []byte
	)
	if err := rows.Scan(&e.Seq, &typ, &e.ChatID, &e.NodeID, &e.Attempt, &at, &data); err != nil {
		return e, err
	}
	e.Type, e.Time = runtime.EventType(typ), fromMicros(at)
	if data != nil {
		e.Data = json.RawMessage(data)
	}
	return e, nil
}

// compactAll moves every segment into events, in tx (Open): a segment's
// events are its run's in the tail's pages from its first row on. A
// segment's last seq is its last event's when fast grows passed
// run_tails.last_seq.
func (s *Store) compactAll(ctx context.Context, tx *sql.Tx) error {
	if err := s.moveSegments(ctx, tx); err != nil {
		return fmt.Errorf("compact the event tail: %w", err)
	}
	for _, q := range []string{
		`UPDATE runs SET last_seq = max((SELECT t.last_seq FROM run_tails t WHERE t.run_id = runs.id),
	coalesce((SELECT max(e.seq) FROM events e WHERE e.run_id = runs.id), 0))
WHERE id IN (SELECT run_id FROM run_tails)`,
		`DELETE FROM run_tails`,
		`DELETE FROM event_tail`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("compact the event tail: %w", err)
		}
	}
	return nil
}

// moveSegments inserts into events, in tx, the events of every segment
// in the tail, run by run in seq order.
func (s *Store) moveSegments(ctx context.Context, tx *sql.Tx) error {
	// A segment's first row, and its run's id to give its events (one
	// string for all of them).
	type seg struct {
		from  int64
		runID string
	}
	segs := map[string]seg{}
	low := int64(-1)
	rows, err := tx.QueryContext(ctx, `SELECT run_id, tail_from FROM run_tails`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var from int64
		if err := rows.Scan(&id, &from); err != nil {
			rows.Close()
			return err
		}
		segs[id] = seg{from, id}
		if low < 0 || from < low {
			low = from
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(segs) == 0 {
		return err
	}
	var moved []runtime.Event
	err = readPages(ctx, s.ws, tx, low, func(id int64, run []byte) bool {
		sg, ok := segs[string(run)]
		return ok && id >= sg.from
	}, func(id int64, run []byte, e *runtime.Event) error {
		e.RunID = segs[string(run)].runID
		moved = append(moved, *e)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(moved, func(a, b runtime.Event) int {
		return cmp.Or(cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
	})
	insert, err := tx.PrepareContext(ctx, `INSERT INTO events (run_id, seq, type, chat_id, node_id, attempt, at, data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	for _, e := range moved {
		data, _ := e.Data.(json.RawMessage)
		if _, err := insert.ExecContext(ctx, e.RunID, e.Seq, string(e.Type), e.ChatID, e.NodeID, e.Attempt, micros(e.Time), text(data)); err != nil {
			return err
		}
	}
	return nil
}
