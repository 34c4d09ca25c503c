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
// live (LiveAnswer) had said in its last attempt — exactly what a client
// that followed the run to its end received, since every stream is a
// prefix of the run's log. With a store that joins the answer to the
// end's commit (a Joiner) the run hands its events, as it emits them, to
// a saidText (runtime.Joined.Tap) — a recovered run first those its log
// already holds — and the answer, text and all, is written in the end's
// own commit. With another store the text is read from the log once the
// end is committed, and the message is written after it, before the
// terminal event is published; a crash between the two leaves it
// unsettled, and the next recovery pass (settleMessages) writes it, text
// and all, from the log.

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
	said := saidText{graph: g}
	for _, ev := range evs {
		said.see(ev)
	}
	return said.String()
}

// saidText gathers, event by event in seq order, the text the live
// agent of a run of graph streams in its last attempt.
type saidText struct {
	graph *runtime.Graph
	lead  string // the live agent, once run_started is seen
	said  strings.Builder
}

func (s *saidText) see(ev runtime.Event) {
	switch {
	case ev.Type == runtime.EventRunStarted:
		var d runtime.RunStartedData
		if p, ok := ev.Data.(*runtime.RunStartedData); ok {
			d = *p
		} else if !decodeData(ev.Data, &d) {
			return
		}
		s.lead = LiveAnswer(s.graph, d.EntryNodeIDs, d.ActiveNodeIDs).Lead
	case s.lead == "" || ev.NodeID != s.lead:
	case ev.Type == runtime.EventNodeRetrying:
		s.said.Reset() // the next attempt says its answer from the start
	case ev.Type == nodes.EventNodeDelta:
		if p, ok := ev.Data.(*nodes.NodeDeltaData); ok {
			s.said.WriteString(p.Text)
			return
		}
		var d nodes.NodeDeltaData
		if decodeData(ev.Data, &d) {
			s.said.WriteString(d.Text)
		}
	}
}

// String is the text gathered so far.
func (s *saidText) String() string { return s.said.String() }

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
