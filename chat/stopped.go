package chat

import (
	"context"
	"encoding/json"
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
// learns the run ended). A store that joins the answer to the end's
// commit (a Joiner) leaves such a message out of that commit, still
// running: a crash before its write leaves it unsettled, and the next
// recovery pass (settleMessages) writes it, text and all, from the log.

// stoppedUnsaid reports whether m, settled from res, is the answer of a
// cancelled run with no text: one whose text is to be read from the log.
func stoppedUnsaid(m *Message, res *runtime.RunResult) bool {
	return m != nil && m.ID != "" && res != nil && res.Status == runtime.RunCancelled && m.Content == ""
}

// keepStoppedText gives m, the settled message of a cancelled run of g
// with no text, the text its live agent had streamed; it reports whether
// it did.
func (s *Service) keepStoppedText(ctx context.Context, m *Message, g *runtime.Graph, res *runtime.RunResult) bool {
	if !stoppedUnsaid(m, res) {
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
