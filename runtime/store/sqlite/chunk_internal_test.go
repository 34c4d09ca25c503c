package sqlite

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// chunkRows are eventRows of events as a segment holds them.
func chunkRows(evs []runtime.Event) []eventRow {
	rows := make([]eventRow, len(evs))
	for i := range evs {
		rows[i] = eventRow{ev: &evs[i]}
	}
	return rows
}

// mixedEvents are n events of run r1 from seq 1 whose fields change from
// one to the next as a run's do: types, chats and nodes that repeat and
// change, attempts, data that is absent, empty, small or large.
func mixedEvents(n int) []runtime.Event {
	base := time.Date(2026, 11, 27, 15, 0, 0, 123456000, time.UTC)
	evs := make([]runtime.Event, n)
	for i := range evs {
		e := runtime.Event{Seq: int64(i + 1), RunID: "r1", ChatID: "c1", Type: "node_delta",
			NodeID: "agent", Attempt: 1, Time: base.Add(time.Duration(i) * time.Millisecond)}
		switch i % 7 {
		case 0:
			e.Type, e.NodeID, e.Attempt = runtime.EventNodeStarted, fmt.Sprintf("n%d", i/7), 0
		case 3:
			e.ChatID = ""
		case 5:
			e.Data = json.RawMessage(`{"text":"` + strings.Repeat("é", i) + `"}`)
		}
		if i%7 != 5 && i%3 != 0 {
			e.Data = json.RawMessage(fmt.Sprintf(`{"text":" w%d"}`, i))
		}
		evs[i] = e
	}
	return evs
}

// A chunk decodes to the events it was encoded from, field for field.
func TestChunkRoundTrip(t *testing.T) {
	t.Parallel()
	evs := mixedEvents(150)
	cs := chunks("r1", chunkRows(evs), new([]byte))
	require.Len(t, cs, 3, "at most chunkEvents events a chunk")
	var got []runtime.Event
	for _, c := range cs {
		n := len(got)
		var err error
		got, err = decodeChunk(got, "r1", c.data)
		require.NoError(t, err)
		require.Equal(t, got[n].Seq, c.first)
		require.Equal(t, got[len(got)-1].Seq, c.last)
	}
	require.Equal(t, evs, got)
}

// A chunk closes once it holds about chunkBytes, however few events.
func TestChunksAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	evs := make([]runtime.Event, 10)
	for i := range evs {
		evs[i] = runtime.Event{Seq: int64(i + 1), RunID: "r1", Type: runtime.EventNodeCompleted,
			Time: time.Unix(0, 0).UTC(), Data: json.RawMessage(`"` + strings.Repeat("x", chunkBytes/4) + `"`)}
	}
	cs := chunks("r1", chunkRows(evs), new([]byte))
	require.Len(t, cs, 3)
	require.Equal(t, []int64{1, 4, 5, 8, 9, 10}, []int64{cs[0].first, cs[0].last, cs[1].first, cs[1].last, cs[2].first, cs[2].last})
}

// What is not a chunk this store wrote is an error, never a panic or a
// wrong event.
func TestDecodeChunkRefusesDamage(t *testing.T) {
	t.Parallel()
	good := chunks("r1", chunkRows(mixedEvents(10)), new([]byte))[0].data
	for name, b := range map[string][]byte{
		"empty":        nil,
		"version":      append([]byte{2}, good[1:]...),
		"cut short":    good[:len(good)-3],
		"unknown flag": {chunkVersion, 0x10, 1, 0, 0},
		"seq repeated": append(append([]byte{chunkVersion}, good[1:]...), 0, 10, 0, 0),
		"long length":  {chunkVersion, chunkType, 1, 0xff, 0xff, 0xff, 0x0f},
	} {
		_, err := decodeChunk(nil, "r1", b)
		require.ErrorIs(t, err, errBadChunk, name)
	}
}

// A run's log reads back whole and in every part when its older events
// are rows of events (a file written before chunks, or Open's move of
// the tail) and its newer ones chunks.
func TestEventsReadsRowsAndChunksAsOneLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	first, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	tailRun(t, first, "r1")
	appendDeltas(t, first, "r1", 1, 20, 20)
	require.NoError(t, first.Close())
	// Opening moves the tail into rows of events.
	s, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, int64(20), count(t, s, `SELECT count(*) FROM events WHERE run_id = 'r1'`))
	appendDeltas(t, s, "r1", 21, 200, 9)
	require.Positive(t, count(t, s, `SELECT count(*) FROM event_chunks WHERE run_id = 'r1'`))
	require.Equal(t, int64(20), count(t, s, `SELECT count(*) FROM events WHERE run_id = 'r1'`))
	requireLog(t, s, "r1", 200)
	for after := int64(0); after <= 200; after += 3 {
		for _, limit := range []int{0, 1, 19, 64, 65, 500} {
			evs, err := s.Events(t.Context(), "r1", after, limit)
			require.NoError(t, err)
			want := int(200 - after)
			if limit > 0 {
				want = min(want, limit)
			}
			require.Len(t, evs, want, "after %d, limit %d", after, limit)
			for i, e := range evs {
				require.Equal(t, after+int64(i)+1, e.Seq, "after %d, limit %d", after, limit)
			}
		}
	}
}

// FuzzDecodeChunk: any bytes decode to events with increasing seqs or to
// errBadChunk, and what decodes encodes to a chunk that decodes the same.
func FuzzDecodeChunk(f *testing.F) {
	for _, c := range chunks("r1", chunkRows(mixedEvents(70)), new([]byte)) {
		f.Add(c.data)
	}
	f.Add([]byte{chunkVersion})
	f.Add([]byte{chunkVersion, chunkData, 1, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := decodeChunk(nil, "r1", b)
		if err != nil {
			require.ErrorIs(t, err, errBadChunk)
			return
		}
		for i := 1; i < len(evs); i++ {
			require.Greater(t, evs[i].Seq, evs[i-1].Seq)
		}
		if len(evs) == 0 {
			return
		}
		var again []runtime.Event
		for _, c := range chunks("r1", chunkRows(evs), new([]byte)) {
			again, err = decodeChunk(again, "r1", c.data)
			require.NoError(t, err)
		}
		require.Equal(t, evs, again)
	})
}

// pageEvents decodes page b (its first event id first) into events with
// their run ids set.
func pageEvents(b []byte, first int64) ([]runtime.Event, error) {
	var out []runtime.Event
	next := first
	err := decodePage(b, first, allEvents, func(id int64, run []byte, e *runtime.Event) error {
		if id != next {
			return fmt.Errorf("event id %d, want %d", id, next)
		}
		next++
		ev := *e
		ev.RunID = string(run)
		out = append(out, ev)
		return nil
	})
	return out, err
}

// interleaved are mixedEvents(n) spread over three runs, as a group
// commit of several runs appends them.
func interleaved(n int) []runtime.Event {
	evs := mixedEvents(n)
	for i := range evs {
		evs[i].RunID = fmt.Sprintf("run-%d", i%3)
	}
	return evs
}

// A page reads back as the events it was written from, of every run, in
// order and numbered from its first id.
func TestPageRoundTrip(t *testing.T) {
	evs := interleaved(70)
	page := appendPage(nil, chunkRows(evs))
	got, err := pageEvents(page, 41)
	require.NoError(t, err)
	require.Equal(t, evs, got)
}

func FuzzDecodePage(f *testing.F) {
	f.Add(appendPage(nil, chunkRows(interleaved(20))))
	f.Add([]byte{pageVersion})
	f.Add([]byte{pageVersion, 2, 'r', '1', chunkData, 1, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := pageEvents(b, 1)
		if err != nil {
			require.ErrorIs(t, err, errBadChunk)
			return
		}
		again, err := pageEvents(appendPage(nil, chunkRows(evs)), 1)
		require.NoError(t, err)
		require.Equal(t, evs, again)
	})
}
