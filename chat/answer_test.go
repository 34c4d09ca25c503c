package chat

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runtime"
	"chatgraph/runtime/store/memory"
)

// What LiveAnswer says streams live agrees with what answer makes the
// message say once the run ends: the lead's streamed text starts the
// message text, and is all of it when LiveAnswer says Whole. Each graph
// runs on the echo model (every agent answers "echo: <its last input>"),
// and LiveAnswer reads the run's own run_started, as the adapters do.
func TestLiveAnswerAgreesWithAnswer(t *testing.T) {
	t.Parallel()
	always := runtime.EdgeData{Channel: runtime.ChannelFlow, When: runtime.WhenAlways}
	onFailure := runtime.EdgeData{Channel: runtime.ChannelFlow, When: runtime.WhenOnFailure}
	condition := runtime.EdgeData{Channel: runtime.ChannelFlow, Condition: "true"}
	cases := []struct {
		name    string
		g       *answerGraph
		entries []string
		want    AnswerSource
	}{
		{name: "chat_output fed by one agent",
			g:       graphOf("s=chat_start", "a=agent", "o=chat_output").flow("s", "a").flow("a", "o"),
			entries: []string{"s"}, want: AnswerSource{Lead: "a", Whole: true}},
		{name: "chat_output fed by the second agent of a pipeline",
			g:       graphOf("s=chat_start", "a=agent", "b=agent", "o=chat_output").flow("s", "a").flow("a", "b").flow("b", "o"),
			entries: []string{"s"}, want: AnswerSource{Lead: "b", Whole: true}},
		{name: "chat_output fed by two agents",
			g: graphOf("s=chat_start", "a=agent", "b=agent", "o=chat_output").
				flow("s", "a").flow("a", "b").flow("a", "o").flow("b", "o"),
			entries: []string{"s"}, want: AnswerSource{Lead: "a"}},
		{name: "two chat_outputs",
			g: graphOf("s=chat_start", "a=agent", "b=agent", "o1=chat_output", "o2=chat_output").
				flow("s", "a").flow("a", "b").flow("a", "o1").flow("b", "o2"),
			entries: []string{"s"}, want: AnswerSource{Lead: "a"}},
		{name: "two chat_outputs, the second first in graph order",
			g: graphOf("s=chat_start", "a=agent", "b=agent", "o2=chat_output", "o1=chat_output").
				flow("s", "a").flow("a", "b").flow("a", "o1").flow("b", "o2"),
			entries: []string{"s"}, want: AnswerSource{Lead: "b"}},
		{name: "agent through a condition edge",
			g:       graphOf("s=chat_start", "a=agent", "o=chat_output").flow("s", "a").edge("a", "o", condition),
			entries: []string{"s"}, want: AnswerSource{}},
		{name: "agent through an always edge",
			g:       graphOf("s=chat_start", "a=agent", "o=chat_output").flow("s", "a").edge("a", "o", always),
			entries: []string{"s"}, want: AnswerSource{}},
		{name: "agent through a failure edge",
			g:       graphOf("s=chat_start", "a=agent", "o=chat_output").flow("s", "a").edge("a", "o", onFailure),
			entries: []string{"s"}, want: AnswerSource{}},
		{name: "template in front of chat_output",
			g: graphOf("s=chat_start", "a=agent", "t=template", "o=chat_output").
				flow("s", "a").flow("a", "t").flow("t", "o"),
			entries: []string{"s"}, want: AnswerSource{}},
		{name: "no chat_output, an entry agent",
			g:       graphOf("s=chat_start", "a=agent").flow("s", "a"),
			entries: []string{"a"}, want: AnswerSource{Lead: "a", Whole: true}},
		{name: "no chat_output, no entry agent",
			g:       graphOf("s=chat_start", "a=agent").flow("s", "a"),
			entries: []string{"s"}, want: AnswerSource{}},
		{name: "no chat_output, two entry agents",
			g:       graphOf("a=agent", "b=agent"),
			entries: []string{"a", "b"}, want: AnswerSource{Lead: "a"}},
		{name: "two entry agents into chat_output",
			g:       graphOf("a=agent", "b=agent", "o=chat_output").flow("a", "o").flow("b", "o"),
			entries: []string{"a", "b"}, want: AnswerSource{Lead: "a"}},
		{name: "chat_output among the entries",
			g:       graphOf("s=chat_start", "a=agent", "o=chat_output").flow("s", "a").flow("a", "o"),
			entries: []string{"o"}, want: AnswerSource{}},
		{name: "an inactive agent is chat_output's first input",
			g: graphOf("s=chat_start", "b=agent", "a=agent", "o=chat_output").
				flow("s", "b").flow("b", "o").flow("a", "o"),
			entries: []string{"a"}, want: AnswerSource{Lead: "a", Whole: true}},
		{name: "an inactive chat_output first in graph order",
			g: graphOf("b=agent", "o2=chat_output", "s=chat_start", "a=agent", "o1=chat_output").
				flow("b", "o2").flow("s", "a").flow("a", "o1"),
			entries: []string{"s"}, want: AnswerSource{Lead: "a", Whole: true}},
	}
	eng := answerEngine(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := tc.g.build(tc.name)
			run := runForAnswer(t, eng, g, tc.entries)
			require.Equal(t, runtime.RunCompleted, run.res.Status)

			src := LiveAnswer(g, run.started.EntryNodeIDs, run.started.ActiveNodeIDs)
			require.Equal(t, tc.want, src)
			if len(run.started.ActiveNodeIDs) == len(g.Nodes) {
				require.Equal(t, src, LiveAnswer(g, run.started.EntryNodeIDs, nil), "no active list: every node is active")
			}
			text, _ := answer(run.res, g, tc.entries)
			if src.Lead == "" {
				return
			}
			streamed := run.deltas[src.Lead]
			require.NotEmpty(t, streamed, "the lead streams its answer")
			require.True(t, strings.HasPrefix(text, streamed), "the message text %q starts with the lead's %q", text, streamed)
			if src.Whole {
				require.Equal(t, text, streamed, "the lead's text is the whole message text")
			}
		})
	}
}

// answerGraph builds a graph of the built-in node types for the test.
type answerGraph struct {
	g     runtime.Graph
	types map[string]string
}

// graphOf is a graph of the nodes given as "id=type", in that order.
func graphOf(specs ...string) *answerGraph {
	b := &answerGraph{types: map[string]string{}}
	for _, s := range specs {
		id, typ, _ := strings.Cut(s, "=")
		data := `{}`
		if typ == nodes.TypeTemplate {
			data = `{"template":"said: {{.content}}"}`
		}
		b.g.Nodes = append(b.g.Nodes, runtime.Node{ID: id, Type: typ, Data: []byte(data)})
		b.types[id] = typ
	}
	return b
}

// flow adds an unconditional on_success flow edge src -> dst.
func (b *answerGraph) flow(src, dst string) *answerGraph {
	return b.edge(src, dst, runtime.EdgeData{Channel: runtime.ChannelFlow})
}

func (b *answerGraph) edge(src, dst string, d runtime.EdgeData) *answerGraph {
	out := nodes.PortOutput
	if b.types[src] == nodes.TypeChatStart {
		out = nodes.PortMessage
	}
	b.g.Edges = append(b.g.Edges, runtime.Edge{ID: src + "-" + dst, Source: src, SourceHandle: out,
		Target: dst, TargetHandle: nodes.PortInput, Data: d})
	return b
}

func (b *answerGraph) build(id string) *runtime.Graph {
	g := b.g
	g.ID, g.PlanVersion = "g_"+strings.ReplaceAll(id, " ", "_"), 1
	return &g
}

// answerEngine is an engine of the built-in node types on a memory store.
func answerEngine(t *testing.T) *runtime.Engine {
	t.Helper()
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{}))
	eng, err := runtime.NewEngine(runtime.Config{Registry: reg, Store: memory.New()})
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	return eng
}

// answerRun is what one run of runForAnswer gave.
type answerRun struct {
	res     *runtime.RunResult
	started *runtime.RunStartedData
	deltas  map[string]string // each node's node_delta text, joined
}

// runForAnswer runs g from entries with the user message "hi", as a chat
// turn runs (the chat scope of its plan and entries), and waits for its
// terminal event.
func runForAnswer(t *testing.T, eng *runtime.Engine, g *runtime.Graph, entries []string) answerRun {
	t.Helper()
	p, err := eng.Compile(g)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		run  = answerRun{deltas: map[string]string{}}
		done = make(chan struct{})
	)
	sink := runtime.SinkFunc(func(ev runtime.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch d := ev.Data.(type) {
		case *runtime.RunStartedData:
			run.started = d
		case *nodes.NodeDeltaData:
			run.deltas[ev.NodeID] += d.Text
		}
		if ev.Type.Terminal() {
			close(done)
		}
	})
	res, err := eng.Invoke(context.Background(), runtime.RunRequest{Plan: p, EntryNodeIDs: entries,
		Input: nodes.ChatInput{Content: "hi"}.Value(), Services: &nodes.Services{Scope: chatscope.New(p, entries)}, Sink: sink})
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run's terminal event never came")
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotNil(t, run.started, "run_started")
	run.res = res
	return run
}
