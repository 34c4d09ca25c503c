package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"chatgraph/nodes/llm"
	"chatgraph/nodes/tools"
	"chatgraph/runtime"
)

// invocation is one run of an agent's tool-calling loop: the node itself,
// or a member agent called as a tool.
type invocation struct {
	a     *agentNode
	root  string
	scope string // ledger scope: hash(root, node) or hash(parent call key, node)
	tools map[string]*LinkedTool
	specs []llm.ToolSpec
	emit  func(runtime.EventType, any) error
	delta func(string) // nil: text is not streamed (member agents)
	// resume is the execution's resume value, shared with member agents.
	resume *resumeState
	// member is the node id of a member agent ("" for the node itself);
	// tool events then carry it as agentNodeId.
	member string
	// usage sums the tokens of the execution's model calls, member
	// agents' included (shared with them).
	usage *usageTotal
}

// usageTotal is the token usage of one agent execution: the model calls
// it made (steps replayed from the ledger cost nothing and are not
// counted). Safe for concurrent use (member agents run in parallel).
type usageTotal struct {
	mu       sync.Mutex
	calls    int
	reported bool
	u        llm.Usage
}

func (t *usageTotal) add(u *llm.Usage) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if u != nil {
		t.reported = true
		t.u.PromptTokens += u.PromptTokens
		t.u.CompletionTokens += u.CompletionTokens
		t.u.TotalTokens += u.TotalTokens
	}
}

// value is the usage as output metadata, nil when no provider reported
// any (the offline echo model does not).
func (t *usageTotal) value() map[string]any {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.reported {
		return nil
	}
	return map[string]any{"promptTokens": t.u.PromptTokens, "completionTokens": t.u.CompletionTokens,
		"totalTokens": t.u.TotalTokens, "modelCalls": t.calls}
}

// needApproval stops the loop at a call that needs a person's decision.
type needApproval struct {
	key  string
	call *ToolCallData
}

func (e *needApproval) Error() string { return "tool call " + e.call.Name + " needs approval" }

// resumeState is the resume value of an execution and the idempotency key
// of the call it answers ("" when unknown: the first call asking takes it).
type resumeState struct {
	mu    sync.Mutex
	value any
	key   string
	used  bool
}

func (r *resumeState) take(key string) (any, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used || (r.key != "" && r.key != key) {
		return nil, false
	}
	r.used = true
	return r.value, true
}

// toolOutcome is a call's recorded result.
type toolOutcome struct {
	Result   string            `json:"result"`
	Error    string            `json:"error,omitempty"`
	Approval *ApprovalDecision `json:"approval,omitempty"`
}

func (o toolOutcome) content() string {
	if o.Error != "" {
		return "error: " + o.Error
	}
	return o.Result
}

// stepSeparator comes between the texts of two model calls in an agent's
// answer.
const stepSeparator = "\n\n"

// run is the loop: ask the model; when it calls tools, run them and ask
// again with the results; stop at a text answer or after maxSteps calls.
//
// The answer is all the text the model calls said, in order, with
// stepSeparator between the texts of two calls. A model often says
// something before it calls a tool. That text is streamed like the rest,
// so the answer keeps it too: the text a client streamed is the answer
// the node returns. A step replayed from the ledger streams its text again,
// at once, so the execution's deltas are its whole answer.
func (inv *invocation) run(ctx context.Context, msgs []llm.Message) (string, error) {
	a := inv.a
	var answer strings.Builder
	for step := 0; step < a.maxSteps; step++ {
		req := llm.Request{Model: a.model, Messages: msgs, Tools: inv.specs, Temperature: a.cfg.Temperature,
			MaxTokens: a.cfg.MaxTokens, TokenDelay: time.Duration(a.cfg.TokenDelayMs) * time.Millisecond}
		first := true
		say := func(s string) {
			if s == "" {
				return
			}
			if first && answer.Len() > 0 {
				s = stepSeparator + s
			}
			first = false
			answer.WriteString(s)
			if inv.delta != nil {
				inv.delta(s)
			}
		}
		resp, err := inv.complete(ctx, req, say)
		if err != nil {
			return "", err
		}
		if len(resp.ToolCalls) == 0 {
			return answer.String(), nil
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
		outs, err := inv.callTools(ctx, resp.ToolCalls)
		if err != nil {
			return "", err
		}
		for i, tc := range resp.ToolCalls {
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: tc.Name, Content: outs[i].content()})
		}
	}
	return "", runtime.Errorf(CodeMaxSteps, "agent %s: no final answer after %d model calls", a.id, a.maxSteps)
}

// complete asks the model, streaming its text to say, or replays the
// answer the ledger recorded for the same request in this scope (a
// re-executed agent then reaches the same tool calls, with the same ids,
// without asking again), saying its text at once.
func (inv *invocation) complete(ctx context.Context, req llm.Request, say func(string)) (llm.Response, error) {
	key := IdempotencyKey(inv.scope, "model", requestHash(req))
	led := inv.a.e.Ledger
	rec, ok, err := led.Get(ctx, key)
	if err != nil {
		return llm.Response{}, runtime.Errorf(CodeLedger, "read model step: %v", err)
	}
	if ok {
		var resp llm.Response
		if err := json.Unmarshal(rec.Value, &resp); err == nil {
			say(resp.Content)
			return resp, nil
		}
	}
	resp, err := inv.a.provider.Stream(ctx, req, say)
	if err != nil {
		if ctx.Err() != nil {
			return llm.Response{}, context.Cause(ctx)
		}
		return llm.Response{}, err
	}
	inv.usage.add(resp.Usage)
	if len(resp.ToolCalls) > 0 {
		// Only steps that lead to tool calls are worth recording: a final
		// answer ends the node, whose output the runtime checkpoints.
		val, _ := json.Marshal(resp)
		if err := led.Put(ctx, LedgerRecord{Key: key, RootRunID: inv.root, NodeID: inv.nodeID(), Kind: LedgerModelStep, Value: val}); err != nil {
			return llm.Response{}, runtime.Errorf(CodeLedger, "record model step: %v", err)
		}
	}
	return resp, nil
}

func (inv *invocation) nodeID() string {
	if inv.member != "" {
		return inv.member
	}
	return inv.a.id
}

// requestHash identifies a model request (model, conversation, tools and
// sampling settings).
func requestHash(req llm.Request) string {
	b, _ := json.Marshal(struct {
		Model       string
		Messages    []llm.Message
		Tools       []llm.ToolSpec
		Temperature *float64
		MaxTokens   int
	}{req.Model, req.Messages, req.Tools, req.Temperature, req.MaxTokens})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// callTools runs one step's tool calls and returns their outcomes in call
// order. Calls recorded in the ledger are not executed again; other calls
// without approval run in parallel; calls that need approval take the
// resume value meant for them, or stop the step with *needApproval (the
// calls that did run are recorded first, so a resume does not repeat them).
func (inv *invocation) callTools(ctx context.Context, calls []llm.ToolCall) ([]toolOutcome, error) {
	outs := make([]toolOutcome, len(calls))
	done := make([]bool, len(calls))
	keys := make([]string, len(calls))
	var stops []*needApproval
	stopAt := make([]*needApproval, len(calls))
	led := inv.a.e.Ledger

	for i, c := range calls {
		keys[i] = IdempotencyKey(inv.scope, "tool", c.ID)
		rec, ok, err := led.Get(ctx, keys[i])
		if err != nil {
			return nil, runtime.Errorf(CodeLedger, "read tool call: %v", err)
		}
		if ok && json.Unmarshal(rec.Value, &outs[i]) == nil {
			done[i] = true
			inv.emitCall(c, keys[i], false, true)
			inv.emitResult(c, outs[i], true)
		}
	}

	// Calls without approval, in parallel.
	var wg sync.WaitGroup
	sem := make(chan struct{}, inv.a.e.MaxParallelTools)
	errs := make([]error, len(calls))
	for i, c := range calls {
		lt := inv.tools[c.Name]
		if done[i] || (lt != nil && (lt.RequireApproval || lt.Client)) {
			continue
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = context.Cause(ctx)
				return
			}
			defer func() { <-sem }()
			inv.emitCall(c, keys[i], false, false)
			out, err := inv.execute(ctx, lt, c, keys[i])
			if err != nil {
				var na *needApproval
				if errors.As(err, &na) {
					stopAt[i] = na
				} else {
					errs[i] = err
				}
				return
			}
			if err := inv.record(ctx, keys[i], out); err != nil {
				errs[i] = err
				return
			}
			outs[i], done[i] = out, true
			inv.emitResult(c, out, false)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}

	// Calls that need approval or the client, in order.
	for i, c := range calls {
		lt := inv.tools[c.Name]
		if done[i] || lt == nil || !(lt.RequireApproval || lt.Client) {
			continue
		}
		if lt.Client {
			out, stop, err := inv.clientCall(ctx, c, keys[i])
			if err != nil {
				return nil, err
			}
			if stop != nil {
				stopAt[i] = stop
				break
			}
			outs[i], done[i] = out, true
			continue
		}
		v, ok := inv.resume.take(keys[i])
		if !ok {
			call := inv.callData(c, keys[i], true, false)
			inv.emitCall(c, keys[i], true, false)
			stopAt[i] = &needApproval{key: keys[i], call: call}
			break
		}
		dec, err := ParseApproval(v)
		if err != nil {
			return nil, runtime.Errorf(CodeInvalidResume, "agent %s: %v", inv.a.id, err)
		}
		var out toolOutcome
		if dec.Approved {
			inv.emitCall(c, keys[i], true, false)
			out, err = inv.execute(ctx, lt, c, keys[i])
			if err != nil {
				var na *needApproval
				if errors.As(err, &na) { // a member agent's own approval
					stopAt[i] = na
					break
				}
				return nil, err
			}
		} else {
			out.Error = refusal(dec)
		}
		out.Approval = &dec
		if err := inv.record(ctx, keys[i], out); err != nil {
			return nil, err
		}
		outs[i], done[i] = out, true
		inv.emitResult(c, out, false)
	}
	for _, s := range stopAt {
		if s != nil {
			stops = append(stops, s)
		}
	}
	if len(stops) > 0 {
		return nil, stops[0]
	}
	return outs, nil
}

// clientCall answers a client tool call from the resume value meant for
// it, or stops the step so the client can run it.
func (inv *invocation) clientCall(ctx context.Context, c llm.ToolCall, key string) (toolOutcome, *needApproval, error) {
	v, ok := inv.resume.take(key)
	if !ok {
		call := inv.callData(c, key, false, false)
		call.ClientTool = true
		_ = inv.emit(EventToolCall, call)
		return toolOutcome{}, &needApproval{key: key, call: call}, nil
	}
	res, errText, err := ParseClientResult(v)
	if err != nil {
		return toolOutcome{}, nil, runtime.Errorf(CodeInvalidResume, "agent %s: %v", inv.a.id, err)
	}
	out := toolOutcome{Result: truncate(res, inv.a.e.MaxToolResultBytes), Error: errText}
	if err := inv.record(ctx, key, out); err != nil {
		return toolOutcome{}, nil, err
	}
	inv.emitResult(c, out, false)
	return out, nil, nil
}

// execute invokes one tool (recovering panics). A tool's failure is an
// outcome the model is told about; only cancellation, interrupts and
// ledger failures are errors.
func (inv *invocation) execute(ctx context.Context, lt *LinkedTool, c llm.ToolCall, key string) (out toolOutcome, err error) {
	if lt == nil {
		return toolOutcome{Error: fmt.Sprintf("unknown tool %q", c.Name)}, nil
	}
	args := json.RawMessage(c.Arguments)
	if !json.Valid(args) {
		return toolOutcome{Error: "arguments are not valid JSON"}, nil
	}
	// Checked against the tool's JSON Schema before it runs: a violation
	// is the call's result, so the model can correct itself.
	if msg, err := inv.a.e.args.check(lt.Spec().Parameters, args); err != nil {
		inv.a.e.Logger.Warn("tool schema unusable; arguments not checked", "tool", c.Name, "err", err)
	} else if msg != "" {
		return toolOutcome{Error: msg}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			inv.a.e.Logger.Error("tool panicked", "agent", inv.a.id, "tool", c.Name, "panic", p, "stack", string(debug.Stack()))
			out, err = toolOutcome{Error: fmt.Sprintf("tool %s failed (panic)", c.Name)}, nil
		}
	}()
	cctx := withCallEnv(ctx, &callEnv{emit: inv.emit, resume: inv.resume, usage: inv.usage})
	res, terr := lt.Invoke(cctx, tools.Call{ID: c.ID, Name: c.Name, Arguments: args, IdempotencyKey: key})
	if terr != nil {
		var na *needApproval
		if errors.As(terr, &na) {
			return toolOutcome{}, na
		}
		if ctx.Err() != nil {
			return toolOutcome{}, context.Cause(ctx)
		}
		var ce *runtime.CodedError
		if errors.As(terr, &ce) && (ce.Code == CodeLedger || ce.Code == CodeInvalidResume) {
			return toolOutcome{}, terr
		}
		return toolOutcome{Error: truncate(terr.Error(), inv.a.e.MaxToolResultBytes)}, nil
	}
	return toolOutcome{Result: truncate(res, inv.a.e.MaxToolResultBytes)}, nil
}

func (inv *invocation) record(ctx context.Context, key string, out toolOutcome) error {
	val, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if err := inv.a.e.Ledger.Put(ctx, LedgerRecord{Key: key, RootRunID: inv.root, NodeID: inv.nodeID(), Kind: LedgerToolCall, Value: val}); err != nil {
		return runtime.Errorf(CodeLedger, "record tool call: %v", err)
	}
	return nil
}

func (inv *invocation) callData(c llm.ToolCall, key string, approval, replayed bool) *ToolCallData {
	return &ToolCallData{ID: c.ID, Name: c.Name, Arguments: rawJSON(c.Arguments), AgentNodeID: inv.member,
		RequiresApproval: approval, Replayed: replayed, IdempotencyKey: key}
}

func (inv *invocation) emitCall(c llm.ToolCall, key string, approval, replayed bool) {
	if !approval {
		if lt := inv.tools[c.Name]; lt != nil {
			approval = lt.RequireApproval
		}
	}
	_ = inv.emit(EventToolCall, inv.callData(c, key, approval, replayed))
}

func (inv *invocation) emitResult(c llm.ToolCall, o toolOutcome, replayed bool) {
	_ = inv.emit(EventToolResult, &ToolResultData{ID: c.ID, Name: c.Name, Result: o.Result, Error: o.Error,
		AgentNodeID: inv.member, Replayed: replayed, Approval: o.Approval})
}

// truncate cuts s to at most max bytes on a rune boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[truncated]"
}
