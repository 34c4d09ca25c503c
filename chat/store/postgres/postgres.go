package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"chatgraph/chat"
	"chatgraph/runtime"
	rpostgres "chatgraph/runtime/store/postgres"
)

// Store is the Postgres chat.Store: its tables live in the run store's
// schema and use its connection pool, so a turn's messages and its run's
// reservation commit in one transaction. Safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	runs   *rpostgres.Store
	schema string           // the run store's schema, which keys the advisory locks
	clock  func() time.Time // time.Now; a test's clock (export_test.go's SetNow)
}

var _ chat.Store = (*Store)(nil)

// Open creates the chat tables in the run store's schema when missing,
// applies any missing chat schema migrations (one migrator at a time
// across processes, see migrate) and returns the store. The run store
// must outlive it; Close leaves the pool to the run store.
func Open(ctx context.Context, runs *rpostgres.Store) (*Store, error) {
	if runs == nil {
		return nil, errors.New("chat/store/postgres: a run store is required")
	}
	s := &Store{pool: runs.Pool(), runs: runs, schema: runs.Schema(), clock: time.Now}
	if err := s.migrate(ctx); err != nil {
		return nil, fmt.Errorf("chat/store/postgres: migrate: %w", err)
	}
	return s, nil
}

// lockKey is the advisory lock named by parts (what it serialises, and
// for some whose) in schema (see rpostgres.AdvisoryKey): deployments in
// different schemas of one database never wait on each other.
func lockKey(schema string, parts ...string) int64 {
	return rpostgres.AdvisoryKey("chatgraph/chat/store/postgres", append([]string{schema}, parts...)...)
}

// now is the time the store writes (and dates tombstones by), at the
// microsecond Postgres keeps.
func (s *Store) now() time.Time { return s.clock().UTC().Truncate(time.Microsecond) }

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func affected(tag pgconn.CommandTag, sentinel error, what string) error {
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", sentinel, what)
	}
	return nil
}

func body(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

// CreateGraph implements chat.Store.
func (s *Store) CreateGraph(ctx context.Context, g *chat.Graph) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var version int64
		var deleted bool
		err := tx.QueryRow(ctx, `SELECT plan_version, deleted FROM chat_graphs WHERE id = $1 FOR UPDATE`, g.ID).Scan(&version, &deleted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case !deleted:
			return fmt.Errorf("%w: graph %s exists", chat.ErrConflict, g.ID)
		}
		t := s.now()
		g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, t, t
		_, err = tx.Exec(ctx, `INSERT INTO chat_graphs (id, name, plan_version, body, deleted, created_at, updated_at)
			VALUES ($1, $2, $3, $4, false, $5, $5)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, plan_version = excluded.plan_version, body = excluded.body,
				deleted = false, created_at = excluded.created_at, updated_at = excluded.updated_at`,
			g.ID, g.Name, g.PlanVersion, body(g.Body), t)
		if isUnique(err) {
			return fmt.Errorf("%w: graph %s exists", chat.ErrConflict, g.ID)
		}
		if err != nil {
			return err
		}
		return keepVersion(ctx, tx, g)
	})
}

func keepVersion(ctx context.Context, tx pgx.Tx, g *chat.Graph) error {
	_, err := tx.Exec(ctx, `INSERT INTO chat_graph_versions (id, plan_version, name, body, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id, plan_version) DO UPDATE SET name = excluded.name, body = excluded.body`,
		g.ID, g.PlanVersion, g.Name, body(g.Body), g.UpdatedAt)
	return err
}

func scanGraph(row pgx.Row) (*chat.Graph, error) {
	var g chat.Graph
	var b []byte
	if err := row.Scan(&g.ID, &g.Name, &g.PlanVersion, &b, &g.CreatedAt, &g.UpdatedAt); err != nil {
		return nil, err
	}
	g.Body = json.RawMessage(b)
	g.CreatedAt, g.UpdatedAt = g.CreatedAt.UTC(), g.UpdatedAt.UTC()
	return &g, nil
}

// GetGraph implements chat.Store.
func (s *Store) GetGraph(ctx context.Context, id string) (*chat.Graph, error) {
	g, err := scanGraph(s.pool.QueryRow(ctx, `SELECT id, name, plan_version, body, created_at, updated_at FROM chat_graphs WHERE id = $1 AND NOT deleted`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s", chat.ErrNotFound, id)
	}
	return g, err
}

// GetGraphVersion implements chat.Store.
func (s *Store) GetGraphVersion(ctx context.Context, id string, version int64) (*chat.Graph, error) {
	g, err := scanGraph(s.pool.QueryRow(ctx, `SELECT id, name, plan_version, body, created_at, created_at FROM chat_graph_versions WHERE id = $1 AND plan_version = $2`, id, version))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s version %d", chat.ErrNotFound, id, version)
	}
	return g, err
}

// pageArgs are p's cursor (time, id) and limit (nil: none) as query
// arguments.
func pageArgs(p chat.Page) (at time.Time, id string, limit *int) {
	if p.Limit > 0 {
		limit = &p.Limit
	}
	return p.After.At, p.After.ID, limit
}

// ListGraphs implements chat.Store.
func (s *Store) ListGraphs(ctx context.Context, p chat.Page) ([]*chat.Graph, error) {
	at, id, limit := pageArgs(p)
	rows, err := s.pool.Query(ctx, `SELECT id, name, plan_version, body, created_at, updated_at FROM chat_graphs WHERE NOT deleted
		AND ($1 = '' OR updated_at < $2 OR (updated_at = $2 AND id > $1)) ORDER BY updated_at DESC, id LIMIT $3`, id, at, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Graph, error) { return scanGraph(r) })
}

// GraphsNamed implements chat.Store (the partial index chat_graphs_name).
func (s *Store) GraphsNamed(ctx context.Context, name string, limit int) ([]*chat.Graph, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `SELECT id, name, plan_version, body, created_at, updated_at FROM chat_graphs
		WHERE name = $1 AND NOT deleted ORDER BY updated_at DESC, id LIMIT $2`, name, lim)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Graph, error) { return scanGraph(r) })
}

// UpdateGraph implements chat.Store.
func (s *Store) UpdateGraph(ctx context.Context, g *chat.Graph, ifVersion int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var version int64
		var created time.Time
		err := tx.QueryRow(ctx, `SELECT plan_version, created_at FROM chat_graphs WHERE id = $1 AND NOT deleted FOR UPDATE`, g.ID).Scan(&version, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: graph %s", chat.ErrNotFound, g.ID)
		}
		if err != nil {
			return err
		}
		if ifVersion > 0 && version != ifVersion {
			return fmt.Errorf("%w: graph %s is at planVersion %d, not %d", chat.ErrConflict, g.ID, version, ifVersion)
		}
		t := s.now()
		g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, created.UTC(), t
		if _, err := tx.Exec(ctx, `UPDATE chat_graphs SET name = $1, plan_version = $2, body = $3, updated_at = $4 WHERE id = $5`,
			g.Name, g.PlanVersion, body(g.Body), t, g.ID); err != nil {
			return err
		}
		return keepVersion(ctx, tx, g)
	})
}

// DeleteGraph implements chat.Store.
func (s *Store) DeleteGraph(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE chat_graphs SET deleted = true, body = NULL, updated_at = $1 WHERE id = $2 AND NOT deleted`, s.now(), id)
	if err != nil {
		return err
	}
	return affected(tag, chat.ErrNotFound, "graph "+id)
}

// CreateChat implements chat.Store. A transaction-scoped advisory lock
// on the owner (in this schema, see lockKey) makes its count and the
// insert one step.
func (s *Store) CreateChat(ctx context.Context, c *chat.Chat, maxOwned int) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if c.Owner != "" && maxOwned > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(s.schema, "chat owner", c.Owner)); err != nil {
				return err
			}
			var n, taken int
			if err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id = $2) FROM chats WHERE owner = $1 OR id = $2`,
				c.Owner, c.ID).Scan(&n, &taken); err != nil {
				return err
			}
			if err := chat.CheckOwned(c.ID, n, taken > 0, maxOwned); err != nil {
				return err
			}
		}
		t := s.now()
		c.CreatedAt, c.UpdatedAt = t, t
		_, err := tx.Exec(ctx, `INSERT INTO chats (id, graph_id, title, active_leaf_id, owner, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6)`, c.ID, c.GraphID, c.Title, c.ActiveLeafID, c.Owner, t)
		if isUnique(err) {
			return fmt.Errorf("%w: chat %s exists", chat.ErrConflict, c.ID)
		}
		return err
	})
}

const chatCols = `id, graph_id, title, active_leaf_id, owner, created_at, updated_at`

// scanChat scans a row of chatCols, then, into more, the columns after
// them.
func scanChat(row pgx.Row, more ...any) (*chat.Chat, error) {
	var c chat.Chat
	if err := row.Scan(append([]any{&c.ID, &c.GraphID, &c.Title, &c.ActiveLeafID, &c.Owner, &c.CreatedAt, &c.UpdatedAt}, more...)...); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return &c, nil
}

// GetChat implements chat.Store.
func (s *Store) GetChat(ctx context.Context, id string) (*chat.Chat, error) {
	c, err := scanChat(s.pool.QueryRow(ctx, `SELECT `+chatCols+` FROM chats WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: chat %s", chat.ErrNotFound, id)
	}
	return c, err
}

// chatGraphQuery reads a chat and its live graph, if any, in one
// statement: the chat's columns (chatCols), then the graph's, NULL when
// it is absent or deleted.
var chatGraphQuery = `SELECT c.` + strings.ReplaceAll(chatCols, ", ", ", c.") + `,
	g.id, g.name, g.plan_version, g.body, g.created_at, g.updated_at
FROM chats c LEFT JOIN chat_graphs g ON g.id = c.graph_id AND NOT g.deleted WHERE c.id = $1`

// GetChatGraph implements chat.Store: one round trip where GetChat and
// GetGraph take two.
func (s *Store) GetChatGraph(ctx context.Context, id string) (*chat.Chat, *chat.Graph, error) {
	var gid, gname *string
	var gver *int64
	var gcr, gup *time.Time
	var body []byte
	c, err := scanChat(s.pool.QueryRow(ctx, chatGraphQuery, id), &gid, &gname, &gver, &body, &gcr, &gup)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("%w: chat %s", chat.ErrNotFound, id)
	}
	if err != nil || gid == nil {
		return c, nil, err
	}
	return c, &chat.Graph{ID: *gid, Name: *gname, PlanVersion: *gver, Body: json.RawMessage(body),
		CreatedAt: gcr.UTC(), UpdatedAt: gup.UTC()}, nil
}

// ListChats implements chat.Store.
func (s *Store) ListChats(ctx context.Context, graphID string, p chat.Page) ([]*chat.Chat, error) {
	at, id, limit := pageArgs(p)
	rows, err := s.pool.Query(ctx, `SELECT `+chatCols+` FROM chats
		WHERE ($1 = '' OR graph_id = $1) AND ($2 = '' OR created_at < $3 OR (created_at = $3 AND id > $2))
		ORDER BY created_at DESC, id LIMIT $4`, graphID, id, at, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Chat, error) { return scanChat(r) })
}

// DeleteChat implements chat.Store.
func (s *Store) DeleteChat(ctx context.Context, id string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM chats WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if err := affected(tag, chat.ErrNotFound, "chat "+id); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `DELETE FROM chat_messages WHERE chat_id = $1`, id); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `DELETE FROM chat_message_tombstones WHERE chat_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM chat_requests WHERE chat_id = $1`, id)
		return err
	})
}

// touchChat dates the chat's change at t and sets its active leaf when
// activeLeafID is not empty; ErrNotFound if the chat is absent. Its
// UPDATE locks the chat's row until tx ends: every write of a chat's
// message tree (beginTurn, DeleteMessages) takes it first, so they
// follow one another per chat, across processes, and each statement
// after it sees what the writer before committed (READ COMMITTED takes a
// snapshot per statement).
func touchChat(ctx context.Context, tx pgx.Tx, chatID, activeLeafID string, t time.Time) error {
	tag, err := tx.Exec(ctx, `UPDATE chats SET updated_at = $1, active_leaf_id = CASE WHEN $2 = '' THEN active_leaf_id ELSE $2 END WHERE id = $3`,
		t, activeLeafID, chatID)
	if err != nil {
		return err
	}
	return affected(tag, chat.ErrNotFound, "chat "+chatID)
}

// BeginTurn implements chat.Store: the messages (or the claim) and the
// run's reservation in one transaction.
func (s *Store) BeginTurn(ctx context.Context, turn chat.Turn) error {
	if turn.Run == nil || turn.Run.Status != runtime.RunPending {
		return errors.New("chat/store/postgres: a turn needs its run's reservation (status pending)")
	}
	t := s.now()
	stamp(turn, t)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := beginTurn(ctx, tx, turn, t); err != nil {
			return err
		}
		if err := s.runs.ReserveRun(ctx, tx, turn.Run); err != nil {
			if errors.Is(err, runtime.ErrRunExists) {
				return fmt.Errorf("%w: %w", chat.ErrConflict, err)
			}
			return err
		}
		return nil
	})
}

var _ chat.Joiner = (*Store)(nil)

// TurnWrite implements chat.Joiner: BeginTurn's writes but the
// reservation, as an rpostgres.Write.
func (s *Store) TurnWrite(turn chat.Turn) any {
	t := s.now()
	stamp(turn, t)
	turn.Messages = slices.Clone(turn.Messages)
	for i, m := range turn.Messages {
		c := *m
		turn.Messages[i] = &c
	}
	return rpostgres.Write(func(ctx context.Context, tx pgx.Tx) error {
		if err := beginTurn(ctx, tx, turn, t); err != nil {
			return fmt.Errorf("chat/store/postgres: begin turn in chat %s: %w", turn.ChatID, err)
		}
		return nil
	})
}

// FinishWrite implements chat.Joiner: FinishMessage's UPDATE as an
// rpostgres.Write (matching no row is not an error).
func (s *Store) FinishWrite(m *chat.Message) any {
	t, c := s.now(), *m
	return rpostgres.Write(func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, finishMessageQuery, c.Content, c.Status, c.Error, t, c.ChatID, c.ID, c.RunID); err != nil {
			return fmt.Errorf("chat/store/postgres: finish message %s: %w", c.ID, err)
		}
		return nil
	})
}

// stamp dates the turn's messages and names their chat.
func stamp(turn chat.Turn, t time.Time) {
	for _, m := range turn.Messages {
		m.ChatID = turn.ChatID
		if m.CreatedAt.IsZero() {
			m.CreatedAt = t
		}
		m.CreatedAt = m.CreatedAt.UTC().Truncate(time.Microsecond)
		m.UpdatedAt = t
	}
}

// beginTurn writes turn (stamped), but its reservation, in tx.
func beginTurn(ctx context.Context, tx pgx.Tx, turn chat.Turn, t time.Time) error {
	if err := touchChat(ctx, tx, turn.ChatID, turn.ActiveLeafID, t); err != nil {
		return err
	}
	if r := turn.Request; r != nil {
		tag, err := tx.Exec(ctx, `INSERT INTO chat_requests (chat_id, id, fingerprint, run_id, message_id, user_message_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (chat_id, id) DO NOTHING`,
			turn.ChatID, r.ID, r.Fingerprint, r.Ticket.RunID, r.Ticket.MessageID, r.Ticket.UserMessageID, t)
		if err != nil {
			return err
		}
		if err := affected(tag, chat.ErrRequestTaken, "request "+r.ID+" of chat "+turn.ChatID); err != nil {
			return err
		}
	}
	if c := turn.Claim; c != nil {
		tag, err := tx.Exec(ctx, `UPDATE chat_messages SET run_id = $1, status = $2, error = '', updated_at = $3
			WHERE chat_id = $4 AND id = $5 AND run_id = $6`, turn.Run.ID, chat.StatusPending, t, turn.ChatID, c.MessageID, c.FromRunID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1 FROM chat_messages WHERE chat_id = $1 AND id = $2`, turn.ChatID, c.MessageID).Scan(&one); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("%w: message %s", chat.ErrNotFound, c.MessageID)
				}
				return err
			}
			return fmt.Errorf("%w: message %s cannot be continued from run %s", chat.ErrConflict, c.MessageID, c.FromRunID)
		}
	}
	for _, m := range turn.Messages {
		var tools any
		if len(m.UserTools) > 0 {
			tools = m.UserTools
		}
		// The parent is read after touchChat locked the chat's row: a
		// DeleteMessages of the chat either committed before (its
		// tombstones are seen, and the message hangs where they lead) or
		// waits for this transaction (and re-parents the message with the
		// other children it finds).
		var parent string
		err := tx.QueryRow(ctx, insertMessageQuery,
			turn.ChatID, m.ID, m.ParentID, m.Role, m.Content, m.RunID, m.Status, m.TurnRunID, m.AgentNodeID, tools, m.Error,
			m.CreatedAt, t, t.Add(-chat.TombstoneTTL)).Scan(&parent)
		switch {
		case isUnique(err):
			return fmt.Errorf("%w: message %s exists", chat.ErrConflict, m.ID)
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: message %s, the parent of message %s", chat.ErrNotFound, m.ParentID, m.ID)
		case err != nil:
			return err
		}
		m.ParentID = parent
	}
	return nil
}

// remainsQuery is what a message written under $2 in chat $1 hangs
// from: $2 while it is there (or the root), else where its tombstone
// leads if it was deleted after $3; NULL if neither.
const remainsQuery = `SELECT CASE WHEN $2 = '' THEN '' ELSE COALESCE(
	(SELECT id FROM chat_messages WHERE chat_id = $1 AND id = $2),
	(SELECT leads_to FROM chat_message_tombstones WHERE chat_id = $1 AND id = $2 AND deleted_at > $3)) END`

// insertMessageQuery inserts a message under what its parent ($3)
// remains (remainsQuery), returning it; no row if that is nothing.
const insertMessageQuery = `INSERT INTO chat_messages (chat_id, id, parent_id, role, content, run_id, status, turn_run_id, agent_node_id, user_tools, error, created_at, updated_at)
	SELECT $1, $2, p.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
	FROM (SELECT CASE WHEN $3::text = '' THEN '' ELSE COALESCE(
		(SELECT id FROM chat_messages WHERE chat_id = $1 AND id = $3),
		(SELECT leads_to FROM chat_message_tombstones WHERE chat_id = $1 AND id = $3 AND deleted_at > $14)) END AS id) p
	WHERE p.id IS NOT NULL
	RETURNING parent_id`

// UpdateMessage implements chat.Store.
func (s *Store) UpdateMessage(ctx context.Context, m *chat.Message) error {
	t := s.now()
	tag, err := s.pool.Exec(ctx, `UPDATE chat_messages SET content = $1, status = $2, run_id = $3, error = $4, updated_at = $5
		WHERE chat_id = $6 AND id = $7`, m.Content, m.Status, m.RunID, m.Error, t, m.ChatID, m.ID)
	if err != nil {
		return err
	}
	m.UpdatedAt = t
	return affected(tag, chat.ErrNotFound, "message "+m.ID)
}

// FinishMessage implements chat.Store: only while the message still
// belongs to m.RunID.
func (s *Store) FinishMessage(ctx context.Context, m *chat.Message) error {
	t := s.now()
	tag, err := s.pool.Exec(ctx, finishMessageQuery, m.Content, m.Status, m.Error, t, m.ChatID, m.ID, m.RunID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		m.UpdatedAt = t
		return nil
	}
	if _, err := s.GetMessage(ctx, m.ChatID, m.ID); err != nil {
		return err
	}
	return fmt.Errorf("%w: message %s no longer belongs to run %s", chat.ErrConflict, m.ID, m.RunID)
}

const finishMessageQuery = `UPDATE chat_messages SET content = $1, status = $2, error = $3, updated_at = $4
	WHERE chat_id = $5 AND id = $6 AND run_id = $7`

const msgCols = `seq, chat_id, id, parent_id, role, content, run_id, status, turn_run_id, agent_node_id, user_tools, error, created_at, updated_at`

func scanMsg(row pgx.Row) (*chat.Message, error) {
	var m chat.Message
	var tools []byte
	if err := row.Scan(&m.Seq, &m.ChatID, &m.ID, &m.ParentID, &m.Role, &m.Content, &m.RunID, &m.Status, &m.TurnRunID, &m.AgentNodeID,
		&tools, &m.Error, &m.CreatedAt, &m.UpdatedAt); err != nil {
		return nil, err
	}
	if len(tools) > 0 {
		_ = json.Unmarshal(tools, &m.UserTools)
	}
	m.CreatedAt, m.UpdatedAt = m.CreatedAt.UTC(), m.UpdatedAt.UTC()
	return &m, nil
}

// GetMessage implements chat.Store.
func (s *Store) GetMessage(ctx context.Context, chatID, id string) (*chat.Message, error) {
	m, err := scanMsg(s.pool.QueryRow(ctx, `SELECT `+msgCols+` FROM chat_messages WHERE chat_id = $1 AND id = $2`, chatID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.GetChat(ctx, chatID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: message %s", chat.ErrNotFound, id)
	}
	return m, err
}

// Messages implements chat.Store.
func (s *Store) Messages(ctx context.Context, chatID string) ([]*chat.Message, error) {
	return s.ListMessages(ctx, chatID, 0, 0)
}

// ListMessages implements chat.Store. A page never skips a message that
// commits later with a lower seq: BeginTurn, the only writer of new
// messages, locks the chat's row (touchChat) before it takes their seqs,
// so the messages of one chat commit in seq order.
func (s *Store) ListMessages(ctx context.Context, chatID string, after int64, limit int) ([]*chat.Message, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+msgCols+` FROM chat_messages WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		chatID, after, lim)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Message, error) { return scanMsg(r) })
	if err == nil && len(out) == 0 {
		// No rows: an empty chat or page, or no chat (ErrNotFound).
		_, err = s.GetChat(ctx, chatID)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Unsettled implements chat.Store.
func (s *Store) Unsettled(ctx context.Context, limit int) ([]*chat.Message, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+msgCols+` FROM chat_messages
		WHERE role = 'assistant' AND status IN ('pending', 'running') ORDER BY updated_at, seq LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Message, error) { return scanMsg(r) })
}

// DeleteMessages implements chat.Store. It locks the chat's row first
// (touchChat), as beginTurn does, so no message of the chat is written
// between the delete and the re-parenting: the children it moves are all
// the chat has, and a turn that writes after it reads its tombstones.
func (s *Store) DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := touchChat(ctx, tx, chatID, activeLeafID, s.now()); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM chat_messages WHERE chat_id = $1 AND id = ANY($2) RETURNING id, parent_id`, chatID, ids)
		if err != nil {
			return err
		}
		parents := map[string]string{}
		var id, parent string
		if _, err := pgx.ForEachRow(rows, []any{&id, &parent}, func() error { parents[id] = parent; return nil }); err != nil {
			return err
		}
		gone, leads := chat.Remaining(parents)
		t := s.now()
		b := &pgx.Batch{}
		if len(gone) > 0 {
			// Where the deleted messages lead; tombstones that led to one
			// of them lead on, so each is one hop.
			b.Queue(`INSERT INTO chat_message_tombstones (chat_id, id, leads_to, deleted_at)
				SELECT $1, d.id, d.leads_to, $4 FROM unnest($2::text[], $3::text[]) AS d(id, leads_to)
				ON CONFLICT (chat_id, id) DO UPDATE SET leads_to = excluded.leads_to, deleted_at = excluded.deleted_at`, chatID, gone, leads, t)
			b.Queue(`UPDATE chat_message_tombstones t SET leads_to = d.leads_to FROM unnest($2::text[], $3::text[]) AS d(id, leads_to)
				WHERE t.chat_id = $1 AND t.leads_to = d.id`, chatID, gone, leads)
			b.Queue(`UPDATE chat_messages m SET parent_id = d.leads_to, updated_at = $4 FROM unnest($2::text[], $3::text[]) AS d(id, leads_to)
				WHERE m.chat_id = $1 AND m.parent_id = d.id`, chatID, gone, leads, t)
			b.Queue(`UPDATE chats c SET active_leaf_id = d.leads_to FROM unnest($2::text[], $3::text[]) AS d(id, leads_to)
				WHERE c.id = $1 AND c.active_leaf_id = d.id`, chatID, gone, leads)
			// Expired tombstones of any chat, a batch at a time: 100 more
			// than this delete leaves, so they cannot pile up. SKIP
			// LOCKED: never waiting on another chat's rollback.
			b.Queue(`DELETE FROM chat_message_tombstones WHERE ctid IN (SELECT ctid FROM chat_message_tombstones
				WHERE deleted_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, t.Add(-chat.TombstoneTTL), 100+len(gone))
		}
		b.Queue(`DELETE FROM chat_requests WHERE chat_id = $1 AND message_id = ANY($2)`, chatID, ids)
		return tx.SendBatch(ctx, b).Close()
	})
}

// Remains implements chat.Store.
func (s *Store) Remains(ctx context.Context, chatID, id string) (string, error) {
	var to *string
	if err := s.pool.QueryRow(ctx, remainsQuery, chatID, id, s.now().Add(-chat.TombstoneTTL)).Scan(&to); err != nil {
		return "", err
	}
	if to == nil {
		return "", fmt.Errorf("%w: message %s of chat %s", chat.ErrNotFound, id, chatID)
	}
	return *to, nil
}

// GetRequest implements chat.Store.
func (s *Store) GetRequest(ctx context.Context, chatID, id string) (*chat.RequestRecord, error) {
	r := &chat.RequestRecord{ID: id, Ticket: chat.Ticket{ChatID: chatID}}
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, run_id, message_id, user_message_id, created_at FROM chat_requests
		WHERE chat_id = $1 AND id = $2`, chatID, id).Scan(&r.Fingerprint, &r.Ticket.RunID, &r.Ticket.MessageID, &r.Ticket.UserMessageID, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: request %s of chat %s", chat.ErrNotFound, id, chatID)
	}
	if err != nil {
		return nil, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

// SetActiveLeaf implements chat.Store.
func (s *Store) SetActiveLeaf(ctx context.Context, chatID, msgID string) error {
	if msgID != "" {
		if _, err := s.GetMessage(ctx, chatID, msgID); err != nil {
			return err
		}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE chats SET active_leaf_id = $1, updated_at = $2 WHERE id = $3`, msgID, s.now(), chatID)
	if err != nil {
		return err
	}
	return affected(tag, chat.ErrNotFound, "chat "+chatID)
}

// Ping implements chat.Store.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Close implements chat.Store. The pool belongs to the run store.
func (s *Store) Close() error { return nil }
