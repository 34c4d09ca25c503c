package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"chatgraph/chat"
)

var _ chat.HistoryMigrator = (*Store)(nil)

// historyMigration names the data migration of inline run histories in
// chat_data_migrations.
const historyMigration = "run inputs reference the chat history"

// MigrateInlineHistory implements chat.HistoryMigrator: one transaction
// that holds the migration's advisory lock in this schema (processes
// starting together take turns; the later find the work done) and locks
// the runs it reads.
func (s *Store) MigrateInlineHistory(ctx context.Context, after string, limit int, rewrite func(chat.InlineRun, []*chat.Message) (any, bool)) (chat.HistoryBatch, error) {
	b := chat.HistoryBatch{Last: after}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(s.schema, "history migration")); err != nil {
			return err
		}
		var applied bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chat_data_migrations WHERE name = $1)`, historyMigration).Scan(&applied); err != nil {
			return err
		}
		if applied {
			b.Done = true
			return nil
		}
		runs, err := inlineRuns(ctx, tx, after, limit)
		if err != nil {
			return err
		}
		messages := func(chatID string) ([]*chat.Message, error) {
			rows, err := tx.Query(ctx, `SELECT `+msgCols+` FROM chat_messages WHERE chat_id = $1 ORDER BY seq`, chatID)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*chat.Message, error) { return scanMsg(r) })
		}
		setInput := func(runID string, input []byte) error {
			_, err := tx.Exec(ctx, `UPDATE runs SET input = $1::json WHERE id = $2`, string(input), runID)
			return err
		}
		if err := chat.RewriteInline(&b, runs, messages, setInput, rewrite); err != nil {
			return err
		}
		if len(runs) < limit {
			b.Done = true
			_, err := tx.Exec(ctx, `INSERT INTO chat_data_migrations (name, applied_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
				historyMigration, s.now())
			return err
		}
		return nil
	})
	if err != nil {
		return chat.HistoryBatch{}, fmt.Errorf("chat/store/postgres: %s: %w", historyMigration, err)
	}
	return b, nil
}

// inlineRuns reads (and locks) the next batch of chat runs after id whose
// input has an inline history.
func inlineRuns(ctx context.Context, tx pgx.Tx, after string, limit int) ([]chat.InlineRun, error) {
	rows, err := tx.Query(ctx, `SELECT id, chat_id, attrs, input FROM runs
		WHERE id > $1 AND chat_id <> '' AND json_typeof(input -> 'history') = 'array' ORDER BY id LIMIT $2 FOR UPDATE`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (chat.InlineRun, error) {
		var r chat.InlineRun
		var attrs, input []byte
		if err := row.Scan(&r.ID, &r.ChatID, &attrs, &input); err != nil {
			return r, err
		}
		if len(attrs) > 0 {
			if err := json.Unmarshal(attrs, &r.Attrs); err != nil {
				return r, fmt.Errorf("run %s: attrs: %w", r.ID, err)
			}
		}
		if err := json.Unmarshal(input, &r.Input); err != nil {
			return r, fmt.Errorf("run %s: input: %w", r.ID, err)
		}
		return r, nil
	})
}
