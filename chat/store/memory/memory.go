package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// Store is the in-process chat.Store (lost on exit), beside the run store
// it was opened with. Safe for concurrent use.
type Store struct {
	runs runtime.Store

	mu       sync.RWMutex
	graphs   map[string]*chat.Graph
	versions map[string]int64 // last planVersion of every id ever used
	history  map[string]map[int64]*chat.Graph
	chats    map[string]*memChat
	seq      int64            // the last message's Seq
	clock    func() time.Time // time.Now; a test's clock (export_test.go's SetNow)
	// expiring are the tombstones of every chat in the order they were
	// written, for DeleteMessages to delete the expired ones of any chat
	// (as the durable stores do), not only of the chat it deletes in.
	expiring []tombstoneRef
}

type memChat struct {
	chat     chat.Chat
	msgs     []*chat.Message
	index    map[string]*chat.Message
	requests map[string]chat.RequestRecord // by id (Turn.Request)
	// gone are the tombstones of the deleted messages, by id: where each
	// leads (a message there, or "" for the root) and when it was deleted.
	gone map[string]tombstone
}

type tombstone struct {
	leadsTo string
	at      time.Time
}

// live reports whether a tombstone written at at still leads at now:
// for TombstoneTTL after its delete, as the durable stores' deleted_at >
// now - TombstoneTTL.
func live(at, now time.Time) bool { return now.Sub(at) < chat.TombstoneTTL }

// tombstoneRef names the tombstone of message id of chat chatID written
// at at (Store.expiring).
type tombstoneRef struct {
	chatID, id string
	at         time.Time
}

var _ chat.Store = (*Store)(nil)

// New returns an empty store whose turns reserve their runs in runs (not
// nil; usually a runtime/store/memory store, but any runtime.Store does).
func New(runs runtime.Store) *Store {
	return &Store{runs: runs, graphs: map[string]*chat.Graph{}, versions: map[string]int64{},
		history: map[string]map[int64]*chat.Graph{}, chats: map[string]*memChat{}, clock: time.Now}
}

// now is the time the store writes (and dates tombstones by).
func (s *Store) now() time.Time { return s.clock() }

func copyGraph(g *chat.Graph) *chat.Graph {
	c := *g
	c.Body = append([]byte(nil), g.Body...)
	return &c
}

func copyMsg(m *chat.Message) *chat.Message {
	c := *m
	c.UserTools = slices.Clone(m.UserTools)
	return &c
}

// CreateGraph implements chat.Store.
func (s *Store) CreateGraph(_ context.Context, g *chat.Graph) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.graphs[g.ID]; ok {
		return fmt.Errorf("%w: graph %s exists", chat.ErrConflict, g.ID)
	}
	now := s.now().UTC()
	g.PlanVersion = s.versions[g.ID] + 1
	g.CreatedAt, g.UpdatedAt = now, now
	s.versions[g.ID] = g.PlanVersion
	s.graphs[g.ID] = copyGraph(g)
	s.keep(g)
	return nil
}

func (s *Store) keep(g *chat.Graph) {
	if s.history[g.ID] == nil {
		s.history[g.ID] = map[int64]*chat.Graph{}
	}
	s.history[g.ID][g.PlanVersion] = copyGraph(g)
}

// GetGraphVersion implements chat.Store.
func (s *Store) GetGraphVersion(_ context.Context, id string, version int64) (*chat.Graph, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.history[id][version]
	if !ok {
		return nil, fmt.Errorf("%w: graph %s version %d", chat.ErrNotFound, id, version)
	}
	return copyGraph(g), nil
}

// GetGraph implements chat.Store.
func (s *Store) GetGraph(_ context.Context, id string) (*chat.Graph, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.graphs[id]
	if !ok {
		return nil, fmt.Errorf("%w: graph %s", chat.ErrNotFound, id)
	}
	return copyGraph(g), nil
}

// ListGraphs implements chat.Store.
func (s *Store) ListGraphs(_ context.Context, p chat.Page) ([]*chat.Graph, error) {
	s.mu.RLock()
	out := make([]*chat.Graph, 0, len(s.graphs))
	for _, g := range s.graphs {
		out = append(out, copyGraph(g))
	}
	s.mu.RUnlock()
	sortGraphs(out)
	return page(out, p, func(g *chat.Graph) chat.Cursor { return chat.Cursor{At: g.UpdatedAt, ID: g.ID} }), nil
}

// GraphsNamed implements chat.Store.
func (s *Store) GraphsNamed(_ context.Context, name string, limit int) ([]*chat.Graph, error) {
	s.mu.RLock()
	var out []*chat.Graph
	for _, g := range s.graphs {
		if g.Name == name {
			out = append(out, copyGraph(g))
		}
	}
	s.mu.RUnlock()
	sortGraphs(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// sortGraphs puts gs in ListGraphs' order: most recently updated first,
// ties by id.
func sortGraphs(gs []*chat.Graph) {
	sort.Slice(gs, func(i, j int) bool {
		if !gs[i].UpdatedAt.Equal(gs[j].UpdatedAt) {
			return gs[i].UpdatedAt.After(gs[j].UpdatedAt)
		}
		return gs[i].ID < gs[j].ID
	})
}

// UpdateGraph implements chat.Store.
func (s *Store) UpdateGraph(_ context.Context, g *chat.Graph, ifVersion int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.graphs[g.ID]
	if !ok {
		return fmt.Errorf("%w: graph %s", chat.ErrNotFound, g.ID)
	}
	if ifVersion > 0 && old.PlanVersion != ifVersion {
		return fmt.Errorf("%w: graph %s is at planVersion %d, not %d", chat.ErrConflict, g.ID, old.PlanVersion, ifVersion)
	}
	g.PlanVersion = old.PlanVersion + 1
	g.CreatedAt, g.UpdatedAt = old.CreatedAt, s.now().UTC()
	s.versions[g.ID] = g.PlanVersion
	s.graphs[g.ID] = copyGraph(g)
	s.keep(g)
	return nil
}

// DeleteGraph implements chat.Store.
func (s *Store) DeleteGraph(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.graphs[id]; !ok {
		return fmt.Errorf("%w: graph %s", chat.ErrNotFound, id)
	}
	delete(s.graphs, id)
	return nil
}

// CreateChat implements chat.Store.
func (s *Store) CreateChat(_ context.Context, c *chat.Chat, maxOwned int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.chats[c.ID]; ok {
		return fmt.Errorf("%w: chat %s exists", chat.ErrConflict, c.ID)
	}
	if c.Owner != "" && maxOwned > 0 {
		n := 0
		for _, mc := range s.chats {
			if mc.chat.Owner == c.Owner {
				n++
			}
		}
		if n >= maxOwned {
			return fmt.Errorf("%w: the limit is %d per client", chat.ErrTooManyChats, maxOwned)
		}
	}
	now := s.now().UTC()
	c.CreatedAt, c.UpdatedAt = now, now
	s.chats[c.ID] = &memChat{chat: *c, index: map[string]*chat.Message{}}
	return nil
}

func (s *Store) chat(id string) (*memChat, error) {
	c, ok := s.chats[id]
	if !ok {
		return nil, fmt.Errorf("%w: chat %s", chat.ErrNotFound, id)
	}
	return c, nil
}

// GetChat implements chat.Store.
func (s *Store) GetChat(_ context.Context, id string) (*chat.Chat, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(id)
	if err != nil {
		return nil, err
	}
	cc := c.chat
	return &cc, nil
}

// GetChatGraph implements chat.Store.
func (s *Store) GetChatGraph(_ context.Context, id string) (*chat.Chat, *chat.Graph, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(id)
	if err != nil {
		return nil, nil, err
	}
	cc := c.chat
	var g *chat.Graph
	if rec, ok := s.graphs[cc.GraphID]; ok {
		g = copyGraph(rec)
	}
	return &cc, g, nil
}

// ListChats implements chat.Store.
func (s *Store) ListChats(_ context.Context, graphID string, p chat.Page) ([]*chat.Chat, error) {
	s.mu.RLock()
	var out []*chat.Chat
	for _, c := range s.chats {
		if graphID == "" || c.chat.GraphID == graphID {
			cc := c.chat
			out = append(out, &cc)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	if out == nil {
		out = []*chat.Chat{}
	}
	return page(out, p, func(c *chat.Chat) chat.Cursor { return chat.Cursor{At: c.CreatedAt, ID: c.ID} }), nil
}

// page cuts one page out of a list sorted newest first (ties by id).
func page[T any](all []T, p chat.Page, pos func(T) chat.Cursor) []T {
	if !p.After.IsZero() {
		i := 0
		for ; i < len(all); i++ {
			c := pos(all[i])
			if c.At.Before(p.After.At) || c.At.Equal(p.After.At) && c.ID > p.After.ID {
				break
			}
		}
		all = all[i:]
	}
	if p.Limit > 0 && len(all) > p.Limit {
		all = all[:p.Limit]
	}
	return all
}

// DeleteChat implements chat.Store.
func (s *Store) DeleteChat(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.chat(id); err != nil {
		return err
	}
	delete(s.chats, id)
	return nil
}

// BeginTurn implements chat.Store. Under the store's lock (which
// DeleteMessages takes too) it checks the whole turn (ids free, each
// parent there or where its deletion led), reserves the run (runs.CreateRun of the pending record,
// after checking the id is free: CreateRun would replace another
// reservation) and only then applies the messages, so a refused turn
// leaves nothing. Writers of the run store other than this chat store
// are not under the lock: one creating the same run id between the check
// and the reservation is not detected — in one process, run ids are
// unique and only a turn reserves them.
func (s *Store) BeginTurn(ctx context.Context, t chat.Turn) error {
	if err := checkRun(t.Run); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(t.ChatID)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	parents := make([]string, len(t.Messages))
	for i, m := range t.Messages {
		if _, ok := c.index[m.ID]; ok || seen[m.ID] {
			return fmt.Errorf("%w: message %s exists", chat.ErrConflict, m.ID)
		}
		parents[i] = m.ParentID
		if !seen[m.ParentID] {
			if parents[i], err = s.remains(c, m.ParentID); err != nil {
				return fmt.Errorf("parent of message %s: %w", m.ID, err)
			}
		}
		seen[m.ID] = true
	}
	if r := t.Request; r != nil {
		if _, ok := c.requests[r.ID]; ok {
			return fmt.Errorf("%w: request %s of chat %s", chat.ErrRequestTaken, r.ID, t.ChatID)
		}
	}
	var claimed *chat.Message
	if t.Claim != nil {
		m, ok := c.index[t.Claim.MessageID]
		if !ok {
			return fmt.Errorf("%w: message %s", chat.ErrNotFound, t.Claim.MessageID)
		}
		if m.RunID != t.Claim.FromRunID {
			return fmt.Errorf("%w: message %s belongs to run %s, not %s", chat.ErrConflict, m.ID, m.RunID, t.Claim.FromRunID)
		}
		claimed = m
	}
	switch _, err := s.runs.GetRun(ctx, t.Run.ID); {
	case err == nil:
		return runTaken(t.Run.ID)
	case !errors.Is(err, runtime.ErrRunNotFound):
		return fmt.Errorf("chat memory store: reserve run %s: %w", t.Run.ID, err)
	}
	if err := s.runs.CreateRun(ctx, t.Run); errors.Is(err, runtime.ErrRunExists) {
		return runTaken(t.Run.ID)
	} else if err != nil {
		return fmt.Errorf("chat memory store: reserve run %s: %w", t.Run.ID, err)
	}

	now := s.now().UTC()
	for i, m := range t.Messages {
		m.ChatID, m.ParentID = t.ChatID, parents[i]
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.UpdatedAt = now
		cm := copyMsg(m)
		s.seq++
		cm.Seq = s.seq
		c.msgs = append(c.msgs, cm)
		c.index[m.ID] = cm
	}
	if claimed != nil {
		claimed.RunID, claimed.Status, claimed.Error, claimed.UpdatedAt = t.Run.ID, chat.StatusPending, "", now
	}
	if r := t.Request; r != nil {
		if c.requests == nil {
			c.requests = map[string]chat.RequestRecord{}
		}
		rec := *r
		rec.CreatedAt = now
		c.requests[r.ID] = rec
	}
	if t.ActiveLeafID != "" {
		c.chat.ActiveLeafID = t.ActiveLeafID
	}
	c.chat.UpdatedAt = now
	return nil
}

// checkRun refuses a turn without a reservation.
func checkRun(r *runtime.RunRecord) error {
	if r == nil {
		return errors.New("chat memory store: a turn needs its run's reservation (Turn.Run)")
	}
	if r.Status != runtime.RunPending {
		return fmt.Errorf("chat memory store: reservation of run %s is %q, not %q", r.ID, r.Status, runtime.RunPending)
	}
	return nil
}

func runTaken(id string) error {
	return fmt.Errorf("%w: run %s: %w", chat.ErrConflict, id, runtime.ErrRunExists)
}

// UpdateMessage implements chat.Store.
func (s *Store) UpdateMessage(_ context.Context, m *chat.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.message(m.ChatID, m.ID)
	if err != nil {
		return err
	}
	old.Content, old.Status, old.RunID, old.Error = m.Content, m.Status, m.RunID, m.Error
	old.UpdatedAt = s.now().UTC()
	m.UpdatedAt = old.UpdatedAt
	return nil
}

// FinishMessage implements chat.Store.
func (s *Store) FinishMessage(_ context.Context, m *chat.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.message(m.ChatID, m.ID)
	if err != nil {
		return err
	}
	if old.RunID != m.RunID {
		return fmt.Errorf("%w: message %s belongs to run %s, not %s", chat.ErrConflict, m.ID, old.RunID, m.RunID)
	}
	old.Content, old.Status, old.Error = m.Content, m.Status, m.Error
	old.UpdatedAt = s.now().UTC()
	m.UpdatedAt = old.UpdatedAt
	return nil
}

// message returns the stored message (under s.mu).
func (s *Store) message(chatID, id string) (*chat.Message, error) {
	c, err := s.chat(chatID)
	if err != nil {
		return nil, err
	}
	m, ok := c.index[id]
	if !ok {
		return nil, fmt.Errorf("%w: message %s", chat.ErrNotFound, id)
	}
	return m, nil
}

// GetMessage implements chat.Store.
func (s *Store) GetMessage(_ context.Context, chatID, id string) (*chat.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, err := s.message(chatID, id)
	if err != nil {
		return nil, err
	}
	return copyMsg(m), nil
}

// Messages implements chat.Store.
func (s *Store) Messages(ctx context.Context, chatID string) ([]*chat.Message, error) {
	return s.ListMessages(ctx, chatID, 0, 0)
}

// ListMessages implements chat.Store.
func (s *Store) ListMessages(_ context.Context, chatID string, after int64, limit int) ([]*chat.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(chatID)
	if err != nil {
		return nil, err
	}
	i, _ := slices.BinarySearchFunc(c.msgs, after+1, func(m *chat.Message, seq int64) int { return cmp.Compare(m.Seq, seq) })
	msgs := c.msgs[i:]
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[:limit]
	}
	out := make([]*chat.Message, len(msgs))
	for i, m := range msgs {
		out[i] = copyMsg(m)
	}
	return out, nil
}

// Unsettled implements chat.Store.
func (s *Store) Unsettled(_ context.Context, limit int) ([]*chat.Message, error) {
	s.mu.RLock()
	var out []*chat.Message
	for _, c := range s.chats {
		for _, m := range c.msgs {
			if m.Role == chat.RoleAssistant && !m.Status.Settled() {
				out = append(out, copyMsg(m))
			}
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *chat.Message) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	return out[:min(limit, len(out))], nil
}

// DeleteMessages implements chat.Store, under the store's lock (which
// BeginTurn takes too).
func (s *Store) DeleteMessages(_ context.Context, chatID string, ids []string, activeLeafID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	now := s.now().UTC()
	parents := map[string]string{}
	for _, id := range ids {
		if m, ok := c.index[id]; ok {
			parents[id] = m.ParentID
		}
	}
	gone, leads := chat.Remaining(parents)
	lead := make(map[string]string, len(gone))
	for i, id := range gone {
		lead[id] = leads[i]
	}
	// remains is where a message under id now hangs.
	remains := func(id string) string {
		if to, ok := lead[id]; ok {
			return to
		}
		return id
	}
	if c.gone == nil {
		c.gone = map[string]tombstone{}
	}
	s.sweep(now)
	maps.DeleteFunc(c.gone, func(_ string, g tombstone) bool { return !live(g.at, now) })
	for id, g := range c.gone {
		c.gone[id] = tombstone{remains(g.leadsTo), g.at}
	}
	for id, to := range lead {
		c.gone[id] = tombstone{to, now}
		s.expiring = append(s.expiring, tombstoneRef{chatID, id, now})
		delete(c.index, id)
	}
	c.msgs = slices.DeleteFunc(c.msgs, func(m *chat.Message) bool { _, ok := lead[m.ID]; return ok })
	for _, m := range c.msgs {
		if to := remains(m.ParentID); to != m.ParentID {
			m.ParentID, m.UpdatedAt = to, now
		}
	}
	maps.DeleteFunc(c.requests, func(_ string, r chat.RequestRecord) bool { _, ok := lead[r.Ticket.MessageID]; return ok })
	if activeLeafID != "" {
		c.chat.ActiveLeafID = activeLeafID
	}
	c.chat.ActiveLeafID = remains(c.chat.ActiveLeafID)
	c.chat.UpdatedAt = now
	return nil
}

// sweep deletes the expired tombstones of every chat, oldest first
// (under s.mu). Each is looked at once, when it expires; one a later
// delete replaced, or whose chat is gone, is only dropped from the list.
// (A wall clock set back leaves the tombstones after it to a later sweep.)
func (s *Store) sweep(now time.Time) {
	n := 0
	for _, r := range s.expiring {
		if live(r.at, now) {
			break
		}
		if c, ok := s.chats[r.chatID]; ok && c.gone[r.id].at.Equal(r.at) {
			delete(c.gone, r.id)
		}
		n++
	}
	s.expiring = s.expiring[n:]
}

// Remains implements chat.Store.
func (s *Store) Remains(_ context.Context, chatID, id string) (string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(chatID)
	if err != nil {
		return "", err
	}
	return s.remains(c, id)
}

// remains is where a message written under id hangs (under s.mu): id if
// it is there (or the root), else where its tombstone leads.
func (s *Store) remains(c *memChat, id string) (string, error) {
	if _, ok := c.index[id]; ok || id == "" {
		return id, nil
	}
	if g, ok := c.gone[id]; ok && live(g.at, s.now().UTC()) {
		return g.leadsTo, nil
	}
	return "", fmt.Errorf("%w: message %s", chat.ErrNotFound, id)
}

// GetRequest implements chat.Store.
func (s *Store) GetRequest(_ context.Context, chatID, id string) (*chat.RequestRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(chatID)
	if err != nil {
		return nil, err
	}
	r, ok := c.requests[id]
	if !ok {
		return nil, fmt.Errorf("%w: request %s of chat %s", chat.ErrNotFound, id, chatID)
	}
	return &r, nil
}

// SetActiveLeaf implements chat.Store.
func (s *Store) SetActiveLeaf(_ context.Context, chatID, msgID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	if _, ok := c.index[msgID]; !ok && msgID != "" {
		return fmt.Errorf("%w: message %s", chat.ErrNotFound, msgID)
	}
	c.chat.ActiveLeafID = msgID
	c.chat.UpdatedAt = s.now().UTC()
	return nil
}

// Ping implements chat.Store: the memory store is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// Close implements chat.Store. It holds nothing and leaves the run store
// open.
func (s *Store) Close() error { return nil }
