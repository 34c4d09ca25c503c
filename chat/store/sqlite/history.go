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

// migrateBatch is how many runs one transaction of a data migration
// rewrites.
const migrateBatch = 100

// MigrateInlineHistory implements chat.HistoryMigrator: batches of runs
// in id order, each in one transaction on the writer.
func (s *Store) MigrateInlineHistory(ctx context.Context, rewrite func(chat.InlineRun, []*chat.Message) (any, bool)) (rewritten, kept int, err error) {
	var applied int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM chat_data_migrations WHERE name = ?`, historyMigration).Scan(&applied); err != nil {
		return 0, 0, fmt.Errorf("chat sqlite store: %s: %w", historyMigration, err)
	}
	if applied > 0 {
		return 0, 0, nil
	}
	after := ""
	for {
		var n, k int
		var last string
		var done bool
		err := s.update(ctx, historyMigration, func(tx *sql.Tx) error {
			n, k, last, done = 0, 0, after, false // fn may run again
			runs, err := inlineRuns(ctx, tx, after)
			if err != nil {
				return err
			}
			msgs := map[string][]*chat.Message{}
			for _, r := range runs {
				last = r.ID
				if _, ok := msgs[r.ChatID]; !ok {
					rows, err := tx.QueryContext(ctx, `SELECT `+msgCols+` FROM messages WHERE chat_id = ? ORDER BY seq`, r.ChatID)
					if err != nil {
						return err
					}
					if msgs[r.ChatID], err = collect(rows, scanMsg); err != nil {
						return err
					}
				}
				in, ok := rewrite(r, msgs[r.ChatID])
				if !ok {
					k++
					continue
				}
				b, err := json.Marshal(in)
				if err != nil {
					return fmt.Errorf("run %s: input: %w", r.ID, err)
				}
				if _, err := tx.ExecContext(ctx, `UPDATE runs SET input = ? WHERE id = ?`, string(b), r.ID); err != nil {
					return err
				}
				n++
			}
			if len(runs) < migrateBatch {
				done = true
				_, err := tx.ExecContext(ctx, `INSERT INTO chat_data_migrations (name, applied_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
					historyMigration, ts(now()))
				return err
			}
			return nil
		})
		if err != nil {
			return rewritten, kept, err
		}
		rewritten, kept, after = rewritten+n, kept+k, last
		if done {
			return rewritten, kept, nil
		}
	}
}

// inlineRuns reads the next batch of chat runs after id whose input has
// an inline history.
func inlineRuns(ctx context.Context, tx *sql.Tx, after string) ([]chat.InlineRun, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, chat_id, attrs, input FROM runs
		WHERE id > ? AND chat_id != '' AND json_type(input, '$.history') = 'array' ORDER BY id LIMIT ?`, after, migrateBatch)
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
