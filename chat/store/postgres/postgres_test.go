package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/chat/store/postgres"
	"chatgraph/chat/store/storetest"
	"chatgraph/internal/pgtest"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
)

// open returns a chat store and its run store on a fresh schema, dropped
// when the test ends.
func open(t *testing.T) (chat.Store, runtime.Store) {
	return openIn(t, pgtest.Schema(t, "chatstoretest"))
}

// openIn returns a chat store and its run store, with a pool of their
// own, on schema: what another process on the database sees.
func openIn(t *testing.T, schema string) (chat.Store, runtime.Store) {
	runs, err := rpostgres.Open(t.Context(), rpostgres.Config{URL: pgtest.URL(), Schema: schema, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	chats, err := postgres.Open(t.Context(), runs)
	require.NoError(t, err)
	return chats, runs
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open, storetest.ReplacesNUL(), storetest.Durable(func(t *testing.T, _ chat.Store, runs runtime.Store) (chat.Store, runtime.Store) {
		return openIn(t, runs.(*rpostgres.Store).Schema())
	}), storetest.Expiry(postgres.SetNow, postgres.Tombstones))
}

// A schema whose chat tables predate versioned migrations (the tables of
// versions 1 and 2, no chat_schema_migrations) is adopted: its chats are
// kept and gain an owner; opening again changes nothing; a schema newer
// than the build is refused.
func TestMigrationsAdoptUnversionedTables(t *testing.T) {
	schema := pgtest.Schema(t, "chatstoretest")
	ident := pgx.Identifier{schema}.Sanitize()
	ctx := t.Context()
	runs, err := rpostgres.Open(ctx, rpostgres.Config{URL: pgtest.URL(), Schema: schema, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, runs.Close()) })
	pgtest.Exec(t, `SET search_path TO `+ident+`;
CREATE TABLE chats (id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
	active_leaf_id TEXT NOT NULL DEFAULT '', created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL);
INSERT INTO chats (id, graph_id, created_at, updated_at) VALUES ('old', 'g1', now(), now());`)

	for i := range 2 {
		chats, err := postgres.Open(ctx, runs)
		require.NoError(t, err)
		c, err := chats.GetChat(ctx, "old")
		require.NoError(t, err)
		require.Empty(t, c.Owner)
		require.NoError(t, chats.CreateChat(ctx, &chat.Chat{ID: fmt.Sprintf("new%d", i), GraphID: "g1", Owner: fmt.Sprintf("client%d", i)}, 1),
			"the chat of no owner is not counted")
	}
	var n, version int
	require.NoError(t, runs.Pool().QueryRow(ctx, `SELECT count(*), max(version) FROM chat_schema_migrations`).Scan(&n, &version))
	require.Equal(t, postgres.SchemaVersion(), n, "one row per migration")
	require.Equal(t, postgres.SchemaVersion(), version)

	_, err = runs.Pool().Exec(ctx, `INSERT INTO chat_schema_migrations (version, name) VALUES ($1, 'future')`, postgres.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, runs)
	require.ErrorContains(t, err, "newer than this build knows")
}

// holdInserts makes the inserts into table whose row meets cond (SQL on
// NEW) wait, in a BEFORE INSERT trigger, until release: they wait on the
// advisory lock gate, which the test holds on a connection of its own.
func holdInserts(t *testing.T, pool *pgxpool.Pool, table, cond string) (gate int64, release func()) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	gate = int64(binary.BigEndian.Uint32(b)) + 1
	_, err := pool.Exec(t.Context(), fmt.Sprintf(`CREATE FUNCTION hold_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF %s THEN PERFORM pg_advisory_xact_lock_shared(%d); END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER hold_insert BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION hold_insert();`, cond, gate, table),
		pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	holder, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	t.Cleanup(holder.Release)
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, gate)
	require.NoError(t, err)
	return gate, func() {
		_, err := holder.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, gate)
		require.NoError(t, err)
	}
}

// Two creations for one owner at its bound take turns on the owner's
// lock: the second counts the first's chat even while the first has not
// committed yet. Deterministic: a trigger holds the first insert (on a
// lock the test keeps) until the second creation is waiting too — on the
// owner's lock, or, were it missing, on the same trigger after counting
// too few chats.
func TestChatsPerOwnerTakeTurns(t *testing.T) {
	cs, runs := open(t)
	ctx := t.Context()
	pool := runs.(*rpostgres.Store).Pool()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	owner := "gated_" + hex.EncodeToString(b)
	gate, release := holdInserts(t, pool, "chats", "NEW.owner = '"+owner+"'")

	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			errs <- cs.CreateChat(ctx, &chat.Chat{ID: fmt.Sprintf("%s_%d", owner, i), GraphID: "g1", Owner: owner}, 1)
		}()
	}
	// Both wait: one on the gate, the other on the owner's lock (or on the
	// gate too, were the creations not taking turns).
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
	AND ((classid::bigint << 32) | objid::bigint) IN ($1, $2)`, gate, postgres.OwnerLockKey(runs.(*rpostgres.Store).Schema(), owner)).Scan(&waiting)
		return err == nil && waiting == 2
	}, 10*time.Second, 5*time.Millisecond, "both creations wait")
	release()

	made, refused := 0, 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			made++
		case errors.Is(err, chat.ErrTooManyChats):
			refused++
		default:
			t.Fatalf("create: %v", err)
		}
	}
	require.Equal(t, 1, made, "the bound holds")
	require.Equal(t, 1, refused)
}

// A page of messages never skips one that commits late: two turns of one
// chat commit their messages in seq order. Deterministic: a trigger holds
// the first turn's insert (its seq taken) on a lock the test keeps, while
// the second turn runs — into the chat's row lock, or, were the turns not
// ordered, to its commit with a higher seq; a page read then must not
// carry a cursor past the held message.
func TestMessagePagesSkipNothing(t *testing.T) {
	cs, runs := open(t)
	ctx := t.Context()
	pool := runs.(*rpostgres.Store).Pool()
	require.NoError(t, cs.CreateChat(ctx, &chat.Chat{ID: "c1", GraphID: "g1"}, 0))
	gate, release := holdInserts(t, pool, "chat_messages", "NEW.id = 'held'")

	turn := func(runID, msgID string) chat.Turn {
		now := time.Now()
		return chat.Turn{ChatID: "c1", ActiveLeafID: msgID,
			Messages: []*chat.Message{{ID: msgID, Role: chat.RoleUser, Content: msgID, Status: chat.StatusCompleted}},
			Run: &runtime.RunRecord{ID: runID, RootID: runID, ChatID: "c1", GraphID: "g1", Status: runtime.RunPending,
				CreatedAt: now, UpdatedAt: now}}
	}
	first := make(chan error, 1)
	go func() { first <- cs.BeginTurn(ctx, turn("r1", "held")) }()
	var heldPID int32
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
	AND ((classid::bigint << 32) | objid::bigint) = $1`, gate).Scan(&heldPID)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the first turn waits in its insert")
	second := make(chan error, 1)
	go func() { second <- cs.BeginTurn(ctx, turn("r2", "later")) }()
	secondDone, secondErr := false, error(nil)
	require.Eventually(t, func() bool {
		select {
		case secondErr = <-second:
			secondDone = true
			return true
		default:
		}
		var blocked int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, heldPID).Scan(&blocked)
		return err == nil && blocked > 0
	}, 10*time.Second, 5*time.Millisecond, "the second turn waits for the first, or commits")

	page, err := cs.ListMessages(ctx, "c1", 0, 0)
	require.NoError(t, err)
	var cursor int64
	for _, m := range page {
		cursor = m.Seq
	}
	release()
	require.NoError(t, <-first)
	if !secondDone {
		secondErr = <-second
	}
	require.NoError(t, secondErr)
	rest, err := cs.ListMessages(ctx, "c1", cursor, 0)
	require.NoError(t, err)
	var ids []string
	for _, m := range append(page, rest...) {
		ids = append(ids, m.ID)
	}
	require.ElementsMatch(t, []string{"held", "later"}, ids, "the pages hold every message once")
}

// Advisory locks belong to the database, so the chat store keys its own
// by schema: while a store holds one of its locks (its migration's, the
// history migration's, a chat owner's) in an open transaction, a store
// in another schema of the same database does the same work without
// waiting. Deterministic: the first store's transaction, past its
// advisory lock, waits on a table the test locks; the second store's
// call must then end (within a bound) while the first still waits.
func TestAdvisoryLocksPerSchema(t *testing.T) {
	rewrite := func(chat.InlineRun, []*chat.Message) (any, bool) { return nil, false }
	for _, tc := range []struct {
		name  string
		table string // the table the held transaction waits on, past its lock
		call  func(ctx context.Context, cs *postgres.Store, runs *rpostgres.Store) error
	}{
		{"migration", "chat_schema_migrations", func(ctx context.Context, _ *postgres.Store, runs *rpostgres.Store) error {
			_, err := postgres.Open(ctx, runs)
			return err
		}},
		{"history migration", "chat_data_migrations", func(ctx context.Context, cs *postgres.Store, _ *rpostgres.Store) error {
			_, err := cs.MigrateInlineHistory(ctx, "", 10, rewrite)
			return err
		}},
		{"chat owner", "chats", func(ctx context.Context, cs *postgres.Store, _ *rpostgres.Store) error {
			return cs.CreateChat(ctx, &chat.Chat{ID: "c_" + rand.Text(), GraphID: "g1", Owner: "shared-client"}, 5)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			pair := func() (*postgres.Store, *rpostgres.Store) {
				cs, runs := open(t)
				return cs.(*postgres.Store), runs.(*rpostgres.Store)
			}
			heldCS, heldRuns := pair()
			otherCS, otherRuns := pair()
			table := heldRuns.Table(tc.table)

			// The test's transaction locks the held store's table.
			locker, err := heldRuns.Pool().Begin(ctx)
			require.NoError(t, err)
			defer locker.Rollback(ctx) //nolint:errcheck // after the release it is a no-op
			_, err = locker.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
			require.NoError(t, err)

			held := make(chan error, 1)
			go func() { held <- tc.call(ctx, heldCS, heldRuns) }()
			require.Eventually(t, func() bool {
				// A backend waits on the table while holding an advisory lock.
				var n int
				err := heldRuns.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_locks a WHERE a.locktype = 'advisory' AND a.granted
	AND a.pid IN (SELECT pid FROM pg_locks WHERE locktype = 'relation' AND relation = $1::regclass AND NOT granted)`,
					table).Scan(&n)
				return err == nil && n > 0
			}, 10*time.Second, 5*time.Millisecond, "the held store's call waits past its advisory lock")

			bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, tc.call(bounded, otherCS, otherRuns), "the other schema does not wait on the held lock")
			select {
			case err := <-held:
				t.Fatalf("the held call ended before its table was released: %v", err)
			default:
			}

			require.NoError(t, locker.Rollback(ctx))
			require.NoError(t, <-held)
		})
	}
}
