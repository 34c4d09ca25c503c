package chat

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"chatgraph/chatscope"
	"chatgraph/nodes"
	"chatgraph/runcontrol"
	"chatgraph/runtime"
)

// Kind names a chat call; a run's run_started data.kind names the call
// that started it (a continuation also says "trigger":"continue_message").
type Kind string

// The chat calls.
const (
	KindStreamChat      Kind = "stream_chat"
	KindStreamAgentChat Kind = "stream_agent_chat"
	KindContinueMessage Kind = "continue_message"
	KindRetryMessage    Kind = "retry_message"
	KindEditUserMessage Kind = "edit_user_message"
)

// Request is one chat call. Which fields matter depends on Kind.
type Request struct {
	Kind   Kind
	ChatID string
	// MessageID is the message named by continue, retry and edit.
	MessageID string
	// FromRunID: continue exactly this run (run resume); ChatID and
	// MessageID are then taken from the run.
	FromRunID   string
	Content     string
	ParentID    *string
	AgentNodeID string
	UserTools   []string
	// ClientRequestID is also a cancel scope, within the chat (a
	// CancelRequest naming the chat and the id reaches the call) and,
	// with Conn, within the client's connection.
	ClientRequestID string
	// Conn names the client connection the call came on (a WebSocket's),
	// so that a cancel from the same connection may name the call by its
	// ClientRequestID alone (CancelRequest.Conn); empty for HTTP.
	Conn string
	// Idempotent makes ClientRequestID the call's key in its chat: the
	// call sent again is answered with the first one's ticket, not run
	// again, and another call with the key is refused (see Send).
	Idempotent bool
	// Strategy is the double-texting strategy (default enqueue).
	Strategy runcontrol.Strategy
	// Resume answers the continued run's interrupts.
	Resume any
	// ClientTools (a new turn: not continue_message) are tools the client
	// runs itself: entry agents get them as they get UserTools; a call of
	// one interrupts the run (reason client_tool) and a continue with the
	// result resumes it. They live in the run's input, so a continue keeps
	// them; retry and edit do not.
	ClientTools []ClientTool
	// History (stream_chat, stream_agent_chat) is a transcript a
	// stateless client sent before its new message (OpenAI messages, an
	// AG-UI thread new to the server): written as completed messages
	// under the turn's parent, oldest first, in the turn's transaction;
	// the user message follows the last. Roles: user, assistant, system.
	History []HistoryMessage
}

// ClientTool declares a tool the client executes (see Request.ClientTools).
type ClientTool = nodes.ClientTool

// HistoryMessage is one message of Request.History.
type HistoryMessage struct {
	Role    Role
	Content string
}

// Ticket is what a started chat call reveals to its client.
type Ticket struct {
	RunID         string `json:"runId"`
	MessageID     string `json:"messageId"`
	UserMessageID string `json:"userMessageId,omitempty"`
	ChatID        string `json:"chatId"`
	// Replayed: the call was an idempotent one sent again; the ticket is
	// the first one's and nothing was started.
	Replayed bool `json:"-"`
}

// idEncoding is base32 over the id alphabet [a-z2-7] in byte order, so
// ids sort as the bytes they encode.
var idEncoding = base32.NewEncoding("234567abcdefghijklmnopqrstuvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix + 20 base32 characters: the creation time in
// milliseconds (the first 10, 50 bits) and 50 random bits. The prefixes
// in use are "r_" runs, "m_" messages, "c_" chats, "g_" graphs. Ids made
// later sort after earlier ones, so the rows of the runs, chats and
// messages in progress — and their events and checkpoints, keyed by run —
// sit together at the end of the stores' indexes: a group commit writes a
// few pages instead of one per run.
func NewID(prefix string) string {
	var b [13]byte // 104 bits, of which the first 100 are encoded
	_, _ = rand.Read(b[:])
	const timeBits = 50
	ms := uint64(time.Now().UnixMilli()) & (1<<timeBits - 1)
	v := binary.BigEndian.Uint64(b[:8])
	binary.BigEndian.PutUint64(b[:8], ms<<(64-timeBits)|v&(1<<(64-timeBits)-1))
	return prefix + idEncoding.EncodeToString(b[:])[:20]
}

// turn is a prepared chat call: what to write and what to run.
type turn struct {
	req     Request
	chat    *Chat
	graph   *runtime.Graph
	plan    *runtime.Plan
	entries []string
	user    *Message // the turn's user message (new or existing)
	newUser bool
	// retryTools are the user tools a retry enables instead of those of
	// the user message it answers again (nil: the message's).
	retryTools []string
	assistant  *Message   // the message the run writes
	history    []*Message // Request.History, chained under the user's parent
	parentRun  *runtime.RunRecord
	values     map[string]any // continue: answers by interrupt id
	value      any            // continue: the single answer
	// fingerprint digests an Idempotent call as sent (requestFingerprint):
	// its turn is kept under its ClientRequestID ("": not kept).
	fingerprint string
}

// Send starts a chat call: it prepares the turn, mints the run id and
// launches the run (see launch). The ticket names the run and the
// assistant message it writes.
//
// An Idempotent call is kept under its ClientRequestID in its chat, in
// the transaction that writes its turn. Sent again — a client retrying
// a call whose answer it lost, at once or after a restart, to any
// process — it is answered with the first call's ticket (Replayed) and
// starts nothing; a different call with the same id is refused
// (conflict). Of calls with one id racing, one turn is written and the
// others are answered as its repeats. A call refused before its turn was
// written (reject, a bad request) keeps nothing: sent again, it runs.
func (s *Service) Send(ctx context.Context, req Request) (*Ticket, error) {
	if tk, err := s.sentBefore(ctx, req); tk != nil || err != nil {
		return tk, err
	}
	started, err := s.enterStart(ctx)
	if err != nil {
		return nil, err
	}
	defer started()
	tk, err := s.send(ctx, req)
	if errors.Is(err, ErrRequestTaken) {
		// A call with the same id wrote its turn first.
		if first, ferr := s.sentBefore(ctx, req); first != nil || ferr != nil {
			if first != nil {
				s.passOnCancel(first.RunID, err)
			}
			return first, ferr
		}
	}
	return tk, err
}

// sentBefore answers an Idempotent call whose id its chat has kept: the
// first call's ticket (Replayed) when the call is the same, a conflict
// when it is not; nil, nil when the chat has no such call (or it is not
// Idempotent).
func (s *Service) sentBefore(ctx context.Context, req Request) (*Ticket, error) {
	if !req.keyed() {
		return nil, nil
	}
	chatID := req.ChatID
	if chatID == "" && req.FromRunID != "" {
		rec, err := s.runs.GetRun(ctx, req.FromRunID)
		if err != nil {
			return nil, nil // the call's preparation says what is wrong
		}
		chatID = rec.ChatID
	}
	kept, err := s.chats.GetRequest(ctx, chatID, req.ClientRequestID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case kept.Fingerprint != requestFingerprint(req):
		return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf(
			"clientRequestId %s was used by another call in chat %s (run %s)", req.ClientRequestID, chatID, kept.Ticket.RunID),
			Details: map[string]any{"runIds": []string{kept.Ticket.RunID}}}
	}
	tk := kept.Ticket
	tk.Replayed = true
	s.log.Info("request replayed", "run", tk.RunID, "chat", chatID, "kind", req.Kind, "clientRequestId", req.ClientRequestID)
	return &tk, nil
}

// keyed reports whether the call is kept under its id (Idempotent).
func (req Request) keyed() bool { return req.Idempotent && req.ClientRequestID != "" }

// requestFingerprint digests what a call asks — its kind, what it names,
// its content, tools, answers and transcript — leaving out how it waits
// (Strategy) and its id: two calls with one fingerprint do the same.
func requestFingerprint(req Request) string {
	h := sha256.New()
	parent := "\x00none"
	if req.ParentID != nil {
		parent = *req.ParentID
	}
	enc := json.NewEncoder(h)
	// Encoding a Request's fields cannot fail: they are strings, string
	// lists and values decoded from JSON.
	_ = enc.Encode([]any{req.Kind, req.ChatID, req.MessageID, req.FromRunID, req.Content, parent, req.AgentNodeID,
		req.UserTools, req.Resume, req.ClientTools, req.History})
	return hex.EncodeToString(h.Sum(nil))
}

// send is Send of a call not answered as a repeat.
func (s *Service) send(ctx context.Context, req Request) (*Ticket, error) {
	t, err := s.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.keyed() {
		t.fingerprint = requestFingerprint(req) // of the call as sent: prepare fills in what it names
	}
	if err := s.afterRelaunch(ctx, t.chat.ID); err != nil {
		return nil, err
	}
	runID := NewID("r_")
	lr := newLiveRun(runID, t.chat.ID, t.assistant.ID, t.graph)
	lr.client = clientOf(ctx)
	scopes := append([]runcontrol.Scope{runcontrol.ChatScope(t.chat.ID)}, requestScopes(t.chat.ID, t.req.Conn, t.req.ClientRequestID)...)
	l := s.turnLaunch(t, runID, lr, scopes, s.reservation(t, runID))
	l.strategy = t.req.Strategy
	l.write = func(ctx context.Context, holding bool) ([]any, error) { return s.writeTurn(ctx, t, runID, holding) }
	if err = s.launch(ctx, l); err != nil {
		return nil, err
	}
	ticket := t.ticket(runID)
	s.log.Info("run accepted", "run", runID, "chat", t.chat.ID, "kind", req.Kind, "message", t.assistant.ID)
	return &ticket, nil
}

// turnLaunch is the launch of turn t as run runID (live as lr, bound
// under scopes): how it runs, ends and fails to start (failing over
// reservation). The caller sets how it waits and what it writes first:
// a new turn (send) or a queued turn recovery starts again (relaunch).
func (s *Service) turnLaunch(t *turn, runID string, lr *LiveRun, scopes []runcontrol.Scope, reservation *runtime.RunRecord) launch {
	return launch{
		run: lr, scopes: scopes, tryTurn: true,
		rollback: func(ctx context.Context, victims []string) { s.rollback(ctx, t, victims) },
		exec: func(ctx context.Context, sink runtime.EventSink, writes []any) (*runtime.RunResult, error) {
			return s.execTurn(ctx, t, runID, sink, writes)
		},
		finish: func(ctx context.Context, res *runtime.RunResult, err error) {
			if err == nil && s.join != nil {
				return // the answer was written in the commit of the run's end
			}
			s.finishMessage(ctx, t.assistant, t.graph, t.entries, res, err)
		},
		failStart: func(ctx context.Context, cause error) {
			s.failRun(ctx, lr, reservation, cause)
		},
	}
}

// enterStart waits for a place among the chat calls starting at once
// (Config.MaxStartingTurns, or BusyStartingTurns while the commits lag),
// in the order the calls came, and returns the function that gives it
// back; or ctx's error if ctx ends first.
func (s *Service) enterStart(ctx context.Context) (func(), error) {
	if s.starting == nil || s.lag != nil && s.starting.waiting.Load() == 0 && s.lag() <= s.busyLag {
		return func() {}, nil
	}
	return s.starting.enter(ctx)
}

// StartsWaiting is how many chat calls wait for a place among those
// starting at once (Config.MaxStartingTurns).
func (s *Service) StartsWaiting() int64 {
	if s.starting == nil {
		return 0
	}
	return s.starting.waiting.Load()
}

func newLiveRun(id, chatID, messageID string, g *runtime.Graph) *LiveRun {
	lr := &LiveRun{ID: id, ChatID: chatID, MessageID: messageID, nodeTypes: make(map[string]string, len(g.Nodes)), done: make(chan struct{})}
	for _, n := range g.Nodes {
		lr.nodeTypes[n.ID] = n.Type
	}
	return lr
}

// launch is how every run of the service starts — new turns, continues,
// runs continued after a shutdown and runs recovered after a crash. It
// admits the run against the limits, binds it under run control before
// its id is revealed (a cancel that came first still wins), tries for the
// chat's turn at once (tryTurn: in request order, so a later request can
// never overtake this one; reject answers ErrChatBusy now), writes what
// must be durable first, opens the run to the publisher, and executes it
// in the background: waiting for the chat's turn when it has none yet,
// holding the run's terminal event until its message is final.
type launch struct {
	run      *LiveRun
	scopes   []runcontrol.Scope
	strategy runcontrol.Strategy
	tryTurn  bool
	// afterSeq is the last seq already in the run's log (recovered runs).
	afterSeq int64
	// linkNow: cancels reach the run at once (a recovered run has
	// already emitted run_started); otherwise from the moment the run
	// emits run_started (runtime.StartSink), so a cancel that came first
	// still lets the run record and run_started be written, then stops the
	// run before any node starts.
	linkNow bool
	// write persists the turn; holding says the run already holds its
	// chat's turn (it will start at once, not wait in the chat's queue).
	// Instead of writing, it may return the writes (runtime.Joined) to
	// commit with the run's creation and run_started: exec gets them, and
	// launch returns only once that commit is done (or refused: launch
	// then fails with the refusal, and nothing of the turn is written).
	write func(ctx context.Context, holding bool) ([]any, error)
	// rollback undoes the turns a rollback strategy superseded.
	rollback func(ctx context.Context, victims []string)
	// exec runs the graph, joining writes to its first commit.
	exec func(ctx context.Context, sink runtime.EventSink, writes []any) (*runtime.RunResult, error)
	// finish writes the assistant message from the outcome.
	finish func(ctx context.Context, res *runtime.RunResult, err error)
	// failStart ends a run that could not start (nil: log only).
	failStart func(ctx context.Context, cause error)
	// placed is set by launch for a run that waits for its chat's turn:
	// run calls it once the run has its place in the chat's line, behind
	// the turn's holder (runcontrol.WithPlaced), and again once its wait
	// is over (it holds the turn, or will not).
	placed func()
}

func (s *Service) launch(ctx context.Context, l launch) error {
	lr := l.run
	if err := s.admit(lr); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			s.retire(lr, false)
		}
	}()
	bound, release, err := s.ctl.Bind(s.base, lr.ID, l.scopes...)
	if err != nil {
		return err
	}
	var held *runcontrol.Turn
	if l.tryTurn && lr.ChatID != "" {
		held, err = s.queue.Acquire(bound, lr.ChatID, lr.ID, runcontrol.Reject)
		switch {
		case err == nil, bound.Err() != nil:
		case errors.Is(err, runcontrol.ErrChatBusy) && l.strategy != runcontrol.Reject:
			held = nil
		default:
			release()
			return err
		}
	}
	var writes []any
	if l.write != nil {
		if writes, err = l.write(ctx, held != nil); err != nil {
			if held != nil {
				held.Release()
			}
			release()
			return keepConsumed(bound, lr.ID, err)
		}
	}
	s.pub.RunOpened(lr, l.afterSeq)
	ok = true
	if len(writes) == 0 {
		if held != nil || lr.ChatID == "" {
			go s.run(bound, release, held, l, nil, nil)
			return nil
		}
		// The run waits for its chat's turn: the call is answered once
		// it has its place in the chat's line (or the turn, or ended), so
		// that a message sent after the answer queues behind it in every
		// process sharing the queue, its process dying included.
		placed := make(chan struct{})
		var once sync.Once
		l.placed = func() { once.Do(func() { close(placed) }) }
		go s.run(bound, release, held, l, nil, nil)
		select {
		case <-placed:
		case <-ctx.Done():
		}
		return nil
	}
	begun := make(chan error, 1)
	go s.run(bound, release, held, l, writes, begun)
	return keepConsumed(bound, lr.ID, <-begun)
}

// consumedCancel is the error of a call whose run lost the write of its
// turn to a call with the same request id (ErrRequestTaken) after its
// Bind consumed a cancel kept for it (a chat's or a request's intent).
// Send passes the cancel on to the run that won: the same call, sent
// twice, which this one is answered as a repeat of.
type consumedCancel struct {
	err    error
	cancel *runcontrol.CancelError
}

func (e *consumedCancel) Error() string { return e.err.Error() }
func (e *consumedCancel) Unwrap() error { return e.err }

// keepConsumed wraps err in a consumedCancel when it is ErrRequestTaken
// and run runID's Bind consumed a kept cancel.
func keepConsumed(bound context.Context, runID string, err error) error {
	var ce *runcontrol.CancelError
	if !errors.Is(err, ErrRequestTaken) || !errors.As(context.Cause(bound), &ce) || ce.Scope == runcontrol.RunScope(runID) {
		return err
	}
	return &consumedCancel{err: err, cancel: ce}
}

// passOnCancel cancels runID, the run a repeated call is answered with,
// with the cancel its losing copy consumed (see consumedCancel). A run
// that has ended meanwhile keeps nothing (a run scope stores no intent).
func (s *Service) passOnCancel(runID string, err error) {
	var cc *consumedCancel
	if !errors.As(err, &cc) {
		return
	}
	if _, err := s.ctl.Cancel(s.base, runcontrol.RunScope(runID), cc.cancel); err != nil {
		s.log.Warn("pass on the cancel of a repeated call", "run", runID, "err", err)
	}
}

// run executes a launched run to its end (see launch). With writes, it
// reports on begun once they are committed with run_started (nil) or
// refused (the run's error: it then ends with nothing written).
func (s *Service) run(bound context.Context, release func(), held *runcontrol.Turn, l launch, writes []any, begun chan<- error) {
	report := func(err error) {
		if begun != nil {
			select {
			case begun <- err:
			default:
			}
		}
	}
	// Whatever way run returns, launch's caller is answered (a report
	// already made keeps its place: begun holds one).
	defer report(errRunNeverStarted)
	lr := l.run
	defer s.retire(lr, true)
	defer release()
	ctx := context.WithoutCancel(bound)
	// superseded is the queue's word that a newer turn replaced this one
	// while it waited; the cancel of its binding that comes with it may
	// still be on its way (through Redis), so the run is cancelled with
	// it here, not failed.
	var superseded error
	if held == nil && lr.ChatID != "" {
		var err error
		acq := bound
		if l.placed != nil {
			acq = runcontrol.WithPlaced(bound, l.placed)
		}
		lr.waitingSince.Store(time.Now().UnixNano())
		held, err = s.queue.Acquire(acq, lr.ChatID, lr.ID, l.strategy)
		lr.waitingSince.Store(0)
		if l.placed != nil {
			l.placed() // the turn, or no place: the wait for a place is over
		}
		switch {
		case err == nil, bound.Err() != nil:
		case errors.Is(err, runcontrol.ErrSuperseded):
			superseded = err
		default:
			// Not a cancel: the queue failed (a lost turn lease, say).
			s.failStart(ctx, l, err)
			return
		}
	}
	if held != nil {
		defer held.Release()
		if held.Strategy == runcontrol.Rollback && len(held.Superseded) > 0 && l.rollback != nil {
			l.rollback(ctx, held.Superseded)
		}
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	if superseded != nil {
		cancelRun(superseded)
	}
	hold := &terminalHold{pub: s.pub, lr: lr}
	defer hold.flush()
	var (
		linkOnce sync.Once
		stop     = func() bool { return false }
		started  bool
	)
	link := func() {
		linkOnce.Do(func() {
			if bound.Err() != nil {
				cancelRun(context.Cause(bound))
			} else {
				stop = context.AfterFunc(bound, func() { cancelRun(context.Cause(bound)) })
			}
		})
	}
	if l.linkNow {
		started = true
		link()
	}
	// Cancels are linked as soon as the run has emitted run_started,
	// before any node starts: a cancel that came first then ends the run
	// with nothing executed, though run_started itself is committed (and
	// emitted to subscribers) only with the run's first step.
	sink := runtime.StartSinkFunc{OnStart: func(string) { link() }, SinkFunc: func(ev runtime.Event) {
		if ev.Type == runtime.EventRunStarted {
			started = true
			report(nil)
		}
		hold.emit(ev)
	}}
	res, err := l.exec(runCtx, sink, writes)
	stop()
	// The run is over: a cancel from now on is for whatever runs next.
	release()
	if err != nil && !started {
		if begun != nil {
			// Its writes were refused with its creation: there is no
			// turn to settle, the caller answers the error.
			report(err)
			return
		}
		s.failStart(ctx, l, err)
		return
	}
	if errors.Is(err, runtime.ErrLeaseLost) || errors.Is(err, runtime.ErrFenced) {
		// Another owner took the run over (this process was too slow to
		// renew its lease): its outcome, message and terminal event are
		// the new owner's to write.
		s.log.Warn("run taken over by another owner", "run", lr.ID, "err", err)
		hold.discard()
		return
	}
	if err != nil {
		if _, recovers := s.runs.(runtime.Leaser); recovers {
			// The run's writes were refused: its record is still
			// running, and recovery takes it up again (backing off:
			// backoff.go). Its message is recovery's to finish, as the
			// outcome here is one the store never took.
			wait := s.refused.note(lr.ID, err, time.Now(), s.cfg.RecoveryInterval)
			s.log.Error("run store failed", "run", lr.ID, "err", err, "recovery_in", wait)
			hold.discard()
			return
		}
		s.log.Error("run store failed", "run", lr.ID, "err", err)
	} else {
		s.refused.forget(lr.ID)
	}
	if l.finish != nil {
		l.finish(ctx, res, err)
	}
	s.uncount(lr)
	hold.flush()
	if res != nil && res.Status == runtime.RunCancelled {
		// A cancel with action rollback: its turn goes, while the run
		// still holds its chat's turn (held is released after this), so
		// the next turn of the chat starts from what remains.
		s.undoIfRolledBack(ctx, lr.ChatID, lr.ID, res.Err)
	}
}

// errRunNeverStarted answers a launch whose run returned without starting
// or reporting an error (no path does today; launch must not wait forever
// if one ever does).
var errRunNeverStarted = errors.New("chat: the run ended before it started")

func (s *Service) failStart(ctx context.Context, l launch, cause error) {
	if l.failStart != nil {
		l.failStart(ctx, cause)
		return
	}
	s.log.Warn("run could not start", "run", l.run.ID, "err", cause)
}

// terminalHold publishes a run's events as they come but holds its
// terminal event back until flush: the assistant message is final before
// any client learns the run ended (so a GET right after run_interrupted
// sees the message interrupted, with its content).
type terminalHold struct {
	pub Publisher
	lr  *LiveRun
	mu  sync.Mutex
	ev  *runtime.Event
}

func (h *terminalHold) emit(ev runtime.Event) {
	if ev.Type.Terminal() {
		held := ev // only the held event goes to the heap, not every one emitted
		h.mu.Lock()
		h.ev = &held
		h.mu.Unlock()
		return
	}
	h.pub.RunEvent(h.lr, ev)
}

// discard drops the held terminal event: the run ended elsewhere.
func (h *terminalHold) discard() {
	h.mu.Lock()
	h.ev = nil
	h.mu.Unlock()
}

func (h *terminalHold) flush() {
	h.mu.Lock()
	ev := h.ev
	h.ev = nil
	h.mu.Unlock()
	if ev != nil {
		h.pub.RunEvent(h.lr, *ev)
	}
}

// prepare loads and checks everything a chat call needs; it writes
// nothing.
func (s *Service) prepare(ctx context.Context, req Request) (*turn, error) {
	if req.Strategy == "" {
		req.Strategy = runcontrol.DefaultStrategy
	}
	if err := req.Strategy.Validate(); err != nil {
		return nil, invalid("%v", err)
	}
	if req.Kind == KindContinueMessage && req.FromRunID != "" {
		rec, err := s.runs.GetRun(ctx, req.FromRunID)
		if err != nil {
			return nil, err
		}
		mid, _ := rec.Attrs["messageId"].(string)
		if rec.ChatID == "" || mid == "" {
			return nil, conflict("run %s is not a chat run", rec.ID)
		}
		req.ChatID, req.MessageID = rec.ChatID, mid
	}
	chat, grec, err := s.chats.GetChatGraph(ctx, req.ChatID)
	if err != nil {
		return nil, err
	}
	if grec == nil {
		return nil, conflict("the chat's graph %s was deleted", chat.GraphID)
	}
	g, err := s.graphOf(grec)
	if err != nil {
		return nil, err
	}
	t := &turn{req: req, chat: chat, graph: g}
	now := time.Now().UTC()
	newAssistant := func(parent *Message) {
		t.assistant = &Message{ID: NewID("m_"), ParentID: parent.ID, Role: RoleAssistant,
			Status: StatusPending, AgentNodeID: parent.AgentNodeID, CreatedAt: now}
	}
	newUser := func(parentID, content, agent string, tools []string) {
		t.user = &Message{ID: NewID("m_"), ParentID: parentID, Role: RoleUser, Content: content,
			Status: StatusCompleted, AgentNodeID: agent, UserTools: tools, CreatedAt: now}
		t.newUser = true
		newAssistant(t.user)
	}
	var target *Message
	if req.MessageID != "" {
		if target, err = s.chats.GetMessage(ctx, chat.ID, req.MessageID); err != nil {
			return nil, err
		}
	}
	switch req.Kind {
	case KindStreamChat, KindStreamAgentChat:
		parent := chat.ActiveLeafID
		if req.ParentID != nil && *req.ParentID != "" {
			if _, err := s.chats.GetMessage(ctx, chat.ID, *req.ParentID); err != nil {
				return nil, err
			}
			parent = *req.ParentID
		}
		if req.Kind == KindStreamAgentChat {
			n := findNode(g, req.AgentNodeID)
			if n == nil || n.Type != nodes.TypeAgent {
				return nil, invalid("agentNodeId %q is not an agent node of graph %s", req.AgentNodeID, g.ID)
			}
			t.entries = []string{req.AgentNodeID}
		}
		for _, h := range req.History {
			switch h.Role {
			case RoleUser, RoleAssistant, RoleSystem:
			default:
				return nil, invalid("history: role %q is not user, assistant or system", h.Role)
			}
			m := &Message{ID: NewID("m_"), ParentID: parent, Role: h.Role, Content: h.Content, Status: StatusCompleted, CreatedAt: now}
			t.history = append(t.history, m)
			parent = m.ID
		}
		newUser(parent, req.Content, req.AgentNodeID, req.UserTools)
	case KindEditUserMessage:
		if target.Role != RoleUser {
			return nil, invalid("message %s is not a user message", target.ID)
		}
		tools := req.UserTools
		if tools == nil {
			tools = target.UserTools
		}
		newUser(target.ParentID, req.Content, target.AgentNodeID, tools)
		if target.AgentNodeID != "" {
			t.entries = []string{target.AgentNodeID}
		}
	case KindRetryMessage:
		user := target
		if target.Role == RoleAssistant {
			if user, err = s.chats.GetMessage(ctx, chat.ID, target.ParentID); err != nil {
				return nil, conflict("message %s has no user message to answer again", target.ID)
			}
		}
		if user.Role != RoleUser {
			return nil, invalid("message %s answers no user message", target.ID)
		}
		t.user, t.retryTools = user, req.UserTools
		newAssistant(user)
		if user.AgentNodeID != "" {
			t.entries = []string{user.AgentNodeID}
		}
	case KindContinueMessage:
		if target.Role != RoleAssistant || target.RunID == "" {
			return nil, invalid("message %s is not an assistant message written by a run", target.ID)
		}
		if req.FromRunID != "" && req.FromRunID != target.RunID {
			return nil, conflict("run %s was already continued by run %s", req.FromRunID, target.RunID)
		}
		// The run record decides (the message follows it, and is final
		// only once its run's terminal event is published).
		rec, err := s.runs.GetRun(ctx, target.RunID)
		if errors.Is(err, runtime.ErrRunNotFound) || err == nil && rec.Status == runtime.RunPending {
			return nil, conflict("message %s is %s: its run %s has not started", target.ID, target.Status, target.RunID)
		}
		if err != nil {
			return nil, err
		}
		if !Continuable(rec.Status) {
			return nil, conflict("run %s is %s: only an interrupted, cancelled or failed run can be continued", rec.ID, rec.Status)
		}
		t.parentRun, t.assistant, t.entries = rec, target, rec.EntryNodeIDs
		if err := t.answers(req.Resume); err != nil {
			return nil, err
		}
	default:
		return nil, invalid("unknown chat call %q", req.Kind)
	}
	if err := s.preflight(t); err != nil {
		return nil, err
	}
	if err := s.checkUserTools(t); err != nil {
		return nil, err
	}
	return t, nil
}

// userTools are the user tools the turn's run enables: a retry's own, or
// those of its user message.
func (t *turn) userTools() []string {
	if t.retryTools != nil {
		return t.retryTools
	}
	return t.user.UserTools
}

// checkUserTools refuses a new user message enabling tools that no agent
// of the run may use: not on the graph's userTools lists or, where the
// graph lists none, not registered safe (tools with outside effects must
// be listed). With no agent taking user tools they are moot and pass.
func (s *Service) checkUserTools(t *turn) error {
	if s.cfg.Tools == nil || !t.newUser && t.retryTools == nil || len(t.userTools()) == 0 {
		return nil
	}
	refused := chatscope.New(t.plan, t.entries).RefusedUserTools(t.userTools(), s.cfg.Tools.Safe)
	if len(refused) == 0 {
		return nil
	}
	var safe []string
	for _, name := range s.cfg.Tools.Names() {
		if s.cfg.Tools.Safe(name) {
			safe = append(safe, name)
		}
	}
	return &Error{Code: CodeInvalid, Details: map[string]any{"userTools": refused},
		Message: fmt.Sprintf("userTools %s: not allowed by graph %s: a graph enables a tool for its users by listing it in "+
			"its chat_start's userTools; without a list only tools with no outside effects may be enabled (%s)",
			strings.Join(refused, ", "), t.graph.ID, strings.Join(safe, ", "))}
}

// answers maps a continue's resume value onto the parent run's pending
// interrupts: an object keyed by their ids answers several, anything else
// answers the only one. A value for a run with none pending (one that
// failed or was cancelled, which voids its waits) is refused: it would
// answer nothing.
func (t *turn) answers(v any) error {
	if v == nil {
		return nil
	}
	pending := t.parentRun.Interrupts
	if len(pending) == 0 {
		return conflict("run %s is %s with no pending interrupt: a resume value would answer nothing (continue it without one)",
			t.parentRun.ID, t.parentRun.Status)
	}
	if m, ok := v.(map[string]any); ok && len(pending) > 1 {
		vals := map[string]any{}
		for _, in := range pending {
			if x, ok := m[in.ID]; ok {
				vals[in.ID] = x
			}
		}
		if len(vals) == len(m) {
			for _, in := range pending {
				if x, ok := vals[in.ID]; ok {
					if err := checkAnswer(in, x); err != nil {
						return err
					}
				}
			}
			t.values = vals
			return nil
		}
	}
	if len(pending) > 1 {
		ids := make([]string, len(pending))
		for i, in := range pending {
			ids[i] = in.ID
		}
		return &Error{Code: CodeInvalid, Message: "the run has several pending interrupts: resume with an object keyed by interrupt id",
			Details: map[string]any{"interruptIds": ids}}
	}
	if err := checkAnswer(pending[0], v); err != nil {
		return err
	}
	t.value = v
	return nil
}

// checkAnswer refuses a resume value that its interrupt's node could
// only fail on (an approval's that is no decision, see
// nodes.ParseApproval): refused here, the wait stays pending and the
// client may answer again; taken, the continued run would fail with
// invalid_resume and the wait be lost with it.
func checkAnswer(in runtime.InterruptInfo, v any) error {
	var err error
	switch in.Reason {
	case nodes.ReasonApproval, nodes.ReasonToolApproval:
		_, err = nodes.ParseApproval(v)
	case nodes.ReasonClientTool:
		_, _, err = nodes.ParseClientResult(v)
	}
	if err == nil {
		return nil
	}
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf("the answer to interrupt %s (%s at node %s): %v", in.ID, in.Reason, in.NodeID, err),
		Details: map[string]any{"interruptId": in.ID}}
}

func findNode(g *runtime.Graph, id string) *runtime.Node {
	for i := range g.Nodes {
		if g.Nodes[i].ID == id {
			return &g.Nodes[i]
		}
	}
	return nil
}

// preflight compiles the graph and asks the kernel whether the part the
// run would touch can run, so a call that cannot start is refused with
// the diagnostics instead of a run that fails at once.
func (s *Service) preflight(t *turn) error {
	p, err := s.engine.Compile(t.graph)
	if err != nil {
		return err
	}
	t.plan = p
	ds := p.CheckEntries(t.entries)
	if len(ds) == 0 {
		return nil
	}
	if len(t.entries) == 0 && len(ds) == 1 && ds[0].Code == runtime.CodeUnknownEntry {
		return &Error{Code: CodeInvalidGraph, Message: "the graph has no chat_start node to run from",
			Details: runtime.Diagnostics{{Severity: runtime.SeverityError, Code: runtime.CodeUnknownEntry, Path: "nodes",
				Message: "add a chat_start node (or send stream_agent_chat to an agent)"}}}
	}
	if len(ds) == 1 && ds[0].Code == runtime.CodeUnknownEntry {
		return invalid("%s", ds[0].Message)
	}
	return &Error{Code: CodeInvalidGraph, Message: "the part of the graph this run needs is invalid", Details: ds}
}

// reservation is the run record a turn writes with its messages: status
// pending until the engine's creation of the run fills it.
func (s *Service) reservation(t *turn, runID string) *runtime.RunRecord {
	now := time.Now().UTC()
	rec := &runtime.RunRecord{ID: runID, RootID: runID, ChatID: t.chat.ID, GraphID: t.graph.ID, PlanVersion: t.graph.PlanVersion,
		Kind: string(t.req.Kind), Attrs: t.attrs(), EntryNodeIDs: t.entries, Input: t.queued(), Status: runtime.RunPending,
		CreatedAt: now, UpdatedAt: now}
	if t.parentRun != nil {
		rec.ParentID, rec.RootID = t.parentRun.ID, t.parentRun.RootID
	}
	return rec
}

// attrs are the run's attributes (run_started data.attrs).
func (t *turn) attrs() map[string]any {
	a := map[string]any{"messageId": t.assistant.ID}
	if t.req.ClientRequestID != "" {
		a["clientRequestId"] = t.req.ClientRequestID
	}
	if t.req.Kind == KindContinueMessage {
		a["trigger"] = string(KindContinueMessage)
	} else {
		a["userMessageId"] = t.user.ID
	}
	return a
}

// ticket is what the turn reveals once runID is its run.
func (t *turn) ticket(runID string) Ticket {
	tk := Ticket{RunID: runID, MessageID: t.assistant.ID, ChatID: t.chat.ID}
	if t.newUser {
		tk.UserMessageID = t.user.ID
	}
	return tk
}

// writeTurn persists the turn's messages (or claims the continued one)
// with the reservation of its run, in one transaction, before the run id
// is revealed. A new answer whose run holds its chat's turn (it starts at
// once) is written running; one that waits in the chat's queue is
// written pending and marked running when its run starts.
func (s *Service) writeTurn(ctx context.Context, t *turn, runID string, holding bool) ([]any, error) {
	w := Turn{ChatID: t.chat.ID, Run: s.reservation(t, runID)}
	if t.fingerprint != "" {
		w.Request = &RequestRecord{ID: t.req.ClientRequestID, Fingerprint: t.fingerprint, Ticket: t.ticket(runID)}
	}
	if t.req.Kind == KindContinueMessage {
		w.Claim = &Claim{MessageID: t.assistant.ID, FromRunID: t.assistant.RunID}
		var writes []any
		if holding && s.join != nil {
			writes = []any{s.join.TurnWrite(w)}
		} else if err := s.chats.BeginTurn(ctx, w); err != nil {
			return nil, err
		}
		t.assistant.RunID, t.assistant.Status, t.assistant.Error = runID, StatusPending, ""
		return writes, nil
	}
	t.assistant.RunID, t.assistant.TurnRunID = runID, runID
	if holding {
		t.assistant.Status = StatusRunning
	}
	w.ActiveLeafID = t.assistant.ID
	w.Messages = []*Message{t.assistant}
	if t.newUser {
		t.user.RunID, t.user.TurnRunID = runID, runID
		w.Messages = []*Message{t.user, t.assistant}
	}
	if len(t.history) > 0 {
		for _, m := range t.history {
			m.TurnRunID = runID
		}
		w.Messages = append(slices.Clone(t.history), w.Messages...)
	}
	if holding && s.join != nil {
		return []any{s.join.TurnWrite(w)}, nil
	}
	return nil, s.chats.BeginTurn(ctx, w)
}

// execTurn executes (or, for a continue, resumes) the turn's run; writes
// join the run's first commit. With a Joiner store the answer marked
// running (a turn that waited in its chat's queue) joins it too, and the
// final answer, a stopped one's text included, is written in the commit
// of the run's end.
func (s *Service) execTurn(ctx context.Context, t *turn, runID string, sink runtime.EventSink, writes []any) (*runtime.RunResult, error) {
	j := runtime.Joined{Writes: writes}
	if t.req.Kind != KindContinueMessage && t.assistant.Status != StatusRunning {
		t.assistant.Status = StatusRunning
		if s.join != nil {
			j.Writes = append(j.Writes, s.join.FinishWrite(t.assistant))
		} else {
			_ = s.chats.FinishMessage(ctx, t.assistant)
		}
	}
	if s.join != nil {
		end := s.endAnswer(t.graph, t.entries, func() *Message { return t.assistant })
		j.Tap, j.EndWrites = end.Tap, end.EndWrites
	}
	services, hist := s.services(chatscope.New(t.plan, t.entries))
	if t.req.Kind == KindContinueMessage {
		// The continued run's input (and its history reference) carries over.
		return s.engine.Resume(ctx, runtime.ResumeRequest{RunID: t.parentRun.ID, NewRunID: runID, Plan: t.plan,
			Kind: string(KindContinueMessage), Value: t.value, Values: t.values, Attrs: t.attrs(), Services: services, Sink: sink,
			Joined: j})
	}
	in, err := s.turnInput(ctx, t, hist)
	if err != nil {
		return nil, err
	}
	return s.engine.Invoke(ctx, runtime.RunRequest{RunID: runID, ChatID: t.chat.ID, Plan: t.plan,
		EntryNodeIDs: t.entries, Input: in, Kind: string(t.req.Kind), Attrs: t.attrs(), Services: services, Sink: sink,
		Joined: j})
}

// endAnswer joins the answer a run of g ends with to the commit of its
// end (a Joiner store): answer, read when the run ends, is the message to
// write (nil: none), settled from the run's outcome and, if it is a
// stopped answer, given the text its live agent said — gathered from the
// run's events as it emits them (Tap), the text its log holds
// (stopped.go).
func (s *Service) endAnswer(g *runtime.Graph, entries []string, answer func() *Message) runtime.Joined {
	said := &saidText{graph: g}
	return runtime.Joined{Tap: said.see, EndWrites: func(res *runtime.RunResult) []any {
		m := answer()
		if m == nil {
			return nil
		}
		settle(m, g, entries, res, nil)
		if stoppedUnsaid(m, res) {
			m.Content = said.String()
		}
		return []any{s.join.FinishWrite(m)}
	}}
}

// turnInput builds the run input: a reference to the branch before the
// turn's user message (see history.go), its content and the user's tools.
// It runs when the run starts, and primes the run's history source with
// the branch it read.
func (s *Service) turnInput(ctx context.Context, t *turn, hist *historySource) (any, error) {
	in := nodes.ChatInput{Content: t.user.Content, UserTools: t.userTools(), ClientTools: t.req.ClientTools}
	if t.user.ParentID != "" {
		msgs, err := s.chats.Messages(ctx, t.chat.ID)
		if err != nil {
			return nil, err
		}
		if msgs, err = s.asWritten(ctx, t, msgs); err != nil {
			return nil, err
		}
		br, err := branch(msgs, t.user.ParentID)
		if err != nil {
			return nil, err
		}
		in.HistoryFrom = historyRef(t.chat.ID, br)
		hist.prime(in.HistoryFrom, historyOf(br, nil))
	}
	return in.Value(), nil
}

// asWritten returns the chat's messages (msgs) with the turn's own, and
// the turn's user message hanging where the store has it or will write
// it: a rollback ahead of the turn that deleted its parent hung it from
// what remains (Store.DeleteMessages when the turn was written before,
// Store.BeginTurn after). A turn that holds its chat's turn joins its
// messages to its run's first commit, so they are not written yet; no
// rollback of the chat runs meanwhile, and the parent they will be
// written under is the one Store.Remains answers now.
func (s *Service) asWritten(ctx context.Context, t *turn, msgs []*Message) ([]*Message, error) {
	stored := make(map[string]*Message, len(msgs))
	for _, m := range msgs {
		stored[m.ID] = m
	}
	own := append(slices.Clone(t.history), t.user)
	for i, m := range own {
		if w := stored[m.ID]; w != nil {
			m.ParentID = w.ParentID
			continue
		}
		if i == 0 && m.ParentID != "" && stored[m.ParentID] == nil {
			p, err := s.chats.Remains(ctx, t.chat.ID, m.ParentID)
			if err != nil {
				return nil, fmt.Errorf("the parent %s of the turn: %w", m.ParentID, err)
			}
			m.ParentID = p
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// rollback deletes the messages and runs of the turns a rollback undid,
// making the turn's own answer the chat's active leaf (undo).
func (s *Service) rollback(ctx context.Context, t *turn, victims []string) {
	s.undo(ctx, t.chat.ID, victims, t.assistant.ID)
}

// undo deletes the messages the turns of runs victims wrote and the runs
// themselves, as if their calls had never been sent; activeLeaf, when
// not empty, becomes the chat's active leaf (else an active leaf it
// deletes moves to what remains). The store moves the messages left
// hanging from one it deletes — a rolling-back turn's user message,
// those of turns sent meanwhile (they queue behind it), also ones
// another process writes at that moment — onto what remains
// (Store.DeleteMessages, Store.BeginTurn).
//
// A run whose turn wrote no message — a continue_message or resume run,
// which answers in the message it continues — stays, as its cancel left
// it: deleting it would leave that message naming a run that is gone,
// which nothing could continue again.
func (s *Service) undo(ctx context.Context, chatID string, victims []string, activeLeaf string) {
	msgs, err := s.chats.Messages(ctx, chatID)
	if err != nil {
		s.log.Error("rollback: reading messages", "chat", chatID, "err", err)
		return
	}
	undone := map[string]bool{}
	for _, v := range victims {
		undone[v] = true
	}
	var del []string
	wrote := map[string]bool{}
	for _, m := range msgs {
		if m.TurnRunID != "" && undone[m.TurnRunID] {
			del = append(del, m.ID)
			wrote[m.TurnRunID] = true
		}
	}
	if len(del) > 0 || activeLeaf != "" {
		if err := s.chats.DeleteMessages(ctx, chatID, del, activeLeaf); err != nil {
			s.log.Error("rollback: deleting messages", "chat", chatID, "err", err)
		}
	}
	var deleted []string
	if ins, ok := s.runs.(runtime.Inspector); ok {
		for _, v := range victims {
			if !wrote[v] {
				continue
			}
			if err := ins.DeleteRun(ctx, v); err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				s.log.Warn("rollback: deleting run", "run", v, "err", err)
			}
			deleted = append(deleted, v)
		}
	}
	s.log.Info("rolled back", "chat", chatID, "runs", deleted, "kept", len(victims)-len(deleted), "messages", len(del))
}

// finishMessage writes the assistant message's final status and content
// (unless a continue has taken the message over meanwhile).
func (s *Service) finishMessage(ctx context.Context, m *Message, g *runtime.Graph, entries []string, res *runtime.RunResult, err error) {
	if m == nil || m.ID == "" {
		return
	}
	settle(m, g, entries, res, err)
	s.keepStoppedText(ctx, m, g, res)
	if uerr := s.chats.FinishMessage(ctx, m); uerr != nil && !errors.Is(uerr, ErrNotFound) && !errors.Is(uerr, ErrConflict) {
		s.log.Error("writing the assistant message", "message", m.ID, "err", uerr)
	}
}

// settle sets the assistant message's final status, error and content
// from its run's outcome (res nil: the run's store failed).
func settle(m *Message, g *runtime.Graph, entries []string, res *runtime.RunResult, err error) {
	switch {
	case res == nil:
		m.Status, m.Error = StatusFailed, "the run's store failed"
	default:
		m.Status, m.Error = StatusOf(res.Status), ""
		switch res.Status {
		case runtime.RunFailed:
			m.Error = errText(res.Err, "the run failed")
		case runtime.RunCancelled:
			code := runcontrol.Code(res.Err)
			if code == "" {
				code = "cancelled"
			}
			m.Error = code
		}
		if text, ok := answer(res, g, entries); ok {
			m.Content = text
		}
	}
	if err != nil && m.Error == "" {
		m.Error = "the run's store failed"
	}
}

func errText(err error, def string) string {
	if err == nil {
		return def
	}
	var ne *runtime.NodeError
	if errors.As(err, &ne) {
		return fmt.Sprintf("node %s failed (%s): %v", ne.NodeID, ne.Code, ne.Err)
	}
	return err.Error()
}

// answer is the assistant text of a run: the chat_output nodes' messages
// (in graph order, joined by blank lines), else the entry agent's answer.
func answer(res *runtime.RunResult, g *runtime.Graph, entries []string) (string, bool) {
	var parts []string
	for _, n := range g.Nodes {
		if n.Type != nodes.TypeChatOutput {
			continue
		}
		if out, ok := res.Output(n.ID); ok {
			parts = append(parts, nodes.AsMessage(out).Content)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n\n"), true
	}
	for _, id := range entries {
		if n := findNode(g, id); n != nil && n.Type == nodes.TypeAgent {
			if out, ok := res.Output(id); ok {
				return nodes.AsMessage(out).Content, true
			}
		}
	}
	return "", false
}

// failRun ends a run that could not start (the engine refused it, the
// chat queue failed, or its process died before it began) the way every
// run ends: a run record (over its reservation) and a log of run_started
// then run_failed, so its subscribers are never left waiting, and a
// failed message. A run that never started never takes its turn: it
// leaves its chat's line, where a queue that keeps places past their
// process (runcontrol.Lingering) would otherwise hold up the turns behind
// it until its place expired — a queued turn whose process died, say.
// lr is nil when the run is not live here.
func (s *Service) failRun(ctx context.Context, lr *LiveRun, base *runtime.RunRecord, cause error) {
	// The message a client may read: never an internal error's text.
	msg, code := "internal error", "start_failed"
	var ge *runtime.GraphError
	var ce *Error
	switch {
	case errors.As(cause, &ge):
		code, msg = string(CodeInvalidGraph), ge.Error()
	case errors.As(cause, &ce):
		msg = ce.Message
	case errors.Is(cause, errLost):
		code, msg = "lost", cause.Error()
	case errors.Is(cause, runtime.ErrUnknownEntry), errors.Is(cause, runtime.ErrRunNotResumable),
		errors.Is(cause, runtime.ErrInterruptNotFound), errors.Is(cause, runtime.ErrRunNotFound),
		errors.Is(cause, ErrNotFound):
		msg = cause.Error()
	}
	s.log.Warn("run could not start", "run", base.ID, "chat", base.ChatID, "err", cause)
	now := time.Now().UTC()
	rec := *base
	rec.Status, rec.Error, rec.LastSeq, rec.CreatedAt, rec.UpdatedAt = runtime.RunFailed, msg, 0, now, now
	rec.Input = nil // a reservation's (queuedTurn): the run never had an input
	mid, _ := rec.Attrs["messageId"].(string)
	started := &runtime.RunStartedData{Kind: rec.Kind, GraphID: rec.GraphID, PlanVersion: rec.PlanVersion,
		EntryNodeIDs: orEmpty(rec.EntryNodeIDs), ActiveNodeIDs: []string{}, ParentRunID: rec.ParentID, Resumed: rec.ParentID != "",
		Attrs: map[string]any{"messageId": mid}}
	evs := []runtime.Event{
		{Seq: 1, RunID: rec.ID, ChatID: rec.ChatID, Type: runtime.EventRunStarted, Time: now, Data: started},
		{Seq: 2, RunID: rec.ID, ChatID: rec.ChatID, Type: runtime.EventRunFailed, Time: now,
			Data: &runtime.RunFailedData{Error: msg, Code: code}},
	}
	if err := s.runs.CreateRun(ctx, &rec); err != nil {
		// Someone else settled or started it: leave it to them.
		s.log.Warn("recording a run that could not start", "run", rec.ID, "err", err)
		return
	}
	if err := s.runs.AppendEvents(ctx, rec.ID, rec.Token, evs); err != nil {
		s.log.Error("logging a run that could not start", "run", rec.ID, "err", err)
	}
	if mid != "" && rec.ChatID != "" {
		m, err := s.chats.GetMessage(ctx, rec.ChatID, mid)
		if err == nil && m.RunID == rec.ID {
			m.Status, m.Error = StatusFailed, msg
			_ = s.chats.FinishMessage(ctx, m)
		}
	}
	if lr != nil {
		for _, ev := range evs {
			s.pub.RunEvent(lr, ev)
		}
	}
	if l, ok := s.queue.(runcontrol.Lingering); ok && rec.ChatID != "" {
		if err := l.Leave(ctx, rec.ChatID, rec.ID); err != nil {
			s.log.Warn("a run that could not start: its place in its chat's line (it expires by itself)", "run", rec.ID, "chat", rec.ChatID, "err", err)
		}
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
