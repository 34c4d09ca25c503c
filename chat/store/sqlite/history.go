package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"chatgraph/chat"
)

var _ chat.HistoryMigrator = (*Store)(nil)

// historyMigration names the data migration of inline run histories in
// chat_data_migrations.
const historyMigration = "run inputs reference the chat history"

// MigrateInlineHistory implements chat.HistoryMigrator: one transaction
// on the writer.
func (s *Store) MigrateInlineHistory(ctx context.Context, after string, limit int, rewrite func(chat.InlineRun, []*chat.Message) (any, bool)) (chat.HistoryBatch, error) {
	var b chat.HistoryBatch
	err := s.update(ctx, historyMigration, func(tx *sql.Tx) error {
		b = chat.HistoryBatch{Last: after} // fn may run again
		var applied int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM chat_data_migrations WHERE name = ?`, historyMigration).Scan(&applied); err != nil {
			return err
		}
		if applied > 0 {
			b.Done = true
			return nil
		}
		runs, err := inlineRuns(ctx, tx, after, limit)
		if err != nil {
			return err
		}
		messages := func(chatID string) ([]*chat.Message, error) {
			rows, err := tx.QueryContext(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? ORDER BY seq`, chatID)
			if err != nil {
				return nil, err
			}
			return collect(rows, scanMsg)
		}
		setInput := func(runID string, input []byte) error {
			_, err := tx.ExecContext(ctx, `UPDATE runs SET input = ? WHERE id = ?`, string(input), runID)
			return err
		}
		if err := chat.RewriteInline(&b, runs, messages, setInput, rewrite); err != nil {
			return err
		}
		if len(runs) < limit {
			b.Done = true
			_, err := tx.ExecContext(ctx, `INSERT INTO chat_data_migrations (name, applied_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
				historyMigration, ts(s.now()))
			return err
		}
		return nil
	})
	return b, err
}

// inlineRuns reads the next batch of chat runs after id whose input has
// an inline history.
func inlineRuns(ctx context.Context, tx *sql.Tx, after string, limit int) ([]chat.InlineRun, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, chat_id, attrs, input FROM runs
		WHERE id > ? AND chat_id != '' AND json_type(input, '$.history') = 'array' ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(row scanner) (chat.InlineRun, error) {
		var r chat.InlineRun
		var attrs sql.NullString
		var input string
		if err := row.Scan(&r.ID, &r.ChatID, &attrs, &input); err != nil {
			return r, err
		}
		if attrs.Valid {
			if err := json.Unmarshal([]byte(attrs.String), &r.Attrs); err != nil {
				return r, fmt.Errorf("run %s: attrs: %w", r.ID, err)
			}
		}
		if err := json.Unmarshal([]byte(input), &r.Input); err != nil {
			return r, fmt.Errorf("run %s: input: %w", r.ID, err)
		}
		return r, nil
	})
}
