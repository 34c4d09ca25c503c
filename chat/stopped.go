package chat

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// A run stopped while its agent streamed (a user's stop, a superseding
// message, a shutdown) has no answer: the agent never finished, and the
// message's text would be empty although every client saw the start of
// it. The message keeps that text instead: what the agent streaming it
// live (LiveAnswer) had said in its last attempt, read from the run's
// log once the run's end is committed — the log every stream is a prefix
// of, so the text is exactly what a client that followed the run to its
// end received. It is written after the end's commit and before the
// terminal event is published (the message is final before any client
// learns the run ended); a crash between the two leaves the message
// cancelled without the text.

// keepStoppedText gives m, the settled message of a cancelled run of g
// with no text, the text its live agent had streamed; it reports whether
// it did (m is then to be written).
func (s *Service) keepStoppedText(ctx context.Context, m *Message, g *runtime.Graph, res *runtime.RunResult) bool {
	if m == nil || m.ID == "" || res == nil || res.Status != runtime.RunCancelled || m.Content != "" {
		return false
	}
	evs, err := s.runs.Events(ctx, res.RunID, 0, 0)
	if err != nil {
		s.log.Warn("reading a stopped run's text", "run", res.RunID, "err", err)
		return false
	}
	m.Content = stoppedText(evs, g)
	return m.Content != ""
}

// writeStoppedText is keepStoppedText for a message already written with
// the run's end (a Joiner store): it writes the text in a write of its own.
func (s *Service) writeStoppedText(ctx context.Context, m *Message, g *runtime.Graph, res *runtime.RunResult) {
	if !s.keepStoppedText(ctx, m, g, res) {
		return
	}
	if err := s.chats.FinishMessage(ctx, m); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		s.log.Error("writing a stopped run's text", "message", m.ID, "err", err)
	}
}

// stoppedText is the text the live agent of a run of g streamed in its
// last attempt, from the run's log (evs, in seq order): its node_delta
// texts after its last node_retrying. "" when no agent streams the
// message live.
func stoppedText(evs []runtime.Event, g *runtime.Graph) string {
	var lead string
	var said strings.Builder
	for _, ev := range evs {
		switch {
		case ev.Type == runtime.EventRunStarted:
			var d runtime.RunStartedData
			if decodeData(ev.Data, &d) {
				lead = LiveAnswer(g, d.EntryNodeIDs, d.ActiveNodeIDs).Lead
			}
		case lead == "" || ev.NodeID != lead:
		case ev.Type == runtime.EventNodeRetrying:
			said.Reset() // the next attempt says its answer from the start
		case ev.Type == nodes.EventNodeDelta:
			var d nodes.NodeDeltaData
			if decodeData(ev.Data, &d) {
				said.WriteString(d.Text)
			}
		}
	}
	return said.String()
}

// decodeData reads an event's data as v: JSON as the store returns it, or
// the value the run emitted (a store in memory keeps it).
func decodeData(data any, v any) bool {
	raw, ok := data.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(data); err != nil {
			return false
		}
	}
	return json.Unmarshal(raw, v) == nil
}
