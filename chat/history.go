package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"chatgraph/nodes"
)

// A chat run's input names its history by reference (nodes.ChatInput
// HistoryFrom: the chat and the message the branch ends at) instead of
// copying it: the chat's messages are the one copy, and a run record
// stays the same size however long the chat grows. Entry agents resolve
// the reference through the historySource in the run's services.
//
// The history a run sees is the branch as it was when its turn started,
// also when the run is continued or recovered later: walking parent
// pointers from a fixed message only meets older messages, whose parent
// never changes afterwards (a rollback's delete re-parents only user
// messages of turns whose runs have not started: its own, and those
// written under a message it deletes, which wait behind it — see
// Store.DeleteMessages) and whose
// content is final — user and system messages never change, a completed
// assistant message cannot be continued — except assistant messages of
// runs that may still be continued (interrupted, cancelled, failed) or
// settled (pending, running after a crash). Their content at the turn's
// start is pinned in the reference. A message of the branch that is gone
// (a rollback deletes only the messages of the runs it undoes, which are
// never on the branch of a run that survives it) fails the resolution
// rather than giving the model a shorter history.

// branch returns the messages from id up to the root by parent, newest
// first; msgs are the chat's messages.
func branch(msgs []*Message, id string) ([]*Message, error) {
	byID := make(map[string]*Message, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	var out []*Message
	for id != "" {
		m := byID[id]
		if m == nil {
			return nil, fmt.Errorf("%w: message %s of the branch", ErrNotFound, id)
		}
		if len(out) > len(msgs) {
			return nil, fmt.Errorf("the branch at message %s has a cycle", id)
		}
		out = append(out, m)
		id = m.ParentID
	}
	return out, nil
}

// unstable reports whether m's content may still change: an assistant
// message not completed (its run may be continued, or its answer is not
// written yet).
func unstable(m *Message) bool {
	return m.Role == RoleAssistant && m.Status != StatusCompleted
}

// historyRef is the reference to the branch br (newest first, as branch
// returns it) of chat chatID, with the content of its unstable messages
// pinned; nil for an empty branch.
func historyRef(chatID string, br []*Message) *nodes.HistoryRef {
	if len(br) == 0 {
		return nil
	}
	ref := &nodes.HistoryRef{ChatID: chatID, MessageID: br[0].ID}
	for _, m := range br {
		if unstable(m) {
			if ref.Pinned == nil {
				ref.Pinned = map[string]string{}
			}
			ref.Pinned[m.ID] = m.Content
		}
	}
	return ref
}

// historyOf is what agents read of the branch br (newest first), oldest
// first: user and system messages and assistant messages with content,
// pinned content read instead of the message's.
func historyOf(br []*Message, pinned map[string]string) []nodes.Message {
	out := make([]nodes.Message, 0, len(br))
	for _, m := range slices.Backward(br) {
		content := m.Content
		if p, ok := pinned[m.ID]; ok {
			content = p
		}
		if m.Role == RoleUser || m.Role == RoleSystem || (m.Role == RoleAssistant && content != "") {
			out = append(out, nodes.Message{Role: string(m.Role), Content: content})
		}
	}
	return out
}

// historySource resolves the history references of one run's input from
// the chat store (nodes.HistorySource). It keeps what it resolved, so the
// run's agents (and each agent's node_started and execution) read the
// chat once; a new turn primes it with the history it built. Safe for
// concurrent use.
type historySource struct {
	chats Store
	mu    sync.Mutex
	known map[string][]nodes.Message
}

func newHistorySource(chats Store) *historySource {
	return &historySource{chats: chats, known: map[string][]nodes.Message{}}
}

func refKey(ref nodes.HistoryRef) string { return ref.ChatID + "\x00" + ref.MessageID }

func (h *historySource) prime(ref *nodes.HistoryRef, hist []nodes.Message) {
	if ref == nil {
		return
	}
	h.mu.Lock()
	h.known[refKey(*ref)] = hist
	h.mu.Unlock()
}

// History implements nodes.HistorySource.
func (h *historySource) History(ctx context.Context, ref nodes.HistoryRef) ([]nodes.Message, error) {
	h.mu.Lock()
	hist, ok := h.known[refKey(ref)]
	h.mu.Unlock()
	if ok {
		return hist, nil
	}
	hist, err := resolveHistory(ctx, h.chats, ref)
	if err != nil {
		return nil, err
	}
	h.prime(&ref, hist)
	return hist, nil
}

// resolveHistory reads the history ref names from the chat store.
func resolveHistory(ctx context.Context, chats Store, ref nodes.HistoryRef) ([]nodes.Message, error) {
	if ref.ChatID == "" || ref.MessageID == "" {
		return nil, errors.New("the history reference names no chat or message")
	}
	msgs, err := chats.Messages(ctx, ref.ChatID)
	if err != nil {
		return nil, fmt.Errorf("chat %s: %w", ref.ChatID, err)
	}
	br, err := branch(msgs, ref.MessageID)
	if err != nil {
		return nil, fmt.Errorf("chat %s: %w", ref.ChatID, err)
	}
	return historyOf(br, ref.Pinned), nil
}

// services are the run services of a chat run: its chat scope and its
// history source.
func (s *Service) services(scope nodes.ChatScope) (*nodes.Services, *historySource) {
	h := newHistorySource(s.chats)
	return &nodes.Services{Scope: scope, History: h}, h
}

// migrateBatch is how many runs one transaction of the history
// migration rewrites.
const migrateBatch = 100

// migrateHistory rewrites the stored inputs of chat runs that carry their
// history inline (written before runs referenced it) to the reference,
// once per database, when the store can (see HistoryMigrator).
func (s *Service) migrateHistory(ctx context.Context) {
	m, ok := s.chats.(HistoryMigrator)
	if !ok {
		return
	}
	var total HistoryBatch
	for {
		b, err := m.MigrateInlineHistory(ctx, total.Last, migrateBatch, referenceHistory)
		if err != nil {
			s.log.Warn("migrating run inputs to history references", "err", err)
			return
		}
		total.Rewritten += b.Rewritten
		total.Kept += b.Kept
		if b.Done {
			break
		}
		total.Last = b.Last
	}
	if total.Rewritten > 0 || total.Kept > 0 {
		s.log.Info("migrated run inputs to history references", "rewritten", total.Rewritten, "kept_inline", total.Kept)
	}
}

// referenceHistory is the input of run r with its inline history replaced
// by the reference to the same messages in its chat (msgs): only when the
// run's user message (attrs userMessageId, or the parent of its
// assistant message messageId) is there and the reference reads back
// exactly the history the run was given; otherwise false.
func referenceHistory(r InlineRun, msgs []*Message) (any, bool) {
	ci := nodes.AsChatInput(r.Input)
	if len(ci.History) == 0 || ci.HistoryFrom != nil {
		return nil, false
	}
	byID := make(map[string]*Message, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	userID, _ := r.Attrs["userMessageId"].(string)
	if userID == "" {
		mid, _ := r.Attrs["messageId"].(string)
		a := byID[mid]
		if a == nil {
			return nil, false
		}
		userID = a.ParentID
	}
	u := byID[userID]
	if u == nil || u.Role != RoleUser || u.ParentID == "" {
		return nil, false
	}
	br, err := branch(msgs, u.ParentID)
	if err != nil {
		return nil, false
	}
	ref := historyRef(r.ChatID, br)
	got := historyOf(br, ref.Pinned)
	if !slices.EqualFunc(got, ci.History, func(a, b nodes.Message) bool { return a.Role == b.Role && a.Content == b.Content }) {
		return nil, false
	}
	ci.History, ci.HistoryFrom = nil, ref
	return ci.Value(), true
}
