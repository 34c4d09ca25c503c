package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// deltaType is the type of the events these tests append: the store
// keeps any type.
const deltaType = runtime.EventType("node_delta")

// tailRun creates a running run without a lease (token 0) in s.
func tailRun(t *testing.T, s *Store, id string) {
	t.Helper()
	now := time.Now()
	require.NoError(t, s.CreateRun(t.Context(), &runtime.RunRecord{ID: id, RootID: id, GraphID: "g",
		Status: runtime.RunRunning, CreatedAt: now, UpdatedAt: now}))
}

// deltas are the events seq from..to of run id.
func deltas(id string, from, to int64) []runtime.Event {
	var evs []runtime.Event
	for seq := from; seq <= to; seq++ {
		evs = append(evs, runtime.Event{Seq: seq, RunID: id, Type: deltaType, NodeID: "agent",
			Attempt: 1, Time: time.Now(), Data: map[string]any{"text": "w"}})
	}
	return evs
}

// appendDeltas appends the events seq from..to of run id, n at a time.
func appendDeltas(t *testing.T, s *Store, id string, from, to, n int64) {
	t.Helper()
	for lo := from; lo <= to; lo += n {
		require.NoError(t, s.AppendEvents(t.Context(), id, 0, deltas(id, lo, min(lo+n-1, to))))
	}
}

// twoStores opens two stores on one new file, as two processes would;
// they close when the test ends.
func twoStores(t *testing.T) (path string, a, b *Store) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "t.db")
	for _, s := range []**Store{&a, &b} {
		st, err := Open(t.Context(), Config{Path: path})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		*s = st
	}
	return path, a, b
}

// oneStore opens a store on a new file; it closes when the test ends.
func oneStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "t.db")})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// reopen opens another store on the file at path, as a restarted server
// would (Open moves the tail's segments into events); it closes when the
// test ends.
func reopen(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// requireCompacted checks how many events of each run of want were moved
// out of the tail (compacted).
func requireCompacted(t *testing.T, s *Store, want map[string]int64) {
	t.Helper()
	for id, n := range want {
		require.Equal(t, n, compacted(t, s, id), id)
	}
}

// count is the first column of q's one row, read from s's file.
func count(t *testing.T, s *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.rs.queryRow(t.Context(), q, args...).Scan(&n))
	return n
}

// segmentEvents counts run id's events in the tail from its segment's
// first row, read from s's file.
func segmentEvents(t *testing.T, s *Store, id string) int {
	t.Helper()
	from := count(t, s, `SELECT tail_from FROM run_tails WHERE run_id = ?`, id)
	var rows []eventRow
	require.NoError(t, s.inReadTx(t.Context(), []string{pagesFromQuery}, func(tx *sql.Tx) error {
		var err error
		rows, err = readSegment(t.Context(), s.rs, tx, id, from)
		return err
	}))
	return len(rows)
}

// tailEvents counts the events in the tail's pages, read from s's file.
func tailEvents(t *testing.T, s *Store) int64 {
	t.Helper()
	return count(t, s, `SELECT coalesce(sum(n), 0) FROM event_tail`)
}

// compacted counts run id's events moved out of the tail: its rows in
// events and the events of its chunks.
func compacted(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	return count(t, s, `SELECT (SELECT count(*) FROM events WHERE run_id = ?) +
	coalesce((SELECT sum(last_seq - first_seq + 1) FROM event_chunks WHERE run_id = ?), 0)`, id, id)
}

// requireLog checks that run id's log reads back as seqs 1..last, whole
// and in parts, and that the run record says it ends at last.
func requireLog(t *testing.T, s *Store, id string, last int64) {
	t.Helper()
	evs, err := s.Events(t.Context(), id, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, int(last))
	for i, e := range evs {
		require.Equal(t, int64(i+1), e.Seq)
		require.Equal(t, deltaType, e.Type)
		require.JSONEq(t, `{"text":"w"}`, string(e.Data.(json.RawMessage)))
	}
	for after := int64(0); after < last; after += 7 {
		part, err := s.Events(t.Context(), id, after, 5)
		require.NoError(t, err)
		require.Len(t, part, int(min(5, last-after)))
		require.Equal(t, after+1, part[0].Seq)
	}
	r, err := s.GetRun(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, last, r.LastSeq)
	runs, err := s.ListRuns(t.Context(), runtime.RunFilter{})
	require.NoError(t, err)
	for _, r := range runs {
		if r.ID == id {
			require.Equal(t, last, r.LastSeq, "listed")
		}
	}
}

func TestTailSegmentsMoveIntoEvents(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "t.db")})
	require.NoError(t, err)
	defer s.Close()
	tailRun(t, s, "r1")

	appendDeltas(t, s, "r1", 1, 60, 20)
	require.Zero(t, compacted(t, s, "r1"), "a short segment stays in the tail")
	requireLog(t, s, "r1", 60) // from memory
	// What the store remembers reads back as what the file holds.
	fromMemory, err := s.Events(t.Context(), "r1", 0, 0)
	require.NoError(t, err)
	s.tails.forget([]string{"r1"})
	fromFile, err := s.Events(t.Context(), "r1", 0, 0)
	require.NoError(t, err)
	require.Equal(t, fromFile, fromMemory)
	// The segment's start wrote run_tails.last_seq, the two grows after
	// it only their rows; the record's LastSeq is the last row's, read
	// from the tail by a store that does not remember the segment.
	require.Equal(t, int64(20), count(t, s, `SELECT last_seq FROM run_tails WHERE run_id = 'r1'`))
	requireLog(t, s, "r1", 60)

	appendDeltas(t, s, "r1", 61, 70, 10)
	require.Equal(t, int64(70), compacted(t, s, "r1"), "a segment of compactAt moves")
	// The run goes on writing: its segment begins anew, empty, and
	// run_tails holds the log's last seq, which the record reads.
	require.Equal(t, int64(70), count(t, s, `SELECT last_seq FROM run_tails WHERE run_id = 'r1'`))
	require.Zero(t, segmentEvents(t, s, "r1"))
	requireLog(t, s, "r1", 70)
	s.tails.forget([]string{"r1"}) // the empty segment, read from the file
	requireLog(t, s, "r1", 70)

	appendDeltas(t, s, "r1", 71, 75, 5)
	requireLog(t, s, "r1", 75) // reads span both tables

	// A batch that finishes the run moves its segment, with no events of
	// its own.
	r, err := s.GetRun(t.Context(), "r1")
	require.NoError(t, err)
	r.Status = runtime.RunCompleted
	require.NoError(t, s.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "r1", Finish: r}}))
	require.Equal(t, int64(75), compacted(t, s, "r1"))
	require.Zero(t, count(t, s, `SELECT count(*) FROM run_tails`))
	require.Empty(t, s.tails.segs)
	requireLog(t, s, "r1", 75)

	// A seq that does not continue the log is refused, in the tail too.
	tailRun(t, s, "r2")
	appendDeltas(t, s, "r2", 1, 3, 3)
	err = s.AppendEvents(t.Context(), "r2", 0, deltas("r2", 3, 4))
	require.ErrorIs(t, err, runtime.ErrSeqConflict)
	require.ErrorContains(t, err, "expects seq 4, got 3")
	requireLog(t, s, "r2", 3)
}

// Two stores on one file stand for two processes: each reads and
// continues the segments the other appended, which it does not remember.
func TestTailSegmentsOfAnotherStore(t *testing.T) {
	path, a, b := twoStores(t)
	tailRun(t, a, "r1")

	appendDeltas(t, a, "r1", 1, 10, 5)
	requireLog(t, b, "r1", 10)
	appendDeltas(t, b, "r1", 11, 15, 5) // continues a's segment
	requireLog(t, a, "r1", 15)          // a's memory of it is behind
	appendDeltas(t, a, "r1", 16, 20, 5) // a continues b's rows, not its memory
	requireLog(t, b, "r1", 20)
	appendDeltas(t, a, "r1", 21, 80, 20) // compacts the segment
	require.Equal(t, int64(80), compacted(t, b, "r1"))
	requireLog(t, b, "r1", 80)

	// Opening the file moves every segment into events, under a store
	// that still remembers its own, and ends each log at its segment's
	// last row, past the last seq run_tails was written with (80, by the
	// compaction that began the segment anew).
	appendDeltas(t, a, "r1", 81, 90, 5)
	require.Equal(t, int64(80), count(t, a, `SELECT last_seq FROM run_tails WHERE run_id = 'r1'`))
	c, err := Open(t.Context(), Config{Path: path})
	require.NoError(t, err)
	defer c.Close()
	require.Zero(t, tailEvents(t, c))
	require.Zero(t, count(t, c, `SELECT count(*) FROM run_tails`))
	require.Equal(t, int64(90), compacted(t, c, "r1"))
	requireLog(t, a, "r1", 90)
	appendDeltas(t, a, "r1", 91, 95, 5)
	requireLog(t, c, "r1", 95)
}

// A store grows a segment it verified without writing run_tails while
// the tail's epoch stays where it left it; another store's write moves
// the epoch, and the first store then checks the file before it appends:
// here its memory (seqs 1..20) would take seqs 21..25, which the other
// store appended meanwhile.
func TestTailFastGrowSeesAnotherStoresWrite(t *testing.T) {
	t.Parallel()
	_, a, b := twoStores(t)
	tailRun(t, a, "r1")
	epoch := func() int64 { return count(t, a, `SELECT n FROM tail_epoch`) }

	appendDeltas(t, a, "r1", 1, 10, 5)
	before := epoch()
	appendDeltas(t, a, "r1", 11, 20, 5)
	require.Equal(t, before, epoch(), "fast grows leave run_tails and the epoch alone")
	require.Equal(t, int64(5), count(t, a, `SELECT last_seq FROM run_tails WHERE run_id = 'r1'`))

	appendDeltas(t, b, "r1", 21, 25, 5) // b does not remember the segment: it writes run_tails
	require.Greater(t, epoch(), before)
	err := a.AppendEvents(t.Context(), "r1", 0, deltas("r1", 21, 25))
	require.ErrorIs(t, err, runtime.ErrSeqConflict)
	requireLog(t, a, "r1", 25)
	requireLog(t, b, "r1", 25)
	appendDeltas(t, a, "r1", 26, 30, 5)
	requireLog(t, b, "r1", 30)
}

// A store's own log writes leave it knowing the tail's epoch, whether
// they moved it (a segment compacted) or not (fast grows, whose
// transactions read the epoch only once): its next transaction finds the
// epoch where the store left it and verifies no segment again.
func TestTailEpochFollowsOwnWrites(t *testing.T) {
	t.Parallel()
	s := oneStore(t)
	tailRun(t, s, "r1")
	appendDeltas(t, s, "r1", 1, 5, 5) // the segment starts
	known := func() (gen uint64, epoch int64) {
		s.tails.mu.Lock()
		defer s.tails.mu.Unlock()
		return s.tails.gen, s.tails.epoch
	}
	gen, start := known()
	check := func(what string) int64 {
		t.Helper()
		g, epoch := known()
		require.Equal(t, count(t, s, `SELECT n FROM tail_epoch`), epoch, what)
		require.Equal(t, gen, g, what)
		return epoch
	}
	require.Equal(t, start, check("a segment started"), "starting a segment leaves the epoch alone")
	appendDeltas(t, s, "r1", 6, 20, 5)
	require.Equal(t, start, check("fast grows"))
	appendDeltas(t, s, "r1", 21, int64(compactAt)+5, 5) // the segment moves into event_chunks
	require.Greater(t, check("compaction"), start, "a compaction moves the epoch")
	appendDeltas(t, s, "r1", int64(compactAt)+6, int64(compactAt)+15, 5)
	check("a new segment")
	requireLog(t, s, "r1", int64(compactAt)+15)
}

// slowAndBusy opens a store that truncates its tail every 16 appended
// rows and compacts a segment pin rows behind, with two runs: "slow"
// appends two events and stops, "busy" then appends busy events, four at
// a time. Both settings are restored when the test ends.
func slowAndBusy(t *testing.T, pin int64, busy int64) *Store {
	t.Helper()
	every, oldPin := truncateEvery, pinRows
	t.Cleanup(func() { truncateEvery, pinRows = every, oldPin })
	truncateEvery, pinRows = 16, pin
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "t.db")})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	tailRun(t, s, "slow")
	tailRun(t, s, "busy")
	appendDeltas(t, s, "slow", 1, 2, 2)
	appendDeltas(t, s, "busy", 1, busy, 4)
	return s
}

// A run that stops writing without ending holds back the truncation of
// the tail until its segment is pinRows behind; then the truncation
// moves it into events.
func TestTailTruncation(t *testing.T) {
	s := slowAndBusy(t, 128, 100)
	require.Equal(t, int64(1), count(t, s, `SELECT min(id) FROM event_tail`), "slow's segment holds the tail")
	// slow's 2, busy's first 60 (compacted: the batch that made 64 went
	// to events directly) and busy's 65..100.
	require.Equal(t, int64(2+60+36), tailEvents(t, s))

	appendDeltas(t, s, "busy", 101, 300, 4)
	require.Zero(t, count(t, s, `SELECT count(*) FROM run_tails WHERE run_id = 'slow'`), "the pinning segment moved")
	require.Equal(t, int64(2), compacted(t, s, "slow"))
	require.Less(t, tailEvents(t, s), int64(64+16), "rows below the oldest segment are gone")
	require.Greater(t, count(t, s, `SELECT min(id) FROM event_tail`), int64(2))
	requireLog(t, s, "slow", 2)
	requireLog(t, s, "busy", 300)

	appendDeltas(t, s, "slow", 3, 4, 2)
	requireLog(t, s, "slow", 4)

	// Deleting a run forgets its segment.
	require.NoError(t, s.DeleteRun(t.Context(), "slow"))
	require.NotContains(t, s.tails.segs, "slow")
	require.Zero(t, count(t, s, `SELECT count(*) FROM run_tails WHERE run_id = 'slow'`))
}

// A claim by another store on the file fences the next append of a
// segment this store remembers: the segment's grow checks the run's
// token in run_tails, which the claim moved (the trigger run_tails_token),
// and the log stays as it was.
func TestTailSegmentGrowIsFencedByAClaimElsewhere(t *testing.T) {
	t.Parallel()
	_, a, b := twoStores(t)
	tailRun(t, a, "r1")
	lease, err := a.ClaimRun(t.Context(), "r1", "a", time.Minute)
	require.NoError(t, err)
	for seq := int64(1); seq <= 3; seq++ {
		require.NoError(t, a.AppendEvents(t.Context(), "r1", lease.Token, deltas("r1", seq, seq)))
	}
	require.NotNil(t, a.tails.get("r1").rows, "a remembers the segment")
	_, err = b.ClaimRun(t.Context(), "r1", "b", time.Minute)
	require.ErrorIs(t, err, runtime.ErrLeaseHeld)
	require.NoError(t, a.ReleaseLease(t.Context(), lease))
	// Releasing moved the segment into events; start another.
	lease, err = a.ClaimRun(t.Context(), "r1", "a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.AppendEvents(t.Context(), "r1", lease.Token, deltas("r1", 4, 4)))
	require.NoError(t, a.AppendEvents(t.Context(), "r1", lease.Token, deltas("r1", 5, 5)))
	require.NotNil(t, a.tails.get("r1").rows)
	// b takes the run over once a's lease is gone (a crashed, say).
	_, err = b.w.Exec(`UPDATE runs SET lease_expires_at = 0 WHERE id = 'r1'`)
	require.NoError(t, err)
	taken, err := b.ClaimRun(t.Context(), "r1", "b", time.Minute)
	require.NoError(t, err)
	require.Greater(t, taken.Token, lease.Token)
	require.Equal(t, taken.Token, count(t, a, `SELECT token FROM run_tails WHERE run_id = 'r1'`))
	err = a.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "r1", Token: lease.Token, Events: deltas("r1", 6, 6)}})
	require.ErrorIs(t, err, runtime.ErrFenced)
	requireLog(t, b, "r1", 5)
	require.NoError(t, b.AppendEvents(t.Context(), "r1", taken.Token, deltas("r1", 6, 6)))
	requireLog(t, b, "r1", 6)
}

// A file of schema version 5 or 7 with a segment open in the tail of
// those versions, a row per event (a server killed while its runs
// streamed), opens at the current version: the migration to pages moves
// the segment into events, the log stays whole, and the store grows new
// segments under the tail's epoch.
func TestTailUpgradeWithAnOpenSegment(t *testing.T) {
	t.Parallel()
	for _, version := range []int{5, 7} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			s, err := Open(t.Context(), Config{Path: path})
			require.NoError(t, err)
			tailRun(t, s, "r1")
			appendDeltas(t, s, "r1", 1, 30, 10)
			require.Equal(t, int64(1), count(t, s, `SELECT tail_from FROM run_tails WHERE run_id = 'r1'`))
			// Back to the row tail, as a server of that version left the
			// file: r1's 30 events are rows 1 to 30.
			require.Equal(t, 4, migrations[3].Version)
			rowTail, _, _ := strings.Cut(migrations[3].SQL, "CREATE TABLE run_tails") // version 4's event_tail
			steps := []string{`DROP TABLE event_tail`, rowTail}
			for seq := 1; seq <= 30; seq++ {
				steps = append(steps, fmt.Sprintf(`INSERT INTO event_tail (id, run_id, seq, type, node_id, attempt, at, data)
VALUES (%d, 'r1', %d, '%s', 'agent', 1, 0, '{"text":"w"}')`, seq, seq, deltaType))
			}
			if version == 5 {
				steps = append(steps, `DROP TRIGGER tail_epoch_claim`, `DROP TRIGGER tail_epoch_grow`,
					`DROP TRIGGER tail_epoch_end`, `DROP TABLE tail_epoch`, `DROP TABLE event_chunks`)
			}
			steps = append(steps, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version > %d`, version),
				`UPDATE run_tails SET last_seq = 30`)
			for _, q := range steps {
				_, err := s.w.Exec(q)
				require.NoError(t, err, q)
			}
			require.NoError(t, s.Close())

			s, err = Open(t.Context(), Config{Path: path})
			require.NoError(t, err)
			defer s.Close()
			require.Equal(t, int64(SchemaVersion()), count(t, s, `SELECT max(version) FROM schema_migrations`))
			require.Zero(t, count(t, s, `SELECT count(*) FROM run_tails`))
			require.Equal(t, int64(30), compacted(t, s, "r1"))
			requireLog(t, s, "r1", 30)
			appendDeltas(t, s, "r1", 31, 50, 5)
			require.Equal(t, int64(35), count(t, s, `SELECT last_seq FROM run_tails WHERE run_id = 'r1'`))
			requireLog(t, s, "r1", 50)
		})
	}
}

// A streaming run's segment is remembered in one place: each commit's
// value replaces it there, and the transaction's own goes back to the free
// list; a refused append leaves it as it was.
func TestTailSegmentIsUpdatedInPlace(t *testing.T) {
	t.Parallel()
	s := oneStore(t)
	tailRun(t, s, "r1")
	appendDeltas(t, s, "r1", 1, 3, 3)
	s.tails.mu.Lock()
	first := s.tails.segs["r1"]
	s.tails.mu.Unlock()
	require.NotNil(t, first)
	appendDeltas(t, s, "r1", 4, 12, 3)
	s.tails.mu.Lock()
	require.Same(t, first, s.tails.segs["r1"])
	free := len(s.tails.free)
	s.tails.mu.Unlock()
	require.Positive(t, free, "the transactions' segments went back to the free list")
	require.Equal(t, int64(12), s.tails.get("r1").last())

	// One transaction: r1's append is good, r2's is refused, so r1's
	// does not commit either.
	tailRun(t, s, "r2")
	err := s.WriteBatches(t.Context(), []runtime.WriteBatch{
		{RunID: "r1", Events: deltas("r1", 13, 15)},
		{RunID: "r2", Events: deltas("r2", 5, 6)},
	})
	require.ErrorIs(t, err, runtime.ErrSeqConflict)
	require.Equal(t, int64(12), s.tails.get("r1").last(), "the refused transaction changed nothing")
	s.tails.mu.Lock()
	require.Same(t, first, s.tails.segs["r1"])
	require.Len(t, s.tails.free, free, "the refused transaction's segment went back to the free list")
	s.tails.mu.Unlock()
	appendDeltas(t, s, "r1", 13, 15, 3)
	requireLog(t, s, "r1", 15)
}

// A truncation deletes at most 4 × truncateEvery rows: the rows an old
// segment held back go a few truncations at a time once it moves, not in
// one statement that holds the writer.
func TestTailTruncationIsBounded(t *testing.T) {
	s := slowAndBusy(t, pinRows, 400)
	require.Equal(t, int64(1), count(t, s, `SELECT min(id) FROM event_tail`), "slow's segment holds the tail")

	r, err := s.GetRun(t.Context(), "slow")
	require.NoError(t, err)
	r.Status = runtime.RunCompleted
	require.NoError(t, s.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "slow", Finish: r}}))
	low := count(t, s, `SELECT min(tail_from) FROM run_tails`) // busy's segment, now the oldest
	require.Greater(t, low, int64(1+4*16), "more rows below it than one truncation deletes")

	appendDeltas(t, s, "busy", 401, 416, 4) // 16 rows: one truncation
	first := count(t, s, `SELECT min(id) FROM event_tail`)
	require.Greater(t, first, int64(1), "the truncation deleted rows")
	require.LessOrEqual(t, first, int64(1+4*16), "one truncation deleted at most 4 × truncateEvery rows")
	last := int64(416)
	for count(t, s, `SELECT min(id) FROM event_tail`) < low {
		require.Less(t, last, int64(1000), "the truncations never caught up")
		appendDeltas(t, s, "busy", last+1, last+16, 4)
		last += 16
	}
	requireLog(t, s, "slow", 2)
	requireLog(t, s, "busy", last)
}

// A run whose segment a compaction began anew, and that then ends before
// appending again, ends its log at the compaction's last seq: the record
// takes it from run_tails as the row goes.
func TestTailEmptySegmentEnds(t *testing.T) {
	t.Parallel()
	s := oneStore(t)
	tailRun(t, s, "r1")
	appendDeltas(t, s, "r1", 1, 70, 10) // compacts at 64: the segment begins anew, empty
	require.Equal(t, int64(1), count(t, s, `SELECT count(*) FROM run_tails WHERE run_id = 'r1'`))
	r, err := s.GetRun(t.Context(), "r1")
	require.NoError(t, err)
	r.Status = runtime.RunCompleted
	require.NoError(t, s.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "r1", Finish: r}}))
	require.Zero(t, count(t, s, `SELECT count(*) FROM run_tails`))
	require.Equal(t, int64(70), count(t, s, `SELECT last_seq FROM runs WHERE id = 'r1'`))
	requireLog(t, s, "r1", 70)
}

// A group commit of several runs writes one page that they share, so a
// segment may begin inside a page: another store reads each run's
// events out of the shared pages, a truncation keeps the page that holds
// the oldest segment's first row, and Open moves segments that begin
// inside pages into events.
func TestTailSegmentsShareAPage(t *testing.T) {
	every := truncateEvery
	t.Cleanup(func() { truncateEvery = every })
	truncateEvery = 16
	path, a, b := twoStores(t)
	runs := []string{"ra", "rb", "rc"}
	for _, id := range runs {
		tailRun(t, a, id)
	}
	// rb joins at the second commit, so its segment begins at the second
	// event of a page.
	commit := func(s *Store, seqs map[string][2]int64) {
		t.Helper()
		var batches []runtime.WriteBatch
		for _, id := range runs {
			if r, ok := seqs[id]; ok {
				batches = append(batches, runtime.WriteBatch{RunID: id, Events: deltas(id, r[0], r[1])})
			}
		}
		require.NoError(t, s.WriteBatches(t.Context(), batches))
	}
	commit(a, map[string][2]int64{"ra": {1, 1}, "rc": {1, 1}})
	for seq := int64(2); seq <= 10; seq++ {
		commit(a, map[string][2]int64{"ra": {seq, seq}, "rb": {seq - 1, seq - 1}, "rc": {seq, seq}})
	}
	require.Equal(t, int64(10), count(t, a, `SELECT count(*) FROM event_tail`), "a page a commit")
	rbFrom := count(t, a, `SELECT tail_from FROM run_tails WHERE run_id = 'rb'`)
	require.Equal(t, int64(4), rbFrom, "rb's segment begins at the second event of the second page")
	require.Equal(t, int64(3), count(t, a, `SELECT id FROM event_tail WHERE id <= ? ORDER BY id DESC LIMIT 1`, rbFrom))

	// b remembers none of them: it reads and continues them from the pages.
	requireLog(t, b, "ra", 10)
	requireLog(t, b, "rb", 9)
	requireLog(t, b, "rc", 10)
	r, err := b.GetRun(t.Context(), "rb")
	require.NoError(t, err)
	require.Equal(t, int64(9), r.LastSeq, "the last seq read from the pages")
	commit(b, map[string][2]int64{"rb": {10, 12}, "rc": {11, 11}})
	requireLog(t, a, "rb", 12)

	// ra ends; rb's segment, which begins inside the second page, is the
	// oldest: truncations delete the first page only.
	fin, err := a.GetRun(t.Context(), "ra")
	require.NoError(t, err)
	fin.Status = runtime.RunCompleted
	require.NoError(t, a.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "ra", Finish: fin}}))
	for seq := int64(12); seq <= 20; seq++ {
		commit(a, map[string][2]int64{"rc": {seq, seq}})
	}
	appendDeltas(t, a, "rc", 21, 100, 2) // truncations: 16 rows each
	require.Equal(t, int64(3), count(t, a, `SELECT min(id) FROM event_tail`), "the page that holds rb's first row stays")
	requireLog(t, b, "rb", 12)
	requireLog(t, b, "rc", 100)

	// Opening the file moves both segments into events.
	c := reopen(t, path)
	require.Zero(t, tailEvents(t, c))
	requireCompacted(t, c, map[string]int64{"rb": 12, "rc": 100})
	requireLog(t, c, "rb", 12)
	requireLog(t, c, "rc", 100)
	requireLog(t, c, "ra", 10)
}

// A page this store did not write, or one cut short, is refused, not
// read as events.
func TestDecodePageRefusesBadPages(t *testing.T) {
	evs := deltas("r1", 1, 2)
	rows := []eventRow{{id: 7, ev: &evs[0]}, {id: 8, ev: &evs[1]}}
	for i := range evs {
		evs[i].Data = json.RawMessage(`{"text":"w"}`)
	}
	page := appendPage(nil, rows)
	var ids []int64
	require.NoError(t, decodePage(page, 7, allEvents, func(id int64, run []byte, e *runtime.Event) error {
		require.Equal(t, "r1", string(run))
		require.Equal(t, id-6, e.Seq)
		ids = append(ids, id)
		return nil
	}))
	require.Equal(t, []int64{7, 8}, ids)
	none := func(int64, []byte, *runtime.Event) error { return nil }
	// A page is checked whole, also where its events are read past.
	for _, want := range []func(int64, []byte) bool{allEvents, noEvents} {
		for cut := 1; cut < len(page); cut++ {
			if err := decodePage(page[:cut], 7, want, none); err != nil {
				require.ErrorIs(t, err, errBadChunk, "cut at %d", cut)
			}
		}
		require.ErrorIs(t, decodePage(page[:len(page)-1], 7, want, none), errBadChunk)
		require.ErrorIs(t, decodePage(append([]byte{2}, page[1:]...), 7, want, none), errBadChunk)
		require.ErrorIs(t, decodePage(nil, 7, want, none), errBadChunk)
	}
}

func allEvents(int64, []byte) bool { return true }

func noEvents(int64, []byte) bool { return false }

// Reading one run's segment from pages that a hundred runs share builds
// that run's events and reads past the others without a string each
// (their chats differ from one event to the next, as on a busy server):
// the allocations are the segment's, not the pages'.
func TestReadingASegmentReadsPastOtherRuns(t *testing.T) {
	var rows []eventRow
	for seq := int64(1); seq <= 10; seq++ {
		for r := range 100 {
			ev := deltas(fmt.Sprintf("run-%03d", r), seq, seq)[0]
			ev.ChatID = fmt.Sprintf("chat-%03d", r)
			ev.Data = json.RawMessage(`{"text":"w"}`)
			rows = append(rows, eventRow{id: int64(len(rows) + 1), ev: &ev})
		}
	}
	page := appendPage(nil, rows)
	var got []runtime.Event
	read := func() {
		got = got[:0]
		require.NoError(t, decodePage(page, 1, func(_ int64, run []byte) bool { return string(run) == "run-042" },
			func(_ int64, _ []byte, e *runtime.Event) error {
				got = append(got, *e)
				return nil
			}))
	}
	allocs := testing.AllocsPerRun(20, read)
	require.Len(t, got, 10)
	for i, e := range got {
		require.Equal(t, int64(i+1), e.Seq)
		require.Equal(t, "chat-042", e.ChatID)
		require.Equal(t, runtime.EventType(deltaType), e.Type)
	}
	require.Less(t, allocs, 50.0, "1,000 events read, 10 built")
}

// A transaction that keeps more than maxPageEvents events in the tail
// writes them as several pages, numbered on from one another, which read
// back as the runs' logs.
func TestTailLargeCommitWritesSeveralPages(t *testing.T) {
	perPage := maxPageEvents
	t.Cleanup(func() { maxPageEvents = perPage })
	maxPageEvents = 4
	path, a, b := twoStores(t)
	for _, id := range []string{"ra", "rb"} {
		tailRun(t, a, id)
	}
	require.NoError(t, a.WriteBatches(t.Context(), []runtime.WriteBatch{
		{RunID: "ra", Events: deltas("ra", 1, 5)}, {RunID: "rb", Events: deltas("rb", 1, 5)}}))
	require.Equal(t, int64(3), count(t, a, `SELECT count(*) FROM event_tail`))
	require.Equal(t, int64(10), tailEvents(t, a))
	require.Equal(t, int64(1+4+4), count(t, a, `SELECT max(id) FROM event_tail`))
	require.NoError(t, a.WriteBatches(t.Context(), []runtime.WriteBatch{{RunID: "rb", Events: deltas("rb", 6, 6)}}))
	require.Equal(t, int64(11), count(t, a, `SELECT max(id) FROM event_tail`), "the next page follows the last")
	requireLog(t, b, "ra", 5)
	requireLog(t, b, "rb", 6)
	requireCompacted(t, reopen(t, path), map[string]int64{"ra": 5, "rb": 6})
}
