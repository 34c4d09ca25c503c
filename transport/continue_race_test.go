package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	chatsqlite "chatgraph/chat/store/sqlite"
)

// raceChats makes continues of one message lose to each other at the
// store: once armed, the first n reads of the message wait until all n
// are in, so n continues all see the message before any of them claims
// it, and all but one lose the claim (the store's chat.ErrConflict)
// rather than being refused by the chat service's own check.
type raceChats struct {
	*chatsqlite.Store
	mu      sync.Mutex
	msgID   string
	left    int
	release chan struct{}
}

func (r *raceChats) arm(msgID string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgID, r.left, r.release = msgID, n, make(chan struct{})
}

func (r *raceChats) GetMessage(ctx context.Context, chatID, id string) (*chat.Message, error) {
	m, err := r.Store.GetMessage(ctx, chatID, id)
	r.mu.Lock()
	if id != r.msgID || r.left == 0 {
		r.mu.Unlock()
		return m, err
	}
	r.left--
	release := r.release
	if r.left == 0 {
		close(release)
	}
	r.mu.Unlock()
	select {
	case <-release:
	case <-ctx.Done():
	case <-time.After(10 * time.Second): // a bound, not a wait: the others never came
	}
	return m, err
}

func newRaceEnv(t *testing.T) (*env, *raceChats) {
	var rc *raceChats
	e := newEnv(t, func(c *transportConfig) {
		c.WrapChats = func(s *chatsqlite.Store) chat.Store { rc = &raceChats{Store: s}; return rc }
	})
	return e, rc
}

// requireClientText fails if an error message carries internal text.
func requireClientText(t *testing.T, msg string) {
	t.Helper()
	for _, internal := range []string{"chat:", "runtime:", "sqlite", "store", "conflict:", "batches", "%!"} {
		require.NotContains(t, msg, internal, "internal text in %q", msg)
	}
}

// Two requests send the results of one client tool call at once: one
// continues the run, the other is told so in a sentence for the client,
// not the store's error chain; so is a third sent after both.
func TestOpenAIToolResultsLostRace(t *testing.T) {
	t.Parallel()
	e, rc := newRaceEnv(t)
	ctx := context.Background()
	client, params, msgs, resp := askWeather(t, e)
	require.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	call := resp.Choices[0].Message.ToolCalls[0]
	interrupted := strings.TrimPrefix(resp.ID, "chatcmpl-")
	rec, err := e.store.GetRun(ctx, interrupted)
	require.NoError(t, err)
	rc.arm(rec.Attrs["messageId"].(string), 2)

	params.Messages = append(msgs, resp.Choices[0].Message.ToParam(), openai.ToolMessage("sunny", call.ID))
	type answer struct {
		resp *openai.ChatCompletion
		err  error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			r, err := client.Chat.Completions.New(ctx, params)
			answers <- answer{r, err}
		}()
	}
	var won *openai.ChatCompletion
	var lost *openai.Error
	for range 2 {
		a := <-answers
		if a.err == nil {
			require.Nil(t, won, "both requests continued the run")
			won = a.resp
			continue
		}
		require.Nil(t, lost, "neither request continued the run")
		lost = apiErr(t, a.err)
	}
	require.NotNil(t, won)
	require.Equal(t, "tool get_weather returned: sunny", won.Choices[0].Message.Content)
	winner := strings.TrimPrefix(won.ID, "chatcmpl-")
	want := fmt.Sprintf("run %s was already continued by run %s: another request resumed it first; follow run %s instead of resuming again",
		interrupted, winner, winner)
	require.Equal(t, http.StatusConflict, lost.StatusCode)
	require.Equal(t, "conflict_error", lost.Type)
	require.Equal(t, "conflict", lost.Code)
	require.Equal(t, want, lost.Message)
	requireClientText(t, lost.Message)

	// Sent again after both: the chat service's refusal, worded the same.
	_, err = client.Chat.Completions.New(ctx, params)
	late := apiErr(t, err)
	require.Equal(t, http.StatusConflict, late.StatusCode)
	require.Equal(t, "conflict_error", late.Type)
	require.Equal(t, want, late.Message)
}

// The native resume and continue of one interrupted run at once: the
// one that loses is told which run won, in words for the client.
func TestNativeContinueLostRace(t *testing.T) {
	t.Parallel()
	e, rc := newRaceEnv(t)
	_, chatID := e.newChat(approvalGraph())
	interrupt := func() (runID, msgID string) {
		var tk map[string]any
		e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages",
			map[string]any{"content": `/tool calculator {"expression":"6*7"}`}, &tk), http.StatusAccepted)
		msgID = tk["messageId"].(string)
		require.Equal(t, "interrupted", e.waitMessage(chatID, msgID)["status"])
		return tk["runId"].(string), msgID
	}
	// answer is a 202's ticket or a 409's error.
	type answer struct {
		RunID string
		Error struct {
			Code, Message string
			Details       struct{ RunIDs []string }
		}
	}
	// race sends body to path twice at once: one 202, one 409.
	race := func(msgID, path string, body any) (winner string, lost answer) {
		rc.arm(msgID, 2)
		var wg sync.WaitGroup
		resps := make([]*http.Response, 2)
		outs := make([]answer, 2)
		for i := range 2 {
			wg.Go(func() { resps[i] = e.do("POST", path, body, &outs[i]) })
		}
		wg.Wait()
		w, l := 0, 1
		if resps[0].StatusCode != http.StatusAccepted {
			w, l = 1, 0
		}
		e.mustStatus(resps[w], http.StatusAccepted)
		e.mustStatus(resps[l], http.StatusConflict)
		e.waitRunDone(outs[w].RunID)
		return outs[w].RunID, outs[l]
	}

	runID, msgID := interrupt()
	winner, lost := race(msgID, "/api/v1/runs/"+runID+"/resume", map[string]any{"value": map[string]any{"approved": true}})
	require.Equal(t, "conflict", lost.Error.Code)
	require.Equal(t, fmt.Sprintf("run %s was already continued by run %s: another request resumed it first; follow run %s instead of resuming again",
		runID, winner, winner), lost.Error.Message)
	require.Equal(t, []string{winner}, lost.Error.Details.RunIDs)
	requireClientText(t, lost.Error.Message)

	_, msgID = interrupt()
	winner, lost = race(msgID, "/api/v1/chats/"+chatID+"/messages/"+msgID+"/continue", map[string]any{"resume": map[string]any{"approved": true}})
	require.Equal(t, "conflict", lost.Error.Code)
	require.Equal(t, fmt.Sprintf("message %s was already continued by run %s: another request continued it first; follow run %s instead of continuing again",
		msgID, winner, winner), lost.Error.Message)
	require.Equal(t, []string{winner}, lost.Error.Details.RunIDs)
	requireClientText(t, lost.Error.Message)
}
