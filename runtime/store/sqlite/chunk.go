package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"chatgraph/runtime"
)

// A compacted segment is one row of event_chunks (schema version 7): the
// run's id, the first and last seq of its events, and the events encoded
// together in data. A row per event in events cost a B-tree insert, eight
// bound values and the clustered table's page splits for each event; a
// chunk costs one insert for up to chunkEvents events, and its pages are
// new pages at the table's end. Older files keep their rows in events,
// and Open still moves the tail's segments (runs still writing when the
// file was last closed) into events, in one SQL statement: a run's
// compacted log is its rows in events and in event_chunks, their seqs
// disjoint.
//
// The encoding, after a version byte (1), is for each event in seq order:
//
//	flags    byte: 1 type, 2 chat, 4 node follow (else the event's are the
//	         previous event's, "" for the first), 8 data follows (else null)
//	seq      uvarint
//	type     uvarint length, bytes (flag 1)
//	chat id  uvarint length, bytes (flag 2)
//	node id  uvarint length, bytes (flag 4)
//	attempt  varint
//	at       varint, microseconds since the Unix epoch (UTC)
//	data     uvarint length, JSON bytes (flag 8)
const chunkVersion = 1

// A chunk holds at most chunkEvents events and, past its first event,
// about chunkBytes: a read of a few events from a long log decodes a
// bounded chunk.
const (
	chunkEvents = 64
	chunkBytes  = 256 << 10
)

const (
	chunkType = 1 << iota
	chunkChat
	chunkNode
	chunkData
)

// chunkRow is one event_chunks row to insert.
type chunkRow struct {
	runID       string
	first, last int64
	data        []byte
}

// chunks encodes rows (a run's consecutive events) as event_chunks rows
// of runID. Each chunk is encoded in *scratch, which grows to the largest
// and is kept for the next call, and copied out at its size: one
// allocation a chunk, not one for each time its encoding outgrows its
// buffer.
func chunks(runID string, rows []eventRow, scratch *[]byte) []chunkRow {
	var out []chunkRow
	for len(rows) > 0 {
		b := append((*scratch)[:0], chunkVersion)
		var prev *runtime.Event
		n := 0
		for n < len(rows) && n < chunkEvents && (n == 0 || len(b) < chunkBytes) {
			e := rows[n].ev
			b = appendChunkEvent(b, e, prev)
			prev = e
			n++
		}
		out = append(out, chunkRow{runID: runID, first: rows[0].ev.Seq, last: rows[n-1].ev.Seq, data: bytes.Clone(b)})
		if cap(b) <= chunkScratchMax {
			*scratch = b
		}
		rows = rows[n:]
	}
	return out
}

// chunkScratchMax bounds the encoding buffer a store keeps (chunks).
const chunkScratchMax = 64 << 10

// appendChunkEvent appends e's encoding, after prev (nil: e is first).
func appendChunkEvent(b []byte, e, prev *runtime.Event) []byte {
	var typ, chat, node string
	if prev != nil {
		typ, chat, node = string(prev.Type), prev.ChatID, prev.NodeID
	}
	var data []byte
	if raw, ok := e.Data.(json.RawMessage); ok && raw != nil {
		data = raw
	}
	var flags byte
	if string(e.Type) != typ {
		flags |= chunkType
	}
	if e.ChatID != chat {
		flags |= chunkChat
	}
	if e.NodeID != node {
		flags |= chunkNode
	}
	if data != nil {
		flags |= chunkData
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(e.Seq))
	if flags&chunkType != 0 {
		b = appendChunkBytes(b, string(e.Type))
	}
	if flags&chunkChat != 0 {
		b = appendChunkBytes(b, e.ChatID)
	}
	if flags&chunkNode != 0 {
		b = appendChunkBytes(b, e.NodeID)
	}
	b = binary.AppendVarint(b, int64(e.Attempt))
	b = binary.AppendVarint(b, micros(e.Time))
	if data != nil {
		b = binary.AppendUvarint(b, uint64(len(data)))
		b = append(b, data...)
	}
	return b
}

func appendChunkBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errBadChunk: an event_chunks row's data is not a chunk this store
// wrote.
var errBadChunk = errors.New("bad event chunk")

// decodeChunk appends the events of runID encoded in b, in seq order, to
// out. Each event's data aliases b (the caller hands over b). An
// encoding that is cut short, or whose seqs do not increase, is
// errBadChunk.
func decodeChunk(out []runtime.Event, runID string, b []byte) ([]runtime.Event, error) {
	if len(b) == 0 || b[0] != chunkVersion {
		return out, fmt.Errorf("%w: version", errBadChunk)
	}
	d := eventDecoder{chunkDecoder: chunkDecoder{b: b[1:]}}
	var last int64
	for len(d.b) > 0 {
		e, err := d.next()
		if err != nil {
			return out, err
		}
		if e.Seq <= last {
			return out, fmt.Errorf("%w: event %d after %d", errBadChunk, e.Seq, last)
		}
		last, e.RunID = e.Seq, runID
		out = append(out, e)
	}
	return out, nil
}

// eventDecoder reads events encoded by appendChunkEvent one after
// another. An event's type, chat and node are the previous event's
// unless it changes them; they are kept as the encoding's bytes and made
// strings only for an event that is built (event), once for each change:
// a page's events of other runs are read past without a string each
// (decodePage).
type eventDecoder struct {
	chunkDecoder
	typ, chat, node lazyString
	// The event read last (read), but for the three above.
	seq         uint64
	attempt, at int64
	data        []byte
}

// lazyString is a field of the event read last: its bytes, and its
// string once made.
type lazyString struct {
	b    []byte
	s    string
	made bool
}

func (f *lazyString) set(b []byte) { f.b, f.made = b, false }

func (f *lazyString) String() string {
	if !f.made {
		f.s, f.made = string(f.b), true
	}
	return f.s
}

// next reads the next event (its RunID unset, its data aliasing the
// encoding): errBadChunk when it is cut short or out of range.
func (d *eventDecoder) next() (runtime.Event, error) {
	if err := d.read(); err != nil {
		return runtime.Event{}, err
	}
	return d.event(), nil
}

// read reads the next event, checking it as next does, without building
// it.
func (d *eventDecoder) read() error {
	if len(d.b) == 0 {
		return fmt.Errorf("%w: cut short", errBadChunk)
	}
	flags := d.b[0]
	d.b = d.b[1:]
	if flags&^(chunkType|chunkChat|chunkNode|chunkData) != 0 {
		return fmt.Errorf("%w: flags %#x", errBadChunk, flags)
	}
	d.seq = d.uvarint()
	if flags&chunkType != 0 {
		d.typ.set(d.bytes())
	}
	if flags&chunkChat != 0 {
		d.chat.set(d.bytes())
	}
	if flags&chunkNode != 0 {
		d.node.set(d.bytes())
	}
	d.attempt, d.at = d.varint(), d.varint()
	d.data = nil
	if flags&chunkData != 0 {
		d.data = d.bytes()
	}
	switch {
	case d.err != nil:
		return d.err
	case d.seq == 0 || d.seq > 1<<62 || d.attempt < 0 || d.attempt > 1<<31:
		return fmt.Errorf("%w: event %d", errBadChunk, d.seq)
	}
	return nil
}

// event builds the event read last (its RunID unset, its data aliasing
// the encoding).
func (d *eventDecoder) event() runtime.Event {
	e := runtime.Event{Seq: int64(d.seq), ChatID: d.chat.String(), Type: runtime.EventType(d.typ.String()),
		NodeID: d.node.String(), Attempt: int(d.attempt), Time: fromMicros(d.at)}
	if d.data != nil {
		e.Data = json.RawMessage(d.data)
	}
	return e
}

// chunkDecoder reads a chunk's fields; the first failure sticks in err.
type chunkDecoder struct {
	b   []byte
	err error
}

func (d *chunkDecoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }

func (d *chunkDecoder) varint() int64 { return readVarint(d, binary.Varint) }

// readVarint reads one value with decode (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](d *chunkDecoder, decode func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := decode(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: cut short", errBadChunk)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length and that many bytes (a full slice of the chunk).
func (d *chunkDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: cut short", errBadChunk)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// readChunks merges runID's events after seq after in event_chunks into
// out, the run's rows of events after it (up to limit), and keeps the
// first limit (limit <= 0: all). The two tables hold disjoint seqs.
func (s *Store) readChunks(ctx context.Context, tx *sql.Tx, runID string, after int64, limit int, out []runtime.Event) ([]runtime.Event, error) {
	rows, err := s.rs.queryIn(ctx, tx, chunksQuery, runID, after)
	if err != nil {
		return nil, err
	}
	var got []runtime.Event
	for (limit <= 0 || len(got) < limit) && rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			rows.Close()
			return nil, err
		}
		first := len(got) == 0
		if got, err = decodeChunk(got, runID, data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
		if first {
			// Only the first chunk read may hold seqs up to after.
			i := 0
			for i < len(got) && got[i].Seq <= after {
				i++
			}
			got = got[i:]
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return out, nil
	}
	out = append(out, got...)
	slices.SortFunc(out, func(a, b runtime.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
