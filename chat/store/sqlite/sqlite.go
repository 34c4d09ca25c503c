package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"chatgraph/chat"
	"chatgraph/runtime"
	rsqlite "chatgraph/runtime/store/sqlite"
)

// Store is a chat.Store in the SQLite file of a run store. Every write is
// a transaction on the run store's single writer connection (so writes of
// runs and chats are serialised in the process, and with other processes
// by SQLite's lock) and runs at the run store's synchronous level; reads
// use the run store's read pool. Safe for concurrent use.
type Store struct {
	runs  *rsqlite.Store
	r     *sql.DB          // runs' read pool
	clock func() time.Time // time.Now; a test's clock (export_test.go's SetNow)
}

var _ chat.Store = (*Store)(nil)

// Open opens the chat store in the file of runs and applies any missing
// chat schema migrations. The chat store uses runs' connections and opens
// none of its own: runs must stay open while it is used, and closing the
// chat store leaves runs open.
func Open(ctx context.Context, runs *rsqlite.Store) (*Store, error) {
	if runs == nil {
		return nil, errors.New("chat sqlite store: a run store is required")
	}
	s := &Store{runs: runs, r: runs.ReadDB(), clock: time.Now}
	if err := s.migrate(ctx); err != nil {
		return nil, fmt.Errorf("chat sqlite store: open %s: %w", runs.Path(), err)
	}
	if err := runs.Prepare(ctx, txQueries...); err != nil {
		return nil, fmt.Errorf("chat sqlite store: open %s: %w", runs.Path(), err)
	}
	return s, nil
}

var _ chat.Joiner = (*Store)(nil)

// txQueries are the statements of a turn's writes, prepared at Open: a
// turn runs them every time, and parsing SQL costs more than running it.
// In the run store's writer transaction (a group commit's joined writes,
// Update) exec runs them on the writer's driver connection instead,
// prepared there on first use (rsqlite.Store.Exec).
var txQueries = []string{touchChatQuery, insertMessageQuery, claimMessageQuery, finishMessageQuery, messageRunQuery, insertRequestQuery,
	remainsQuery}

// exec runs q, a write, in tx, a transaction on the run store's writer:
// on its driver connection (rsqlite.Store.Exec).
func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	return s.runs.Exec(ctx, tx, q, args...)
}

// update runs fn in a transaction on the run store's writer (see
// rsqlite.Store.Update) and prefixes its errors with op, except the
// sentinels callers branch on.
func (s *Store) update(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	err := s.runs.Update(ctx, fn)
	if err == nil || errors.Is(err, chat.ErrNotFound) || errors.Is(err, chat.ErrConflict) || errors.Is(err, chat.ErrTooManyChats) ||
		errors.Is(err, chat.ErrRequestTaken) {
		return err
	}
	return fmt.Errorf("chat sqlite store: %s: %w", op, err)
}

// ts is t's representation in the file: nanoseconds since the Unix epoch.
func ts(t time.Time) int64 { return t.UnixNano() }

func fromTS(n int64) time.Time { return time.Unix(0, n).UTC() }

// pageArgs are p's cursor (time as stored, id) and limit (-1: none) as
// query arguments.
func pageArgs(p chat.Page) (at int64, id string, limit int) {
	limit = p.Limit
	if limit <= 0 {
		limit = -1
	}
	if !p.After.IsZero() {
		at, id = ts(p.After.At), p.After.ID
	}
	return at, id, limit
}

// now is the time the store writes (and dates tombstones by).
func (s *Store) now() time.Time { return s.clock().UTC().Truncate(time.Microsecond) }

type scanner interface{ Scan(...any) error }

// collect scans every row of rows with scan and closes them.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// affected is nil when res changed a row, else sentinel with what.
func affected(res sql.Result, sentinel error, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", sentinel, what)
	}
	return nil
}

// --- graphs ---------------------------------------------------------------

// CreateGraph implements chat.Store.
func (s *Store) CreateGraph(ctx context.Context, g *chat.Graph) error {
	return s.update(ctx, "create graph "+g.ID, func(tx *sql.Tx) error {
		var version int64
		var deleted bool
		err := tx.QueryRowContext(ctx, `SELECT plan_version, deleted FROM graphs WHERE id = ?`, g.ID).Scan(&version, &deleted)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case !deleted:
			return fmt.Errorf("%w: graph %s exists", chat.ErrConflict, g.ID)
		}
		t := s.now()
		g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, t, t
		_, err = tx.ExecContext(ctx, `INSERT INTO graphs (id, name, plan_version, body, deleted, created_at, updated_at)
	VALUES (?, ?, ?, ?, 0, ?, ?)
	ON CONFLICT(id) DO UPDATE SET name = excluded.name, plan_version = excluded.plan_version, body = excluded.body,
		deleted = 0, created_at = excluded.created_at, updated_at = excluded.updated_at`,
			g.ID, g.Name, g.PlanVersion, []byte(g.Body), ts(t), ts(t))
		if err != nil {
			return err
		}
		return keepVersion(ctx, tx, g)
	})
}

func keepVersion(ctx context.Context, tx *sql.Tx, g *chat.Graph) error {
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO graph_versions (id, plan_version, name, body, created_at) VALUES (?, ?, ?, ?, ?)`,
		g.ID, g.PlanVersion, g.Name, []byte(g.Body), ts(g.UpdatedAt))
	return err
}

const graphCols = `id, name, plan_version, body, created_at, updated_at`

func scanGraph(row scanner) (*chat.Graph, error) {
	var g chat.Graph
	var body []byte
	var c, u int64
	if err := row.Scan(&g.ID, &g.Name, &g.PlanVersion, &body, &c, &u); err != nil {
		return nil, err
	}
	g.Body, g.CreatedAt, g.UpdatedAt = json.RawMessage(body), fromTS(c), fromTS(u)
	return &g, nil
}

// GetGraphVersion implements chat.Store.
func (s *Store) GetGraphVersion(ctx context.Context, id string, version int64) (*chat.Graph, error) {
	g, err := scanGraph(s.r.QueryRowContext(ctx,
		`SELECT id, name, plan_version, body, created_at, created_at FROM graph_versions WHERE id = ? AND plan_version = ?`, id, version))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s version %d", chat.ErrNotFound, id, version)
	}
	return g, err
}

// GetGraph implements chat.Store.
func (s *Store) GetGraph(ctx context.Context, id string) (*chat.Graph, error) {
	g, err := scanGraph(s.runs.ReadRow(ctx, `SELECT `+graphCols+` FROM graphs WHERE id = ? AND deleted = 0`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s", chat.ErrNotFound, id)
	}
	return g, err
}

// ListGraphs implements chat.Store.
func (s *Store) ListGraphs(ctx context.Context, p chat.Page) ([]*chat.Graph, error) {
	at, id, limit := pageArgs(p)
	rows, err := s.r.QueryContext(ctx, `SELECT `+graphCols+` FROM graphs WHERE deleted = 0
		AND (? = '' OR updated_at < ? OR (updated_at = ? AND id > ?)) ORDER BY updated_at DESC, id LIMIT ?`, id, at, at, id, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanGraph)
}

// graphsNamedQuery finds live graphs by name through the partial index
// graphs_name (TestGraphsNamedUsesIndex).
const graphsNamedQuery = `SELECT ` + graphCols + ` FROM graphs WHERE name = ? AND deleted = 0
	ORDER BY updated_at DESC, id LIMIT ?`

// GraphsNamed implements chat.Store.
func (s *Store) GraphsNamed(ctx context.Context, name string, limit int) ([]*chat.Graph, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.r.QueryContext(ctx, graphsNamedQuery, name, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanGraph)
}

// UpdateGraph implements chat.Store.
func (s *Store) UpdateGraph(ctx context.Context, g *chat.Graph, ifVersion int64) error {
	return s.update(ctx, "update graph "+g.ID, func(tx *sql.Tx) error {
		var version, created int64
		err := tx.QueryRowContext(ctx, `SELECT plan_version, created_at FROM graphs WHERE id = ? AND deleted = 0`, g.ID).Scan(&version, &created)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: graph %s", chat.ErrNotFound, g.ID)
		}
		if err != nil {
			return err
		}
		if ifVersion > 0 && version != ifVersion {
			return fmt.Errorf("%w: graph %s is at planVersion %d, not %d", chat.ErrConflict, g.ID, version, ifVersion)
		}
		t := s.now()
		g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, fromTS(created), t
		if _, err := tx.ExecContext(ctx, `UPDATE graphs SET name = ?, plan_version = ?, body = ?, updated_at = ? WHERE id = ?`,
			g.Name, g.PlanVersion, []byte(g.Body), ts(t), g.ID); err != nil {
			return err
		}
		return keepVersion(ctx, tx, g)
	})
}

// DeleteGraph implements chat.Store.
func (s *Store) DeleteGraph(ctx context.Context, id string) error {
	return s.update(ctx, "delete graph "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE graphs SET deleted = 1, body = x'', updated_at = ? WHERE id = ? AND deleted = 0`, ts(s.now()), id)
		if err != nil {
			return err
		}
		return affected(res, chat.ErrNotFound, "graph "+id)
	})
}

// --- chats ----------------------------------------------------------------

// CreateChat implements chat.Store: the owner's chats are counted in the
// transaction that inserts c, on the single writer.
func (s *Store) CreateChat(ctx context.Context, c *chat.Chat, maxOwned int) error {
	return s.update(ctx, "create chat "+c.ID, func(tx *sql.Tx) error {
		if c.Owner != "" && maxOwned > 0 {
			var n, taken int
			if err := tx.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE id = ?) FROM chats WHERE owner = ? OR id = ?`,
				c.ID, c.Owner, c.ID).Scan(&n, &taken); err != nil {
				return err
			}
			if err := chat.CheckOwned(c.ID, n, taken > 0, maxOwned); err != nil {
				return err
			}
		}
		t := s.now()
		c.CreatedAt, c.UpdatedAt = t, t
		res, err := tx.ExecContext(ctx, `INSERT INTO chats (id, graph_id, title, active_leaf_id, owner, created_at, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			c.ID, c.GraphID, c.Title, c.ActiveLeafID, c.Owner, ts(t), ts(t))
		if err != nil {
			return err
		}
		return affected(res, chat.ErrConflict, "chat "+c.ID+" exists")
	})
}

const chatCols = `id, graph_id, title, active_leaf_id, owner, created_at, updated_at`

// scanChat scans a row of chatCols, then, into more, the columns after
// them.
func scanChat(row scanner, more ...any) (*chat.Chat, error) {
	var c chat.Chat
	var cr, up int64
	if err := row.Scan(append([]any{&c.ID, &c.GraphID, &c.Title, &c.ActiveLeafID, &c.Owner, &cr, &up}, more...)...); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = fromTS(cr), fromTS(up)
	return &c, nil
}

// GetChat implements chat.Store.
func (s *Store) GetChat(ctx context.Context, id string) (*chat.Chat, error) {
	c, err := scanChat(s.runs.ReadRow(ctx, `SELECT `+chatCols+` FROM chats WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: chat %s", chat.ErrNotFound, id)
	}
	return c, err
}

// chatGraphQuery reads a chat and its live graph, if any, in one
// statement: the chat's columns (chatCols), then the graph's (graphCols),
// NULL when it is absent or deleted.
var chatGraphQuery = `SELECT c.` + strings.ReplaceAll(chatCols, ", ", ", c.") + `, g.` + strings.ReplaceAll(graphCols, ", ", ", g.") + `
FROM chats c LEFT JOIN graphs g ON g.id = c.graph_id AND g.deleted = 0 WHERE c.id = ?`

// GetChatGraph implements chat.Store: one read where GetChat and GetGraph
// take two, each of which, while the writer commits, rereads the pages
// its connection's cache lost to the commits.
func (s *Store) GetChatGraph(ctx context.Context, id string) (*chat.Chat, *chat.Graph, error) {
	var gid, gname sql.NullString
	var gver, gcr, gup sql.NullInt64
	var body []byte
	c, err := scanChat(s.runs.ReadRow(ctx, chatGraphQuery, id), &gid, &gname, &gver, &body, &gcr, &gup)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, fmt.Errorf("%w: chat %s", chat.ErrNotFound, id)
	}
	if err != nil || !gid.Valid {
		return c, nil, err
	}
	return c, &chat.Graph{ID: gid.String, Name: gname.String, PlanVersion: gver.Int64, Body: json.RawMessage(body),
		CreatedAt: fromTS(gcr.Int64), UpdatedAt: fromTS(gup.Int64)}, nil
}

// ListChats implements chat.Store.
func (s *Store) ListChats(ctx context.Context, graphID string, p chat.Page) ([]*chat.Chat, error) {
	at, id, limit := pageArgs(p)
	rows, err := s.r.QueryContext(ctx, `SELECT `+chatCols+` FROM chats WHERE (? = '' OR graph_id = ?)
		AND (? = '' OR created_at < ? OR (created_at = ? AND id > ?)) ORDER BY created_at DESC, id LIMIT ?`,
		graphID, graphID, id, at, at, id, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (*chat.Chat, error) { return scanChat(r) })
}

// DeleteChat implements chat.Store.
func (s *Store) DeleteChat(ctx context.Context, id string) error {
	return s.update(ctx, "delete chat "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM chats WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if err := affected(res, chat.ErrNotFound, "chat "+id); err != nil {
			return err
		}
		if _, err = tx.ExecContext(ctx, `DELETE FROM messages WHERE chat_id = ?`, id); err != nil {
			return err
		}
		if _, err = tx.ExecContext(ctx, `DELETE FROM chat_message_tombstones WHERE chat_id = ?`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM chat_requests WHERE chat_id = ?`, id)
		return err
	})
}

// touchChat dates the chat's change and sets its active leaf when
// activeLeafID is not empty; ErrNotFound if the chat is absent.
func (s *Store) touchChat(ctx context.Context, tx *sql.Tx, chatID, activeLeafID string, t time.Time) error {
	res, err := s.exec(ctx, tx, touchChatQuery, ts(t), activeLeafID, activeLeafID, chatID)
	if err != nil {
		return err
	}
	return affected(res, chat.ErrNotFound, "chat "+chatID)
}

const touchChatQuery = `UPDATE chats SET updated_at = ?,
	active_leaf_id = CASE WHEN ? = '' THEN active_leaf_id ELSE ? END WHERE id = ?`

// --- messages -------------------------------------------------------------

func tools(ts []string) (string, error) {
	if len(ts) == 0 {
		return "", nil
	}
	b, err := json.Marshal(ts)
	return string(b), err
}

// BeginTurn implements chat.Store in one IMMEDIATE transaction on the run
// store's writer: the chat's update, the messages' inserts, the claim
// (an UPDATE conditional on the message's run id) and the reservation
// of the run in the runs table. Any refusal rolls all of it back.
func (s *Store) BeginTurn(ctx context.Context, t chat.Turn) error {
	if t.Run == nil {
		return errors.New("chat sqlite store: a turn needs its run's reservation (Turn.Run)")
	}
	now := s.now()
	stamp(t, now)
	return s.update(ctx, "begin turn in chat "+t.ChatID, func(tx *sql.Tx) error {
		if err := s.beginTurn(ctx, tx, t, now); err != nil {
			return err
		}
		if err := s.runs.ReserveRun(ctx, tx, t.Run); errors.Is(err, runtime.ErrRunExists) {
			return fmt.Errorf("%w: run %s: %w", chat.ErrConflict, t.Run.ID, runtime.ErrRunExists)
		} else if err != nil {
			return err
		}
		return nil
	})
}

// TurnWrite implements chat.Joiner: BeginTurn's writes but the
// reservation, as an rsqlite.Write.
func (s *Store) TurnWrite(t chat.Turn) any {
	now := s.now()
	stamp(t, now)
	t.Messages = slices.Clone(t.Messages)
	for i, m := range t.Messages {
		c := *m
		t.Messages[i] = &c
	}
	return rsqlite.Write(func(ctx context.Context, tx *sql.Tx) error {
		if err := s.beginTurn(ctx, tx, t, now); err != nil {
			return fmt.Errorf("chat sqlite store: begin turn in chat %s: %w", t.ChatID, err)
		}
		return nil
	})
}

// stamp dates the turn's messages and names their chat.
func stamp(t chat.Turn, now time.Time) {
	for _, m := range t.Messages {
		m.ChatID = t.ChatID
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.UpdatedAt = now
	}
}

// beginTurn writes t (stamped), but its reservation, in tx.
func (s *Store) beginTurn(ctx context.Context, tx *sql.Tx, t chat.Turn, now time.Time) error {
	if err := s.touchChat(ctx, tx, t.ChatID, t.ActiveLeafID, now); err != nil {
		return err
	}
	if r := t.Request; r != nil {
		res, err := s.exec(ctx, tx, insertRequestQuery, t.ChatID, r.ID, r.Fingerprint, r.Ticket.RunID, r.Ticket.MessageID,
			r.Ticket.UserMessageID, ts(now))
		if err != nil {
			return err
		}
		if err := affected(res, chat.ErrRequestTaken, "request "+r.ID+" of chat "+t.ChatID); err != nil {
			return err
		}
	}
	ours := map[string]bool{}
	for _, m := range t.Messages {
		ut, err := tools(m.UserTools)
		if err != nil {
			return fmt.Errorf("message %s: user tools: %w", m.ID, err)
		}
		if !ours[m.ParentID] {
			// In the writer's IMMEDIATE transaction: no DeleteMessages,
			// of this process or another, runs between this read and the
			// insert.
			if m.ParentID, err = s.remains(ctx, tx, t.ChatID, m.ParentID, now); err != nil {
				return fmt.Errorf("the parent of message %s: %w", m.ID, err)
			}
		}
		ours[m.ID] = true
		res, err := s.exec(ctx, tx, insertMessageQuery,
			t.ChatID, m.ID, m.ParentID, string(m.Role), m.Content, m.RunID, string(m.Status), m.TurnRunID, m.AgentNodeID,
			ut, m.Error, ts(m.CreatedAt), ts(now))
		if err != nil {
			return err
		}
		if err := affected(res, chat.ErrConflict, "message "+m.ID+" exists"); err != nil {
			return err
		}
	}
	if c := t.Claim; c != nil {
		res, err := s.exec(ctx, tx, claimMessageQuery, t.Run.ID, string(chat.StatusPending), ts(now), t.ChatID, c.MessageID, c.FromRunID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.lost(ctx, tx, t.ChatID, c.MessageID, c.FromRunID)
		}
	}
	return nil
}

const (
	insertMessageQuery = `INSERT INTO messages (chat_id, id, parent_id, role, content, run_id, status,
	turn_run_id, agent_node_id, user_tools, error, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (chat_id, id) DO NOTHING`
	claimMessageQuery = `UPDATE messages SET run_id = ?, status = ?, error = '', updated_at = ?
WHERE chat_id = ? AND id = ? AND run_id = ?`
	finishMessageQuery = `UPDATE messages SET content = ?, status = ?, error = ?, updated_at = ?
WHERE chat_id = ? AND id = ? AND run_id = ?`
	messageRunQuery = `SELECT run_id FROM messages WHERE chat_id = ? AND id = ?`
	// remainsQuery is what a message written under ?2 in chat ?1 hangs
	// from: ?2 while it is there (or the root), else where its tombstone
	// leads if it was deleted after ?3; NULL if neither.
	remainsQuery = `SELECT CASE WHEN ?2 = '' THEN '' ELSE COALESCE(
	(SELECT id FROM messages WHERE chat_id = ?1 AND id = ?2),
	(SELECT leads_to FROM chat_message_tombstones WHERE chat_id = ?1 AND id = ?2 AND deleted_at > ?3)) END`
	insertRequestQuery = `INSERT INTO chat_requests (chat_id, id, fingerprint, run_id, message_id, user_message_id, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (chat_id, id) DO NOTHING`
)

// lost says why a write conditional on a message's run id changed
// nothing: ErrNotFound when the message is absent, else ErrConflict.
func (s *Store) lost(ctx context.Context, tx *sql.Tx, chatID, msgID, runID string) error {
	st, err := s.runs.Stmt(ctx, tx, messageRunQuery)
	if err != nil {
		return err
	}
	var cur string
	err = st.QueryRowContext(ctx, chatID, msgID).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: message %s", chat.ErrNotFound, msgID)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: message %s belongs to run %s, not %s", chat.ErrConflict, msgID, cur, runID)
}

// remains is where a message written under id in chat chatID hangs
// (remainsQuery), read in tx; ErrNotFound if nowhere.
func (s *Store) remains(ctx context.Context, tx *sql.Tx, chatID, id string, now time.Time) (string, error) {
	if id == "" {
		return "", nil
	}
	st, err := s.runs.Stmt(ctx, tx, remainsQuery)
	if err != nil {
		return "", err
	}
	return scanRemains(st.QueryRowContext(ctx, chatID, id, ts(now.Add(-chat.TombstoneTTL))), chatID, id)
}

func scanRemains(row interface{ Scan(...any) error }, chatID, id string) (string, error) {
	var to sql.NullString
	if err := row.Scan(&to); err != nil {
		return "", err
	}
	if !to.Valid {
		return "", fmt.Errorf("%w: message %s of chat %s", chat.ErrNotFound, id, chatID)
	}
	return to.String, nil
}

// Remains implements chat.Store.
func (s *Store) Remains(ctx context.Context, chatID, id string) (string, error) {
	return scanRemains(s.runs.ReadRow(ctx, remainsQuery, chatID, id, ts(s.now().Add(-chat.TombstoneTTL))), chatID, id)
}

// UpdateMessage implements chat.Store.
func (s *Store) UpdateMessage(ctx context.Context, m *chat.Message) error {
	return s.update(ctx, "update message "+m.ID, func(tx *sql.Tx) error {
		t := s.now()
		res, err := tx.ExecContext(ctx, `UPDATE messages SET content = ?, status = ?, run_id = ?, error = ?, updated_at = ?
WHERE chat_id = ? AND id = ?`, m.Content, string(m.Status), m.RunID, m.Error, ts(t), m.ChatID, m.ID)
		if err != nil {
			return err
		}
		m.UpdatedAt = t
		return affected(res, chat.ErrNotFound, "message "+m.ID)
	})
}

// FinishMessage implements chat.Store: one UPDATE conditional on the
// message's run id.
func (s *Store) FinishMessage(ctx context.Context, m *chat.Message) error {
	return s.update(ctx, "finish message "+m.ID, func(tx *sql.Tx) error {
		t := s.now()
		res, err := s.exec(ctx, tx, finishMessageQuery, m.Content, string(m.Status), m.Error, ts(t), m.ChatID, m.ID, m.RunID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.lost(ctx, tx, m.ChatID, m.ID, m.RunID)
		}
		m.UpdatedAt = t
		return nil
	})
}

// FinishWrite implements chat.Joiner: FinishMessage's UPDATE as an
// rsqlite.Write (matching no row is not an error).
func (s *Store) FinishWrite(m *chat.Message) any {
	t, c := s.now(), *m
	return rsqlite.Write(func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, finishMessageQuery, c.Content, string(c.Status), c.Error, ts(t), c.ChatID, c.ID, c.RunID); err != nil {
			return fmt.Errorf("chat sqlite store: finish message %s: %w", c.ID, err)
		}
		return nil
	})
}

const msgCols = `seq, chat_id, id, parent_id, role, content, run_id, status, turn_run_id, agent_node_id, user_tools, error, created_at, updated_at`

func scanMsg(row scanner) (*chat.Message, error) {
	var (
		m            chat.Message
		role, status string
		ut           string
		c, u         int64
	)
	if err := row.Scan(&m.Seq, &m.ChatID, &m.ID, &m.ParentID, &role, &m.Content, &m.RunID, &status, &m.TurnRunID, &m.AgentNodeID,
		&ut, &m.Error, &c, &u); err != nil {
		return nil, err
	}
	m.Role, m.Status = chat.Role(role), chat.Status(status)
	if ut != "" {
		if err := json.Unmarshal([]byte(ut), &m.UserTools); err != nil {
			return nil, fmt.Errorf("message %s: user tools: %w", m.ID, err)
		}
	}
	m.CreatedAt, m.UpdatedAt = fromTS(c), fromTS(u)
	return &m, nil
}

// GetMessage implements chat.Store.
func (s *Store) GetMessage(ctx context.Context, chatID, id string) (*chat.Message, error) {
	m, err := scanMsg(s.runs.ReadRow(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? AND id = ?`, chatID, id))
	if errors.Is(err, sql.ErrNoRows) {
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

// ListMessages implements chat.Store.
func (s *Store) ListMessages(ctx context.Context, chatID string, after int64, limit int) ([]*chat.Message, error) {
	if limit <= 0 {
		limit = -1
	}
	st, err := s.runs.ReadStmt(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? AND seq > ? ORDER BY seq LIMIT ?`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, chatID, after, limit)
	if err != nil {
		return nil, err
	}
	out, err := collect(rows, scanMsg)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if _, err := s.GetChat(ctx, chatID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Unsettled implements chat.Store.
func (s *Store) Unsettled(ctx context.Context, limit int) ([]*chat.Message, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+msgCols+` FROM messages
		WHERE role = 'assistant' AND status IN ('pending', 'running') ORDER BY updated_at, seq LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanMsg)
}

// DeleteMessages implements chat.Store in one IMMEDIATE transaction on
// the run store's writer, so no message of the chat is written between
// the delete and the re-parenting (BeginTurn waits for the writer, in
// this process, and for SQLite's lock, in another).
func (s *Store) DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error {
	return s.update(ctx, "delete messages of chat "+chatID, func(tx *sql.Tx) error {
		t := s.now()
		if err := s.touchChat(ctx, tx, chatID, activeLeafID, t); err != nil {
			return err
		}
		parents := map[string]string{}
		for _, id := range ids {
			var parent string
			err := tx.QueryRowContext(ctx, `DELETE FROM messages WHERE chat_id = ? AND id = ? RETURNING parent_id`, chatID, id).Scan(&parent)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				continue
			case err != nil:
				return err
			}
			parents[id] = parent
			if _, err := tx.ExecContext(ctx, `DELETE FROM chat_requests WHERE chat_id = ? AND message_id = ?`, chatID, id); err != nil {
				return err
			}
		}
		gone, leads := chat.Remaining(parents)
		for i, id := range gone {
			to := leads[i]
			for _, w := range []struct {
				q    string
				args []any
			}{
				// Where it leads; tombstones that led to it lead on, so
				// each is one hop.
				{`INSERT INTO chat_message_tombstones (chat_id, id, leads_to, deleted_at) VALUES (?, ?, ?, ?)
					ON CONFLICT (chat_id, id) DO UPDATE SET leads_to = excluded.leads_to, deleted_at = excluded.deleted_at`,
					[]any{chatID, id, to, ts(t)}},
				{`UPDATE chat_message_tombstones SET leads_to = ? WHERE chat_id = ? AND leads_to = ?`, []any{to, chatID, id}},
				{`UPDATE messages SET parent_id = ?, updated_at = ? WHERE chat_id = ? AND parent_id = ?`, []any{to, ts(t), chatID, id}},
				{`UPDATE chats SET active_leaf_id = ? WHERE id = ? AND active_leaf_id = ?`, []any{to, chatID, id}},
			} {
				if _, err := tx.ExecContext(ctx, w.q, w.args...); err != nil {
					return err
				}
			}
		}
		if len(gone) > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM chat_message_tombstones WHERE deleted_at <= ?`, ts(t.Add(-chat.TombstoneTTL))); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetRequest implements chat.Store.
func (s *Store) GetRequest(ctx context.Context, chatID, id string) (*chat.RequestRecord, error) {
	r := &chat.RequestRecord{ID: id, Ticket: chat.Ticket{ChatID: chatID}}
	var created int64
	err := s.runs.ReadRow(ctx, `SELECT fingerprint, run_id, message_id, user_message_id, created_at FROM chat_requests
		WHERE chat_id = ? AND id = ?`, chatID, id).Scan(&r.Fingerprint, &r.Ticket.RunID, &r.Ticket.MessageID, &r.Ticket.UserMessageID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: request %s of chat %s", chat.ErrNotFound, id, chatID)
	}
	if err != nil {
		return nil, err
	}
	r.CreatedAt = fromTS(created)
	return r, nil
}

// SetActiveLeaf implements chat.Store.
func (s *Store) SetActiveLeaf(ctx context.Context, chatID, msgID string) error {
	return s.update(ctx, "set active leaf of chat "+chatID, func(tx *sql.Tx) error {
		if msgID != "" {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM messages WHERE chat_id = ? AND id = ?`, chatID, msgID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: message %s", chat.ErrNotFound, msgID)
			}
			if err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE chats SET active_leaf_id = ?, updated_at = ? WHERE id = ?`, msgID, ts(s.now()), chatID)
		if err != nil {
			return err
		}
		return affected(res, chat.ErrNotFound, "chat "+chatID)
	})
}

// Ping implements chat.Store: it reaches the file through the read pool.
func (s *Store) Ping(ctx context.Context) error { return s.r.PingContext(ctx) }

// Close implements chat.Store. The chat store has no connection of its
// own, so there is nothing to release: the run store's stay open.
func (s *Store) Close() error { return nil }
