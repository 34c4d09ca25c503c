package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"chatgraph/runtime"
)

// The tail's rows are pages (schema version 8): a write transaction
// appends the events that stay in the tail as one row of event_tail,
// whatever runs they belong to, encoded together. A row per event cost a
// B-tree insert and nine bound values for each event, and a group commit
// of a thousand streaming runs carries an event of each; a page costs one
// insert and three values for all of them.
//
// The tail still numbers events, not pages: a page's id is the number of
// its first event and n its count, so its events are ids id … id+n-1, and
// a segment's first row (run_tails.tail_from) is an event's number, which
// may fall inside a page that other runs' events share. Pages follow one
// another without gaps or overlaps, in commit order.
//
// The encoding, after a version byte (1), is for each event in the order
// the transaction appended them: its run id (uvarint length, bytes), then
// the event as a chunk encodes it (appendChunkEvent) after the page's
// previous event, whichever run that was.
const pageVersion = 1

// maxPageEvents bounds the events of one page: a transaction that keeps
// more in the tail writes several pages, so that reading a segment's rows
// decodes bounded pages. (A variable for the tests.)
var maxPageEvents = 4096

// pageScratchMax bounds the encoding buffer a store keeps (insertTail).
const pageScratchMax = 256 << 10

// insertPageQuery inserts a page of the tail.
const insertPageQuery = `INSERT INTO event_tail (id, n, data) VALUES (?, ?, ?)`

// appendPage appends the page encoding of rows (consecutive ids) to b.
func appendPage(b []byte, rows []eventRow) []byte {
	b = append(b, pageVersion)
	var prev *runtime.Event
	for _, r := range rows {
		b = appendChunkBytes(b, r.ev.RunID)
		b = appendChunkEvent(b, r.ev, prev)
		prev = r.ev
	}
	return b
}

// decodePage calls fn with each event of the page b whose first event is
// id first that want wants, in order: its id, its run's id (valid only
// during the call) and the event, whose RunID is not set and whose data
// aliases b (the caller hands over b). The events want does not want
// (other runs', in a segment's read) are checked but not built. An error
// of fn stops the decoding and is returned; a page this store did not
// write is errBadChunk.
func decodePage(b []byte, first int64, want func(id int64, runID []byte) bool, fn func(id int64, runID []byte, e *runtime.Event) error) error {
	if len(b) == 0 || b[0] != pageVersion {
		return fmt.Errorf("%w: page version", errBadChunk)
	}
	d := eventDecoder{chunkDecoder: chunkDecoder{b: b[1:]}}
	for id := first; len(d.b) > 0; id++ {
		runID := d.bytes()
		if d.err != nil {
			return d.err
		}
		if err := d.read(); err != nil {
			return err
		}
		if !want(id, runID) {
			continue
		}
		e := d.event()
		if err := fn(id, runID, &e); err != nil {
			return err
		}
	}
	return nil
}

// pagesFromQuery reads the pages that hold the tail's events from an id
// on: the page that holds that event (the last to begin at or before
// it) and every page after it.
const pagesFromQuery = `SELECT id, data FROM event_tail
WHERE id >= coalesce((SELECT max(id) FROM event_tail WHERE id <= ?), 0) ORDER BY id`

// readPages calls fn with every event of the tail's pages from event
// from on (and the events before it on the page that holds it) that want
// wants, in order (decodePage), reading them in tx with c's statements.
func readPages(ctx context.Context, c *stmts, tx *sql.Tx, from int64, want func(id int64, runID []byte) bool,
	fn func(id int64, runID []byte, e *runtime.Event) error) error {
	rows, err := c.queryIn(ctx, tx, pagesFromQuery, from)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return err
		}
		if err := decodePage(data, id, want, fn); err != nil {
			return fmt.Errorf("tail page %d: %w", id, err)
		}
	}
	return rows.Err()
}

// readSegment reads runID's events in the tail from row from on, in tx
// with c's statements: the segment that begins there. The other runs'
// events on its pages are read past, not built.
func readSegment(ctx context.Context, c *stmts, tx *sql.Tx, runID string, from int64) ([]eventRow, error) {
	var out []eventRow
	err := readPages(ctx, c, tx, from, func(id int64, run []byte) bool { return id >= from && string(run) == runID },
		func(id int64, _ []byte, e *runtime.Event) error {
			ev := *e
			ev.RunID = runID
			out = append(out, eventRow{id: id, ev: &ev})
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("segment of %s: %w", runID, err)
	}
	return out, nil
}

// insertTail inserts rows (consecutive ids, the first rows[0].id) into
// event_tail, in the writer's transaction, as pages of up to
// maxPageEvents events.
func (s *Store) insertTail(ctx context.Context, rows []eventRow) error {
	for len(rows) > 0 {
		n := min(len(rows), maxPageEvents)
		b := appendPage(s.pageScratch[:0], rows[:n])
		// SQLite copies the bound blob: the buffer is free again once the
		// statement ran.
		err := s.execHot(ctx, insertPageQuery, []any{rows[0].id, int64(n), b})
		if cap(b) <= pageScratchMax {
			s.pageScratch = b[:0]
		}
		if err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}
