package chatstoretest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/transport/chatstore"
)

// Run runs the suite; newStore returns an empty store for one subtest
// (the suite closes it).
func Run(t *testing.T, newStore func(t *testing.T) chatstore.Store) {
	open := func(t *testing.T) chatstore.Store {
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx := context.Background()

	t.Run("graphs", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		g := &chatstore.Graph{ID: "g1", Name: "one", Body: json.RawMessage(`{"id":"g1","nodes":[]}`)}
		require.NoError(t, s.CreateGraph(ctx, g))
		require.EqualValues(t, 1, g.PlanVersion)
		require.ErrorIs(t, s.CreateGraph(ctx, &chatstore.Graph{ID: "g1", Body: json.RawMessage(`{}`)}), chatstore.ErrConflict)
		got, err := s.GetGraph(ctx, "g1")
		require.NoError(t, err)
		require.Equal(t, "one", got.Name)
		require.JSONEq(t, `{"id":"g1","nodes":[]}`, string(got.Body))

		g2 := &chatstore.Graph{ID: "g1", Name: "two", Body: json.RawMessage(`{"x":2}`)}
		require.NoError(t, s.UpdateGraph(ctx, g2, 0))
		require.EqualValues(t, 2, g2.PlanVersion)
		require.ErrorIs(t, s.UpdateGraph(ctx, &chatstore.Graph{ID: "g1", Body: json.RawMessage(`{}`)}, 1), chatstore.ErrConflict)
		require.NoError(t, s.UpdateGraph(ctx, &chatstore.Graph{ID: "g1", Name: "three", Body: json.RawMessage(`{}`)}, 2))
		got, err = s.GetGraph(ctx, "g1")
		require.NoError(t, err)
		require.EqualValues(t, 3, got.PlanVersion)
		require.Equal(t, "three", got.Name)

		v1, err := s.GetGraphVersion(ctx, "g1", 1)
		require.NoError(t, err)
		require.Equal(t, "one", v1.Name)
		require.JSONEq(t, `{"id":"g1","nodes":[]}`, string(v1.Body))
		_, err = s.GetGraphVersion(ctx, "g1", 9)
		require.ErrorIs(t, err, chatstore.ErrNotFound)

		require.ErrorIs(t, s.UpdateGraph(ctx, &chatstore.Graph{ID: "nope", Body: json.RawMessage(`{}`)}, 0), chatstore.ErrNotFound)
		_, err = s.GetGraph(ctx, "nope")
		require.ErrorIs(t, err, chatstore.ErrNotFound)

		require.NoError(t, s.CreateGraph(ctx, &chatstore.Graph{ID: "g2", Body: json.RawMessage(`{}`)}))
		list, err := s.ListGraphs(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)

		require.NoError(t, s.DeleteGraph(ctx, "g1"))
		require.ErrorIs(t, s.DeleteGraph(ctx, "g1"), chatstore.ErrNotFound)
		_, err = s.GetGraph(ctx, "g1")
		require.ErrorIs(t, err, chatstore.ErrNotFound)
		_, err = s.GetGraphVersion(ctx, "g1", 3)
		require.NoError(t, err, "old versions outlive a delete")
		// A re-created id continues its versions: cached plans never apply.
		g3 := &chatstore.Graph{ID: "g1", Body: json.RawMessage(`{}`)}
		require.NoError(t, s.CreateGraph(ctx, g3))
		require.EqualValues(t, 4, g3.PlanVersion)
	})

	t.Run("chats and message trees", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		c := &chatstore.Chat{ID: "c1", GraphID: "g1"}
		require.NoError(t, s.CreateChat(ctx, c))
		require.ErrorIs(t, s.CreateChat(ctx, &chatstore.Chat{ID: "c1", GraphID: "g1"}), chatstore.ErrConflict)
		require.False(t, c.CreatedAt.IsZero())

		u1 := &chatstore.Message{ID: "u1", Role: chatstore.RoleUser, Content: "hi", Status: chatstore.StatusCompleted, UserTools: []string{"calculator"}}
		a1 := &chatstore.Message{ID: "a1", ParentID: "u1", Role: chatstore.RoleAssistant, RunID: "r1", TurnRunID: "r1", Status: chatstore.StatusPending, AgentNodeID: "ag"}
		require.NoError(t, s.AddMessages(ctx, "c1", "a1", u1, a1))
		require.ErrorIs(t, s.AddMessages(ctx, "c1", "", &chatstore.Message{ID: "u1", Role: "user"}), chatstore.ErrConflict)
		require.ErrorIs(t, s.AddMessages(ctx, "nope", "", &chatstore.Message{ID: "x", Role: "user"}), chatstore.ErrNotFound)

		got, err := s.GetChat(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, "a1", got.ActiveLeafID)

		a1.Content, a1.Status = "echo: hi", chatstore.StatusInterrupted
		require.NoError(t, s.UpdateMessage(ctx, a1))
		m, err := s.GetMessage(ctx, "c1", "a1")
		require.NoError(t, err)
		require.Equal(t, "echo: hi", m.Content)
		require.Equal(t, "ag", m.AgentNodeID)
		require.Equal(t, "u1", m.ParentID)
		require.Equal(t, "r1", m.TurnRunID)
		m, err = s.GetMessage(ctx, "c1", "u1")
		require.NoError(t, err)
		require.Equal(t, []string{"calculator"}, m.UserTools)

		// Continue: exactly one claim wins.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.ClaimMessage(ctx, "c1", "a1", "r1", fmt.Sprintf("r2-%d", i)) == nil {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, wins.Load())
		m, err = s.GetMessage(ctx, "c1", "a1")
		require.NoError(t, err)
		require.Equal(t, chatstore.StatusPending, m.Status)
		require.ErrorIs(t, s.ClaimMessage(ctx, "c1", "a1", "r1", "r3"), chatstore.ErrConflict)
		require.ErrorIs(t, s.ClaimMessage(ctx, "c1", "zz", "r1", "r3"), chatstore.ErrNotFound)

		// A sibling answer (retry) never overwrites.
		a2 := &chatstore.Message{ID: "a2", ParentID: "u1", Role: chatstore.RoleAssistant, RunID: "r9", Status: chatstore.StatusPending}
		require.NoError(t, s.AddMessages(ctx, "c1", "a2", a2))
		msgs, err := s.Messages(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		require.Equal(t, []string{"u1", "a1", "a2"}, []string{msgs[0].ID, msgs[1].ID, msgs[2].ID})

		require.NoError(t, s.SetActiveLeaf(ctx, "c1", "a1"))
		require.ErrorIs(t, s.SetActiveLeaf(ctx, "c1", "zz"), chatstore.ErrNotFound)
		require.NoError(t, s.DeleteMessages(ctx, "c1", []string{"a2"}, "a1"))
		msgs, err = s.Messages(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, msgs, 2)

		require.NoError(t, s.CreateChat(ctx, &chatstore.Chat{ID: "c2", GraphID: "g2"}))
		list, err := s.ListChats(ctx, "g1")
		require.NoError(t, err)
		require.Len(t, list, 1)
		list, err = s.ListChats(ctx, "")
		require.NoError(t, err)
		require.Len(t, list, 2)

		require.NoError(t, s.DeleteChat(ctx, "c1"))
		_, err = s.GetChat(ctx, "c1")
		require.ErrorIs(t, err, chatstore.ErrNotFound)
		_, err = s.Messages(ctx, "c1")
		require.ErrorIs(t, err, chatstore.ErrNotFound)
		require.NoError(t, s.Ping(ctx))
	})
}
