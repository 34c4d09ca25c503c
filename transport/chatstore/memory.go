package chatstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Memory is the in-process Store (lost on exit). Safe for concurrent use.
type Memory struct {
	mu       sync.RWMutex
	graphs   map[string]*Graph
	versions map[string]int64 // last planVersion of every id ever used
	history  map[string]map[int64]*Graph
	chats    map[string]*memChat
	now      func() time.Time
}

type memChat struct {
	chat  Chat
	msgs  []*Message
	index map[string]*Message
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{graphs: map[string]*Graph{}, versions: map[string]int64{}, history: map[string]map[int64]*Graph{}, chats: map[string]*memChat{}, now: time.Now}
}

func copyGraph(g *Graph) *Graph {
	c := *g
	c.Body = append([]byte(nil), g.Body...)
	return &c
}

func copyMsg(m *Message) *Message {
	c := *m
	c.UserTools = slices.Clone(m.UserTools)
	return &c
}

// CreateGraph implements Store.
func (s *Memory) CreateGraph(_ context.Context, g *Graph) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.graphs[g.ID]; ok {
		return fmt.Errorf("%w: graph %s exists", ErrConflict, g.ID)
	}
	now := s.now().UTC()
	g.PlanVersion = s.versions[g.ID] + 1
	g.CreatedAt, g.UpdatedAt = now, now
	s.versions[g.ID] = g.PlanVersion
	s.graphs[g.ID] = copyGraph(g)
	s.keep(g)
	return nil
}

func (s *Memory) keep(g *Graph) {
	if s.history[g.ID] == nil {
		s.history[g.ID] = map[int64]*Graph{}
	}
	s.history[g.ID][g.PlanVersion] = copyGraph(g)
}

// GetGraphVersion implements Store.
func (s *Memory) GetGraphVersion(_ context.Context, id string, version int64) (*Graph, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.history[id][version]
	if !ok {
		return nil, fmt.Errorf("%w: graph %s version %d", ErrNotFound, id, version)
	}
	return copyGraph(g), nil
}

// GetGraph implements Store.
func (s *Memory) GetGraph(_ context.Context, id string) (*Graph, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.graphs[id]
	if !ok {
		return nil, fmt.Errorf("%w: graph %s", ErrNotFound, id)
	}
	return copyGraph(g), nil
}

// ListGraphs implements Store.
func (s *Memory) ListGraphs(_ context.Context) ([]*Graph, error) {
	s.mu.RLock()
	out := make([]*Graph, 0, len(s.graphs))
	for _, g := range s.graphs {
		out = append(out, copyGraph(g))
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].UpdatedAt.Equal(out[j].UpdatedAt) {
			return out[i].UpdatedAt.After(out[j].UpdatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// UpdateGraph implements Store.
func (s *Memory) UpdateGraph(_ context.Context, g *Graph, ifVersion int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.graphs[g.ID]
	if !ok {
		return fmt.Errorf("%w: graph %s", ErrNotFound, g.ID)
	}
	if ifVersion > 0 && old.PlanVersion != ifVersion {
		return fmt.Errorf("%w: graph %s is at planVersion %d, not %d", ErrConflict, g.ID, old.PlanVersion, ifVersion)
	}
	g.PlanVersion = old.PlanVersion + 1
	g.CreatedAt, g.UpdatedAt = old.CreatedAt, s.now().UTC()
	s.versions[g.ID] = g.PlanVersion
	s.graphs[g.ID] = copyGraph(g)
	s.keep(g)
	return nil
}

// DeleteGraph implements Store.
func (s *Memory) DeleteGraph(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.graphs[id]; !ok {
		return fmt.Errorf("%w: graph %s", ErrNotFound, id)
	}
	delete(s.graphs, id)
	return nil
}

// CreateChat implements Store.
func (s *Memory) CreateChat(_ context.Context, c *Chat) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.chats[c.ID]; ok {
		return fmt.Errorf("%w: chat %s exists", ErrConflict, c.ID)
	}
	now := s.now().UTC()
	c.CreatedAt, c.UpdatedAt = now, now
	s.chats[c.ID] = &memChat{chat: *c, index: map[string]*Message{}}
	return nil
}

func (s *Memory) chat(id string) (*memChat, error) {
	c, ok := s.chats[id]
	if !ok {
		return nil, fmt.Errorf("%w: chat %s", ErrNotFound, id)
	}
	return c, nil
}

// GetChat implements Store.
func (s *Memory) GetChat(_ context.Context, id string) (*Chat, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(id)
	if err != nil {
		return nil, err
	}
	cc := c.chat
	return &cc, nil
}

// ListChats implements Store.
func (s *Memory) ListChats(_ context.Context, graphID string) ([]*Chat, error) {
	s.mu.RLock()
	var out []*Chat
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
	return out, nil
}

// DeleteChat implements Store.
func (s *Memory) DeleteChat(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.chat(id); err != nil {
		return err
	}
	delete(s.chats, id)
	return nil
}

// AddMessages implements Store.
func (s *Memory) AddMessages(_ context.Context, chatID, activeLeafID string, msgs ...*Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if _, ok := c.index[m.ID]; ok || seen[m.ID] {
			return fmt.Errorf("%w: message %s exists", ErrConflict, m.ID)
		}
		seen[m.ID] = true
	}
	now := s.now().UTC()
	for _, m := range msgs {
		m.ChatID = chatID
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.UpdatedAt = now
		cm := copyMsg(m)
		c.msgs = append(c.msgs, cm)
		c.index[m.ID] = cm
	}
	if activeLeafID != "" {
		c.chat.ActiveLeafID = activeLeafID
	}
	c.chat.UpdatedAt = now
	return nil
}

// UpdateMessage implements Store.
func (s *Memory) UpdateMessage(_ context.Context, m *Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(m.ChatID)
	if err != nil {
		return err
	}
	old, ok := c.index[m.ID]
	if !ok {
		return fmt.Errorf("%w: message %s", ErrNotFound, m.ID)
	}
	old.Content, old.Status, old.RunID, old.Error, old.ParentID = m.Content, m.Status, m.RunID, m.Error, m.ParentID
	old.UpdatedAt = s.now().UTC()
	m.UpdatedAt = old.UpdatedAt
	return nil
}

// ClaimMessage implements Store.
func (s *Memory) ClaimMessage(_ context.Context, chatID, msgID, fromRunID, toRunID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	m, ok := c.index[msgID]
	if !ok {
		return fmt.Errorf("%w: message %s", ErrNotFound, msgID)
	}
	if m.RunID != fromRunID || !Continuable(m.Status) {
		return fmt.Errorf("%w: message %s is %s (run %s)", ErrConflict, msgID, m.Status, m.RunID)
	}
	m.RunID, m.Status, m.Error, m.UpdatedAt = toRunID, StatusPending, "", s.now().UTC()
	return nil
}

// GetMessage implements Store.
func (s *Memory) GetMessage(_ context.Context, chatID, id string) (*Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(chatID)
	if err != nil {
		return nil, err
	}
	m, ok := c.index[id]
	if !ok {
		return nil, fmt.Errorf("%w: message %s", ErrNotFound, id)
	}
	return copyMsg(m), nil
}

// Messages implements Store.
func (s *Memory) Messages(_ context.Context, chatID string) ([]*Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.chat(chatID)
	if err != nil {
		return nil, err
	}
	out := make([]*Message, len(c.msgs))
	for i, m := range c.msgs {
		out[i] = copyMsg(m)
	}
	return out, nil
}

// DeleteMessages implements Store.
func (s *Memory) DeleteMessages(_ context.Context, chatID string, ids []string, activeLeafID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	del := map[string]bool{}
	for _, id := range ids {
		del[id] = true
		delete(c.index, id)
	}
	c.msgs = slices.DeleteFunc(c.msgs, func(m *Message) bool { return del[m.ID] })
	if activeLeafID != "" {
		c.chat.ActiveLeafID = activeLeafID
	}
	c.chat.UpdatedAt = s.now().UTC()
	return nil
}

// SetActiveLeaf implements Store.
func (s *Memory) SetActiveLeaf(_ context.Context, chatID, msgID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.chat(chatID)
	if err != nil {
		return err
	}
	if _, ok := c.index[msgID]; !ok && msgID != "" {
		return fmt.Errorf("%w: message %s", ErrNotFound, msgID)
	}
	c.chat.ActiveLeafID = msgID
	c.chat.UpdatedAt = s.now().UTC()
	return nil
}

// Ping implements Store.
func (s *Memory) Ping(context.Context) error { return nil }

// Close implements Store.
func (s *Memory) Close() error { return nil }
