package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"chatgraph/transport/chatstore"
)

// Config configures Open.
type Config struct {
	// Path is the database file (required); its directory is created.
	Path string
	// BusyTimeout is how long a write waits for another process's lock
	// (default 5s).
	BusyTimeout time.Duration
}

// Store is a chatstore.Store in a SQLite file. All statements go through
// one connection, so writes in this process never contend; SQLite's file
// lock orders them with other processes. Safe for concurrent use.
type Store struct {
	db *sql.DB
}

var _ chatstore.Store = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS graphs (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL DEFAULT '',
	plan_version INTEGER NOT NULL,
	body BLOB NOT NULL,
	deleted INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_versions (
	id TEXT NOT NULL,
	plan_version INTEGER NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	body BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (id, plan_version)
);
CREATE TABLE IF NOT EXISTS chats (
	id TEXT PRIMARY KEY,
	graph_id TEXT NOT NULL,
	title TEXT NOT NULL DEFAULT '',
	active_leaf_id TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chats_graph ON chats(graph_id, created_at);
CREATE TABLE IF NOT EXISTS messages (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	parent_id TEXT NOT NULL DEFAULT '',
	role TEXT NOT NULL,
	content TEXT NOT NULL DEFAULT '',
	run_id TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL DEFAULT '',
	turn_run_id TEXT NOT NULL DEFAULT '',
	agent_node_id TEXT NOT NULL DEFAULT '',
	user_tools TEXT NOT NULL DEFAULT '',
	error TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	UNIQUE (chat_id, id)
);
`

// Open opens (creating if needed) the store at cfg.Path.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("chatstore/sqlite: Config.Path is required")
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, fmt.Errorf("chatstore/sqlite: %w", err)
	}
	bt := cfg.BusyTimeout
	if bt <= 0 {
		bt = 5 * time.Second
	}
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)&_txlock=immediate",
		cfg.Path, bt.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("chatstore/sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("chatstore/sqlite: migrate: %w", err)
	}
	return &Store{db: db}, nil
}

func ts(t time.Time) int64 { return t.UnixNano() }

func fromTS(n int64) time.Time { return time.Unix(0, n).UTC() }

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// CreateGraph implements chatstore.Store.
func (s *Store) CreateGraph(ctx context.Context, g *chatstore.Graph) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var version int64
	var deleted bool
	err = tx.QueryRowContext(ctx, `SELECT plan_version, deleted FROM graphs WHERE id = ?`, g.ID).Scan(&version, &deleted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	case !deleted:
		return fmt.Errorf("%w: graph %s exists", chatstore.ErrConflict, g.ID)
	}
	t := now()
	g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, t, t
	_, err = tx.ExecContext(ctx, `INSERT INTO graphs (id, name, plan_version, body, deleted, created_at, updated_at)
		VALUES (?, ?, ?, ?, 0, ?, ?)
		ON CONFLICT(id) DO UPDATE SET name = excluded.name, plan_version = excluded.plan_version, body = excluded.body,
			deleted = 0, created_at = excluded.created_at, updated_at = excluded.updated_at`,
		g.ID, g.Name, g.PlanVersion, []byte(g.Body), ts(t), ts(t))
	if err != nil {
		return err
	}
	if err := keepVersion(ctx, tx, g); err != nil {
		return err
	}
	return tx.Commit()
}

func keepVersion(ctx context.Context, tx *sql.Tx, g *chatstore.Graph) error {
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO graph_versions (id, plan_version, name, body, created_at) VALUES (?, ?, ?, ?, ?)`,
		g.ID, g.PlanVersion, g.Name, []byte(g.Body), ts(g.UpdatedAt))
	return err
}

// GetGraphVersion implements chatstore.Store.
func (s *Store) GetGraphVersion(ctx context.Context, id string, version int64) (*chatstore.Graph, error) {
	g, err := scanGraph(s.db.QueryRowContext(ctx, `SELECT id, name, plan_version, body, created_at, created_at FROM graph_versions WHERE id = ? AND plan_version = ?`, id, version))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s version %d", chatstore.ErrNotFound, id, version)
	}
	return g, err
}

const graphCols = `id, name, plan_version, body, created_at, updated_at`

func scanGraph(row interface{ Scan(...any) error }) (*chatstore.Graph, error) {
	var g chatstore.Graph
	var body []byte
	var c, u int64
	if err := row.Scan(&g.ID, &g.Name, &g.PlanVersion, &body, &c, &u); err != nil {
		return nil, err
	}
	g.Body, g.CreatedAt, g.UpdatedAt = json.RawMessage(body), fromTS(c), fromTS(u)
	return &g, nil
}

// GetGraph implements chatstore.Store.
func (s *Store) GetGraph(ctx context.Context, id string) (*chatstore.Graph, error) {
	g, err := scanGraph(s.db.QueryRowContext(ctx, `SELECT `+graphCols+` FROM graphs WHERE id = ? AND deleted = 0`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: graph %s", chatstore.ErrNotFound, id)
	}
	return g, err
}

// ListGraphs implements chatstore.Store.
func (s *Store) ListGraphs(ctx context.Context) ([]*chatstore.Graph, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+graphCols+` FROM graphs WHERE deleted = 0 ORDER BY updated_at DESC, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*chatstore.Graph{}
	for rows.Next() {
		g, err := scanGraph(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// UpdateGraph implements chatstore.Store.
func (s *Store) UpdateGraph(ctx context.Context, g *chatstore.Graph, ifVersion int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var version, created int64
	err = tx.QueryRowContext(ctx, `SELECT plan_version, created_at FROM graphs WHERE id = ? AND deleted = 0`, g.ID).Scan(&version, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: graph %s", chatstore.ErrNotFound, g.ID)
	}
	if err != nil {
		return err
	}
	if ifVersion > 0 && version != ifVersion {
		return fmt.Errorf("%w: graph %s is at planVersion %d, not %d", chatstore.ErrConflict, g.ID, version, ifVersion)
	}
	t := now()
	g.PlanVersion, g.CreatedAt, g.UpdatedAt = version+1, fromTS(created), t
	if _, err := tx.ExecContext(ctx, `UPDATE graphs SET name = ?, plan_version = ?, body = ?, updated_at = ? WHERE id = ?`,
		g.Name, g.PlanVersion, []byte(g.Body), ts(t), g.ID); err != nil {
		return err
	}
	if err := keepVersion(ctx, tx, g); err != nil {
		return err
	}
	return tx.Commit()
}

// DeleteGraph implements chatstore.Store.
func (s *Store) DeleteGraph(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE graphs SET deleted = 1, body = x'', updated_at = ? WHERE id = ? AND deleted = 0`, ts(now()), id)
	if err != nil {
		return err
	}
	return affected(res, chatstore.ErrNotFound, "graph "+id)
}

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

// CreateChat implements chatstore.Store.
func (s *Store) CreateChat(ctx context.Context, c *chatstore.Chat) error {
	t := now()
	c.CreatedAt, c.UpdatedAt = t, t
	_, err := s.db.ExecContext(ctx, `INSERT INTO chats (id, graph_id, title, active_leaf_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
		c.ID, c.GraphID, c.Title, c.ActiveLeafID, ts(t), ts(t))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("%w: chat %s exists", chatstore.ErrConflict, c.ID)
	}
	return err
}

const chatCols = `id, graph_id, title, active_leaf_id, created_at, updated_at`

func scanChat(row interface{ Scan(...any) error }) (*chatstore.Chat, error) {
	var c chatstore.Chat
	var cr, up int64
	if err := row.Scan(&c.ID, &c.GraphID, &c.Title, &c.ActiveLeafID, &cr, &up); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = fromTS(cr), fromTS(up)
	return &c, nil
}

// GetChat implements chatstore.Store.
func (s *Store) GetChat(ctx context.Context, id string) (*chatstore.Chat, error) {
	c, err := scanChat(s.db.QueryRowContext(ctx, `SELECT `+chatCols+` FROM chats WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: chat %s", chatstore.ErrNotFound, id)
	}
	return c, err
}

// ListChats implements chatstore.Store.
func (s *Store) ListChats(ctx context.Context, graphID string) ([]*chatstore.Chat, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+chatCols+` FROM chats WHERE (? = '' OR graph_id = ?) ORDER BY created_at DESC, id`, graphID, graphID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*chatstore.Chat{}
	for rows.Next() {
		c, err := scanChat(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteChat implements chatstore.Store.
func (s *Store) DeleteChat(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	res, err := tx.ExecContext(ctx, `DELETE FROM chats WHERE id = ?`, id)
	if err != nil {
		return err
	}
	if err := affected(res, chatstore.ErrNotFound, "chat "+id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE chat_id = ?`, id); err != nil {
		return err
	}
	return tx.Commit()
}

func tools(ts []string) string {
	if len(ts) == 0 {
		return ""
	}
	b, _ := json.Marshal(ts)
	return string(b)
}

// AddMessages implements chatstore.Store.
func (s *Store) AddMessages(ctx context.Context, chatID, activeLeafID string, msgs ...*chatstore.Message) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	t := now()
	res, err := tx.ExecContext(ctx, `UPDATE chats SET updated_at = ?, active_leaf_id = CASE WHEN ? = '' THEN active_leaf_id ELSE ? END WHERE id = ?`,
		ts(t), activeLeafID, activeLeafID, chatID)
	if err != nil {
		return err
	}
	if err := affected(res, chatstore.ErrNotFound, "chat "+chatID); err != nil {
		return err
	}
	for _, m := range msgs {
		m.ChatID = chatID
		if m.CreatedAt.IsZero() {
			m.CreatedAt = t
		}
		m.UpdatedAt = t
		_, err := tx.ExecContext(ctx, `INSERT INTO messages (chat_id, id, parent_id, role, content, run_id, status, turn_run_id, agent_node_id, user_tools, error, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			chatID, m.ID, m.ParentID, m.Role, m.Content, m.RunID, m.Status, m.TurnRunID, m.AgentNodeID, tools(m.UserTools), m.Error, ts(m.CreatedAt), ts(t))
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE") {
				return fmt.Errorf("%w: message %s exists", chatstore.ErrConflict, m.ID)
			}
			return err
		}
	}
	return tx.Commit()
}

// UpdateMessage implements chatstore.Store.
func (s *Store) UpdateMessage(ctx context.Context, m *chatstore.Message) error {
	t := now()
	res, err := s.db.ExecContext(ctx, `UPDATE messages SET parent_id = ?, content = ?, status = ?, run_id = ?, error = ?, updated_at = ? WHERE chat_id = ? AND id = ?`,
		m.ParentID, m.Content, m.Status, m.RunID, m.Error, ts(t), m.ChatID, m.ID)
	if err != nil {
		return err
	}
	m.UpdatedAt = t
	return affected(res, chatstore.ErrNotFound, "message "+m.ID)
}

// ClaimMessage implements chatstore.Store.
func (s *Store) ClaimMessage(ctx context.Context, chatID, msgID, fromRunID, toRunID string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE messages SET run_id = ?, status = ?, error = '', updated_at = ?
		WHERE chat_id = ? AND id = ? AND run_id = ? AND status IN (?, ?, ?)`,
		toRunID, chatstore.StatusPending, ts(now()), chatID, msgID, fromRunID,
		chatstore.StatusInterrupted, chatstore.StatusCancelled, chatstore.StatusFailed)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	if _, err := s.GetMessage(ctx, chatID, msgID); err != nil {
		return err
	}
	return fmt.Errorf("%w: message %s cannot be continued from run %s", chatstore.ErrConflict, msgID, fromRunID)
}

const msgCols = `chat_id, id, parent_id, role, content, run_id, status, turn_run_id, agent_node_id, user_tools, error, created_at, updated_at`

func scanMsg(row interface{ Scan(...any) error }) (*chatstore.Message, error) {
	var m chatstore.Message
	var ut string
	var c, u int64
	if err := row.Scan(&m.ChatID, &m.ID, &m.ParentID, &m.Role, &m.Content, &m.RunID, &m.Status, &m.TurnRunID, &m.AgentNodeID, &ut, &m.Error, &c, &u); err != nil {
		return nil, err
	}
	if ut != "" {
		_ = json.Unmarshal([]byte(ut), &m.UserTools)
	}
	m.CreatedAt, m.UpdatedAt = fromTS(c), fromTS(u)
	return &m, nil
}

// GetMessage implements chatstore.Store.
func (s *Store) GetMessage(ctx context.Context, chatID, id string) (*chatstore.Message, error) {
	m, err := scanMsg(s.db.QueryRowContext(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? AND id = ?`, chatID, id))
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := s.GetChat(ctx, chatID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: message %s", chatstore.ErrNotFound, id)
	}
	return m, err
}

// Messages implements chatstore.Store.
func (s *Store) Messages(ctx context.Context, chatID string) ([]*chatstore.Message, error) {
	if _, err := s.GetChat(ctx, chatID); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? ORDER BY seq`, chatID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*chatstore.Message{}
	for rows.Next() {
		m, err := scanMsg(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeleteMessages implements chatstore.Store.
func (s *Store) DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	res, err := tx.ExecContext(ctx, `UPDATE chats SET updated_at = ?, active_leaf_id = CASE WHEN ? = '' THEN active_leaf_id ELSE ? END WHERE id = ?`,
		ts(now()), activeLeafID, activeLeafID, chatID)
	if err != nil {
		return err
	}
	if err := affected(res, chatstore.ErrNotFound, "chat "+chatID); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE chat_id = ? AND id = ?`, chatID, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SetActiveLeaf implements chatstore.Store.
func (s *Store) SetActiveLeaf(ctx context.Context, chatID, msgID string) error {
	if msgID != "" {
		if _, err := s.GetMessage(ctx, chatID, msgID); err != nil {
			return err
		}
	}
	res, err := s.db.ExecContext(ctx, `UPDATE chats SET active_leaf_id = ?, updated_at = ? WHERE id = ?`, msgID, ts(now()), chatID)
	if err != nil {
		return err
	}
	return affected(res, chatstore.ErrNotFound, "chat "+chatID)
}

// Ping implements chatstore.Store.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Close implements chatstore.Store.
func (s *Store) Close() error { return s.db.Close() }
