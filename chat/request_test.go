package chat_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatmemory "chatgraph/chat/store/memory"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// withMemory is backends with the memory stores, whose turns never join
// a run's commit.
var withMemory = append([]backend{{"memory", func(t *testing.T) (durableRuns, chat.Store) {
	runs := memory.New()
	return runs, chatmemory.New(runs)
}}}, backends...)

// An idempotent call sent again is answered with the first one's ticket
// and starts nothing — whether the first turn started at once (its turn
// joined to its run's first commit) or waited in the chat's queue (a
// reservation), whether the repeats come one after another or race; the
// same id with another call is refused; without Idempotent the id names
// a cancel scope only, and the same call runs twice.
func TestIdempotentCallsAnsweredOnce(t *testing.T) {
	t.Parallel()
	for _, b := range withMemory {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			runs, chats := b.open(t)
			f := newFixtureDeps(t, runs, chats, runtime.Config{}, spyDeps(t, runs, &spyModel{}))
			chatID := f.saveChat(calcGraph)
			runsOf := func() int {
				rs, err := runs.ListRuns(context.Background(), runtime.RunFilter{ChatID: chatID})
				require.NoError(t, err)
				return len(rs)
			}
			call := chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "hello", ClientRequestID: "req-1", Idempotent: true}
			first := f.send(call)
			require.False(t, first.Replayed)
			again := f.send(call)
			require.True(t, again.Replayed)
			again.Replayed = false
			require.Equal(t, first, again)
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, first.MessageID).Status)
			again = f.send(call) // after the run's end too
			require.Equal(t, first.RunID, again.RunID)
			require.Equal(t, 1, runsOf())

			other := call
			other.Content = "something else"
			_, err := f.svc.Send(context.Background(), other)
			ce := requireCode(t, err, chat.CodeConflict)
			require.Contains(t, ce.Message, "clientRequestId req-1 was used by another call")
			require.Equal(t, 1, runsOf())

			// Eight repeats racing, while the chat is busy: they all
			// wait for one turn, queued behind another call.
			busy := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "/tool calculator {\"expression\":\"2+2\"}"})
			race := chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "queued", ClientRequestID: "req-2", Idempotent: true}
			tickets := make([]*chat.Ticket, 8)
			var wg sync.WaitGroup
			for i := range tickets {
				wg.Go(func() {
					tk, err := f.svc.Send(context.Background(), race)
					require.NoError(t, err)
					tickets[i] = tk
				})
			}
			wg.Wait()
			fresh := 0
			for _, tk := range tickets {
				require.Equal(t, tickets[0].RunID, tk.RunID)
				require.Equal(t, tickets[0].MessageID, tk.MessageID)
				if !tk.Replayed {
					fresh++
				}
			}
			require.Equal(t, 1, fresh, "one call ran, the others were answered as its repeats")
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, busy.MessageID).Status)
			require.Equal(t, chat.StatusCompleted, f.settled(chatID, tickets[0].MessageID).Status)
			require.Equal(t, 3, runsOf())
			msgs, err := chats.Messages(context.Background(), chatID)
			require.NoError(t, err)
			require.Len(t, msgs, 6, "three turns of two messages")

			// A continue sent again is answered too, not refused because
			// the message it continued has moved on by then; one refused
			// (a completed run cannot be continued) keeps nothing.
			gated := f.saveChat(spyGraph)
			asked := f.send(chat.Request{Kind: chat.KindStreamChat, ChatID: gated, Content: `/tool calculator {"expression":"1+2"}`})
			require.Equal(t, chat.StatusInterrupted, f.settled(gated, asked.MessageID).Status)
			cont := chat.Request{Kind: chat.KindContinueMessage, ChatID: gated, MessageID: asked.MessageID,
				Resume: map[string]any{"approved": true}, ClientRequestID: "req-3", Idempotent: true}
			resumed := f.send(cont)
			require.Equal(t, "tool calculator returned: 3", f.settled(gated, asked.MessageID).Content)
			again = f.send(cont)
			require.True(t, again.Replayed)
			require.Equal(t, resumed.RunID, again.RunID)
			cont.ClientRequestID = "req-5"
			_, err = f.svc.Send(context.Background(), cont)
			requireCode(t, err, chat.CodeConflict)
			_, err = chats.GetRequest(context.Background(), gated, "req-5")
			require.ErrorIs(t, err, chat.ErrNotFound)

			// Not idempotent: the id is a cancel scope, and the call runs twice.
			plain := chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "twice", ClientRequestID: "req-4"}
			a, b := f.send(plain), f.send(plain)
			require.NotEqual(t, a.RunID, b.RunID)
			require.False(t, b.Replayed)
		})
	}
}

// gatedTurns holds the first turn written with a request id until open
// is closed, after telling entered: a call that bound first and writes
// its turn last.
type gatedTurns struct {
	chat.Store
	once          sync.Once
	entered, open chan struct{}
}

func (s *gatedTurns) BeginTurn(ctx context.Context, t chat.Turn) error {
	if t.Request != nil {
		first := false
		s.once.Do(func() { first = true })
		if first {
			close(s.entered)
			<-s.open
		}
	}
	return s.Store.BeginTurn(ctx, t)
}

// A cancel sent before an idempotent call, kept for its request, stops
// the call even when the call came twice and the copy that bound first
// (consuming the kept cancel) lost the write of the turn to the other:
// the loser passes the cancel on. (Before, the winner ran to its end.)
func TestCancelKeptForARepeatedCallStopsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runs := memory.New()
	gate := &gatedTurns{Store: chatmemory.New(runs), entered: make(chan struct{}), open: make(chan struct{})}
	f := newFixture(t, runs, gate, runtime.Config{})
	_, chatID := f.chatOn(`{"name":"Helper","tokenDelayMs":20}`)
	res, err := f.svc.Cancel(ctx, chat.CancelRequest{ChatID: chatID, ClientRequestID: "req-c"})
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusPending, res.Status)

	call := chat.Request{Kind: chat.KindStreamChat, ChatID: chatID, Content: "one two three four", ClientRequestID: "req-c", Idempotent: true}
	loser := make(chan *chat.Ticket, 1)
	go func() {
		tk, err := f.svc.Send(ctx, call)
		assert.NoError(t, err)
		loser <- tk
	}()
	<-gate.entered // bound, the kept cancel consumed, its turn not written
	winner := f.send(call)
	require.False(t, winner.Replayed)
	close(gate.open)
	repeat := <-loser
	require.NotNil(t, repeat)
	require.True(t, repeat.Replayed, "answered as the winner's repeat")
	require.Equal(t, winner.RunID, repeat.RunID)

	m := f.settled(chatID, winner.MessageID)
	require.Equal(t, chat.StatusCancelled, m.Status, m.Error)
	rec, err := runs.GetRun(ctx, winner.RunID)
	require.NoError(t, err)
	require.Equal(t, runtime.RunCancelled, rec.Status)
}
