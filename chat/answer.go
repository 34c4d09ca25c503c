package chat

import (
	"slices"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// The assistant message's text. A run's assistant message text is the
// messages of its chat_output nodes that succeeded, in graph order,
// joined by blank lines (a chat_output joins its own inputs in edge
// order); when none did, the answer of its first entry agent that
// succeeded; otherwise the message has no text. answer (chat/turn.go)
// computes it from a run's result when the run ends; what of it a stream
// can carry while the run goes (LiveAnswer) is derived from it here,
// next to the one description of the rule, and answer_test.go checks the
// two agree: a change to the rule changes both.

// AnswerSource is which node's live text (its node_delta events, in
// order) is the start of a run's assistant message text: what a stream
// may send while the run is going. Lead's deltas are its answer, so its
// text streams as it comes; what the message holds beyond it is known
// only at the run's end.
type AnswerSource struct {
	// Lead is the agent whose deltas are the message text's start; ""
	// when no node's are (the whole text is known at the run's end).
	Lead string
	// Whole: Lead's answer is the whole message text, nothing follows it
	// (when the run completes as planned: a failed or retried lead, or a
	// node that skipped its chat_output, changes what the message says).
	Whole bool
}

// LiveAnswer decides, before a run of g starts, from its entry node ids
// and active node ids (run_started's entryNodeIds and activeNodeIds; an
// empty active list counts every node of g as active), what of its
// message text streams live.
//
// Of the rule (see the top of this file): when the run reaches a
// chat_output, the text starts with the first such chat_output's message,
// which starts with its first input (its first flow edge from an active
// node). That input is an agent's answer as the agent said it when the
// agent feeds the chat_output through an unconditional on_success edge
// (nothing between them transforms its text): the agent is the lead, and
// its answer is the whole text when that chat_output is the only one the
// run reaches and the edge its only active input. Any other shape — a
// template or router in front, a condition, a failure or always edge, a
// chat_output the run enters (its input is the run's own) — has no lead.
// When the run reaches no chat_output, the text is the first entry
// agent's answer: it is the lead, the whole text when it is the only
// entry agent (with several, the first to fail leaves the text to the
// next).
//
// Safe for concurrent use; it reads g and never keeps it.
func LiveAnswer(g *runtime.Graph, entries, active []string) AnswerSource {
	types := make(map[string]string, len(g.Nodes))
	for _, n := range g.Nodes {
		types[n.ID] = n.Type
	}
	var on map[string]bool // nil: every node is active
	if len(active) > 0 {
		on = make(map[string]bool, len(active))
		for _, id := range active {
			on[id] = true
		}
	}
	isOn := func(id string) bool { return on == nil || on[id] }
	var outputs []string
	for _, n := range g.Nodes {
		if n.Type == nodes.TypeChatOutput && isOn(n.ID) {
			outputs = append(outputs, n.ID)
		}
	}
	if len(outputs) == 0 {
		var agents []string
		for _, id := range entries {
			if types[id] == nodes.TypeAgent {
				agents = append(agents, id)
			}
		}
		if len(agents) == 0 {
			return AnswerSource{} // the message has no text
		}
		return AnswerSource{Lead: agents[0], Whole: len(agents) == 1}
	}
	if slices.Contains(entries, outputs[0]) {
		return AnswerSource{} // its first input is the run's own
	}
	var in []runtime.Edge
	for _, e := range g.Edges {
		if e.Data.Channel == runtime.ChannelFlow && e.Target == outputs[0] && isOn(e.Source) {
			in = append(in, e)
		}
	}
	if len(in) == 0 {
		return AnswerSource{}
	}
	first := in[0]
	if types[first.Source] != nodes.TypeAgent || first.Data.Condition != "" ||
		(first.Data.When != "" && first.Data.When != runtime.WhenOnSuccess) {
		return AnswerSource{}
	}
	return AnswerSource{Lead: first.Source, Whole: len(outputs) == 1 && len(in) == 1}
}
