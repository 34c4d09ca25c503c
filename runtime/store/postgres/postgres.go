package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"chatgraph/runtime"
)

// Config configures Open.
type Config struct {
	// URL is the connection string (required), for example
	// postgres://chatgraph@db:5432/chatgraph?sslmode=verify-full.
	URL string
	// Schema holds the store's tables; it is created when missing (which
	// needs the CREATE privilege on the database). Default "public".
	Schema string
	// MaxConns bounds the connection pool. Default: pgxpool's (the
	// greater of 4 and the number of CPUs).
	MaxConns int32
	// Logger receives migration messages. Default: discard.
	Logger *slog.Logger
	// Now is the clock leases are measured with: this process's, so the
	// hosts sharing a database need synchronised clocks (NTP) and leases
	// far longer than their skew. Fencing holds whatever the clocks say.
	// Default time.Now.
	Now func() time.Time
}

// Store is a runtime.Store, runtime.Leaser, runtime.Inspector,
// runtime.BatchWriter and runtime.EffectLedger in a Postgres schema, shared
// by every server process of a deployment. Each write is one statement that checks the fencing
// token itself (a conditional UPDATE, or an INSERT from a row-locked
// SELECT), so it is atomic and costs one round trip. A Store is safe for
// concurrent use; the caller closes it.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	ident  string // schema, quoted
	log    *slog.Logger
	now    func() time.Time
	q      queries
}

var (
	_ runtime.Store          = (*Store)(nil)
	_ runtime.Leaser         = (*Store)(nil)
	_ runtime.Inspector      = (*Store)(nil)
	_ runtime.BatchWriter    = (*Store)(nil)
	_ runtime.JSONEventStore = (*Store)(nil)
	_ runtime.EffectLedger   = (*Store)(nil)
)

// Open connects to cfg.URL, creates cfg.Schema when missing and applies
// any missing schema migrations. Several processes may Open one schema at
// once: migrations take turns under an advisory lock.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("postgres store: Config.URL is required")
	}
	schema := cfg.Schema
	if schema == "" {
		schema = "public"
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	ident := pgx.Identifier{schema}.Sanitize()
	// Queries name the schema themselves; search_path serves ad-hoc SQL
	// on these connections.
	pcfg.ConnConfig.RuntimeParams["search_path"] = ident
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "chatgraph"
	}
	// Every connection writes U+0000 as U+FFFD (nul.go).
	pcfg.ConnConfig.Tracer = nulSafeArgs{}
	pcfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		nulSafeJSONB(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	s := &Store{pool: pool, schema: schema, ident: ident, log: cfg.Logger, now: cfg.Now, q: newQueries(ident)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: open schema %s: %w", schema, err)
	}
	return s, nil
}

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// Close closes the pool, waiting for connections in use to be returned.
// Calling it again does nothing.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// querier is what *pgxpool.Pool and pgx.Tx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// wrap prefixes err with the operation unless it is one of the sentinels
// callers branch on, whose messages already say what happened.
func wrap(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, runtime.ErrRunNotFound) || errors.Is(err, runtime.ErrFenced) ||
		errors.Is(err, runtime.ErrSeqConflict) || errors.Is(err, runtime.ErrRunExists) || errors.Is(err, runtime.ErrLeaseHeld) {
		return err
	}
	return fmt.Errorf("postgres store: "+format+": %w", append(args, err)...)
}

// --- queries ------------------------------------------------------------

// queries are the store's statements with the schema filled in.
type queries struct {
	createRun, reserveRun, getRun, updateRun, fence   string
	createClaimed                                     string
	exists                                            string
	saveCheckpoint, checkpoints, appendEvents, events string
	lockRuns                                          string
	claim, leaseState, renew, release, expired        string
	claimExpired, owned, renewMany                    string
	listRuns, deleteRun, deleteFinished               string
	putEffect, getEffect, deleteEffects, sweepEffects string
}

const runCols = `id, parent_id, root_id, chat_id, graph_id, plan_version, kind, attrs, entry_node_ids,
	input, options, status, error, interrupts, answers, last_seq, token, created_at, updated_at`

const cpCols = `node_id, status, plan_version, inputs_hash, effect, output, summary, error, error_code, error_trace,
	skip_reason, interrupt, resumes, attempt, attempt_id, replayed, started_at, updated_at, next_attempt_at, token`

// overReservation ends the insert that creates a run: a pending record
// with the id is a reservation, replaced whole (every column, the lease
// with none); any other record stays and the insert changes no row
// (ErrRunExists). Two creations racing over one reservation serialise on
// its row: the second sees the first's status and changes nothing. A
// reservation has no checkpoints or events (nothing writes a run before
// it is created), so there are none to replace.
const overReservation = `ON CONFLICT (id) DO UPDATE SET
	parent_id = EXCLUDED.parent_id, root_id = EXCLUDED.root_id, chat_id = EXCLUDED.chat_id,
	graph_id = EXCLUDED.graph_id, plan_version = EXCLUDED.plan_version, kind = EXCLUDED.kind,
	attrs = EXCLUDED.attrs, entry_node_ids = EXCLUDED.entry_node_ids, input = EXCLUDED.input,
	options = EXCLUDED.options, status = EXCLUDED.status, error = EXCLUDED.error,
	interrupts = EXCLUDED.interrupts, answers = EXCLUDED.answers, last_seq = EXCLUDED.last_seq,
	token = EXCLUDED.token, lease_owner = EXCLUDED.lease_owner, lease_expires_at = EXCLUDED.lease_expires_at,
	created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
WHERE runs.status = 'pending'`

func newQueries(ident string) queries {
	r := strings.NewReplacer("{s}", ident)
	insertRun := r.Replace(`INSERT INTO {s}.runs (id, parent_id, root_id, chat_id, graph_id, plan_version, kind,
	attrs, entry_node_ids, input, options, status, error, interrupts, answers, created_at, updated_at, last_seq, token)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
`)
	return queries{
		createRun: insertRun + overReservation,
		createClaimed: r.Replace(`INSERT INTO {s}.runs (id, parent_id, root_id, chat_id, graph_id, plan_version, kind,
	attrs, entry_node_ids, input, options, status, error, interrupts, answers, created_at, updated_at, last_seq, token,
	lease_owner, lease_expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
` + overReservation),
		reserveRun: insertRun + `ON CONFLICT (id) DO NOTHING`,
		getRun:     r.Replace(`SELECT ` + runCols + ` FROM {s}.runs WHERE id = $1`),
		updateRun: r.Replace(`UPDATE {s}.runs SET parent_id = $1, root_id = $2, chat_id = $3, graph_id = $4,
	plan_version = $5, kind = $6, attrs = $7, entry_node_ids = $8, input = $9, options = $10, status = $11,
	error = $12, interrupts = $13, answers = $14, created_at = $15, updated_at = $16, token = $17
WHERE id = $18 AND token <= $17`),
		fence:  r.Replace(`SELECT token, last_seq FROM {s}.runs WHERE id = $1`),
		exists: r.Replace(`SELECT EXISTS (SELECT 1 FROM {s}.runs WHERE id = $1)`),
		// The run row is share-locked: a concurrent claim (which updates it)
		// either commits first — and the token check sees its new token —
		// or waits for this write to commit.
		saveCheckpoint: r.Replace(`WITH r AS (SELECT id FROM {s}.runs WHERE id = $1 AND token <= $21 FOR SHARE)
INSERT INTO {s}.checkpoints (run_id, ` + cpCols + `)
SELECT r.id, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::json, $8::text, $9::text, $10::text,
	$11::text, $12::text, $13::json, $14::integer, $15::integer, $16::text, $17::boolean, $18::timestamptz,
	$19::timestamptz, $20::timestamptz, $21::bigint
FROM r
ON CONFLICT (run_id, node_id) DO UPDATE SET
	status = EXCLUDED.status, plan_version = EXCLUDED.plan_version, inputs_hash = EXCLUDED.inputs_hash,
	effect = EXCLUDED.effect, output = EXCLUDED.output, summary = EXCLUDED.summary, error = EXCLUDED.error,
	error_code = EXCLUDED.error_code, error_trace = EXCLUDED.error_trace, skip_reason = EXCLUDED.skip_reason,
	interrupt = EXCLUDED.interrupt, resumes = EXCLUDED.resumes, attempt = EXCLUDED.attempt,
	attempt_id = EXCLUDED.attempt_id, replayed = EXCLUDED.replayed, started_at = EXCLUDED.started_at,
	updated_at = EXCLUDED.updated_at, next_attempt_at = EXCLUDED.next_attempt_at, token = EXCLUDED.token`),
		checkpoints: r.Replace(`SELECT ` + cpCols + ` FROM {s}.checkpoints WHERE run_id = $1 ORDER BY ord`),
		// Moving last_seq (only if the token is current and the log ends
		// where the batch starts) and inserting the events is one statement.
		appendEvents: r.Replace(`WITH adv AS (
	UPDATE {s}.runs SET last_seq = $4 WHERE id = $1 AND token <= $2 AND last_seq = $3 RETURNING id
)
INSERT INTO {s}.events (run_id, seq, type, chat_id, node_id, attempt, at, data)
SELECT adv.id, e.seq, e.type, e.chat_id, e.node_id, e.attempt, e.at, e.data
FROM adv, unnest($5::bigint[], $6::text[], $7::text[], $8::text[], $9::integer[], $10::timestamptz[], $11::json[])
	AS e (seq, type, chat_id, node_id, attempt, at, data)`),
		events: r.Replace(`SELECT seq, type, chat_id, node_id, attempt, at, data FROM {s}.events
WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`),
		lockRuns: r.Replace(`SELECT id, token, last_seq FROM {s}.runs WHERE id = ANY($1) ORDER BY id FOR UPDATE`),
		claim: r.Replace(`UPDATE {s}.runs SET token = token + 1, lease_owner = $2, lease_expires_at = $3
WHERE id = $1 AND (lease_owner = '' OR lease_owner = $2 OR lease_expires_at IS NULL OR lease_expires_at <= $4)
RETURNING token`),
		leaseState: r.Replace(`SELECT token, lease_owner, lease_expires_at FROM {s}.runs WHERE id = $1`),
		renew: r.Replace(`UPDATE {s}.runs SET lease_expires_at = $4
WHERE id = $1 AND token = $2 AND lease_owner = $3 AND lease_owner <> ''`),
		// renewMany locks the rows in id order, as lockRuns does, so that
		// it never deadlocks with a batch write.
		renewMany: r.Replace(`WITH l AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) AS l (id, token, owner)),
held AS (SELECT r.id FROM {s}.runs r JOIN l ON r.id = l.id AND r.token = l.token AND r.lease_owner = l.owner
	WHERE r.lease_owner <> '' ORDER BY r.id FOR UPDATE OF r)
UPDATE {s}.runs SET lease_expires_at = $4 FROM held WHERE {s}.runs.id = held.id
RETURNING {s}.runs.id, {s}.runs.token, {s}.runs.lease_owner`),
		release: r.Replace(`UPDATE {s}.runs SET lease_owner = '', lease_expires_at = NULL
WHERE id = $1 AND token = $2 AND lease_owner IN ($3, '')`),
		claimExpired: r.Replace(`UPDATE {s}.runs SET token = token + 1, lease_owner = $1, lease_expires_at = $2
WHERE id IN (SELECT id FROM {s}.runs
	WHERE status = 'running' AND (lease_owner = '' OR lease_expires_at IS NULL OR lease_expires_at <= $3)
	ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)
RETURNING id, token`),
		owned: r.Replace(`SELECT id FROM {s}.runs
WHERE status = 'running' AND lease_owner = $1 AND lease_owner <> ''
ORDER BY created_at, id LIMIT $2`),
		expired: r.Replace(`SELECT id FROM {s}.runs
WHERE status = 'running' AND (lease_owner = '' OR lease_expires_at IS NULL OR lease_expires_at <= $1)
ORDER BY created_at, id LIMIT $2`),
		listRuns:  r.Replace(`SELECT ` + runCols + ` FROM {s}.runs`),
		deleteRun: r.Replace(`DELETE FROM {s}.runs WHERE id = $1`),
		deleteFinished: r.Replace(`DELETE FROM {s}.runs WHERE id IN (
	SELECT id FROM {s}.runs WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at < $1
	LIMIT $2 FOR UPDATE SKIP LOCKED)`),
		putEffect: r.Replace(`WITH ins AS (
	INSERT INTO {s}.effects (` + effectCols + `) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (key) DO NOTHING
	RETURNING ` + effectCols + `
)
SELECT ` + effectCols + ` FROM ins
UNION ALL
SELECT ` + effectCols + ` FROM {s}.effects WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM ins)`),
		getEffect:     r.Replace(`SELECT ` + effectCols + ` FROM {s}.effects WHERE key = $1`),
		deleteEffects: r.Replace(`DELETE FROM {s}.effects WHERE root_run_id = $1`),
		// One chunk of lineages (in root_run_id order, after the cursor
		// $1): those without a run lose their effects. It returns the
		// chunk's size and last lineage (the next cursor).
		sweepEffects: r.Replace(`WITH l AS (
	SELECT DISTINCT root_run_id FROM {s}.effects WHERE root_run_id > $1 ORDER BY root_run_id LIMIT $2
), gone AS (
	DELETE FROM {s}.effects e USING l
	WHERE e.root_run_id = l.root_run_id
		AND NOT EXISTS (SELECT 1 FROM {s}.runs r WHERE r.root_id = l.root_run_id)
		AND NOT EXISTS (SELECT 1 FROM {s}.runs r WHERE r.id = l.root_run_id)
)
SELECT count(*)::int, max(root_run_id) FROM l`),
	}
}
