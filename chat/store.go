package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"chatgraph/runtime"
)

// Errors callers branch on.
var (
	// ErrNotFound: no graph, chat or message with that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the id is taken, or a compare-and-set lost.
	ErrConflict = errors.New("conflict")
	// ErrTooManyChats: the chat's owner already has as many chats as it
	// may (Config.MaxChatsPerClient).
	ErrTooManyChats = errors.New("too many chats")
	// ErrRequestTaken: a turn's request id (Turn.Request) is the chat's
	// already, another call's.
	ErrRequestTaken = errors.New("request id taken")
)

// CheckOwned is a store's CreateChat decision, from what it counted in
// the creating transaction: the chats the owner has (owned), whether the
// id is taken, and the bound (maxOwned). A taken id is a conflict even at
// the bound.
func CheckOwned(id string, owned int, taken bool, maxOwned int) error {
	if taken {
		return fmt.Errorf("%w: chat %s exists", ErrConflict, id)
	}
	if owned >= maxOwned {
		return fmt.Errorf("%w: the limit is %d per client", ErrTooManyChats, maxOwned)
	}
	return nil
}

// Graph is a saved graph. Body is the graph JSON as the editor saved it
// (React Flow shape, unknown fields kept) with its id, name and
// planVersion set by the store's caller.
type Graph struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	PlanVersion int64           `json:"planVersion"`
	Body        json.RawMessage `json:"-"`
	CreatedAt   time.Time       `json:"createdAt"`
	UpdatedAt   time.Time       `json:"updatedAt"`
}

// Chat is a conversation with one graph. Its messages form a tree;
// ActiveLeafID is the last message of the branch the user looks at.
type Chat struct {
	ID           string `json:"id"`
	GraphID      string `json:"graphId"`
	Title        string `json:"title,omitempty"`
	ActiveLeafID string `json:"activeLeafId"`
	// Owner is the client that created the chat (the key WithClient
	// names; "" for chats of no known client): its chats count against
	// Config.MaxChatsPerClient. Not on the wire.
	Owner     string    `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Role says who wrote a message.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleSystem: instructions a client sent in its transcript
	// (Request.History); agents read them as system messages.
	RoleSystem Role = "system"
)

// Status is a message's status. User messages are completed when written;
// an assistant message follows the run that writes it (see StatusOf).
type Status string

// Message statuses.
const (
	StatusPending     Status = "pending"
	StatusRunning     Status = "running"
	StatusCompleted   Status = "completed"
	StatusFailed      Status = "failed"
	StatusCancelled   Status = "cancelled"
	StatusInterrupted Status = "interrupted"
)

// StatusOf is THE mapping from a run's status to the status of the
// assistant message it writes.
func StatusOf(s runtime.RunStatus) Status {
	switch s {
	case runtime.RunRunning:
		return StatusRunning
	case runtime.RunCompleted:
		return StatusCompleted
	case runtime.RunFailed:
		return StatusFailed
	case runtime.RunCancelled:
		return StatusCancelled
	case runtime.RunInterrupted:
		return StatusInterrupted
	}
	return StatusPending
}

// Settled reports whether a message's status is final for its run.
func (s Status) Settled() bool { return s != StatusPending && s != StatusRunning }

// Continuable reports whether a run that ended in status s may be
// continued (resumed into a new run): interrupted, cancelled or failed.
func Continuable(s runtime.RunStatus) bool {
	return s == runtime.RunInterrupted || s == runtime.RunCancelled || s == runtime.RunFailed
}

// Message is one node of a chat's message tree.
type Message struct {
	// Seq is the message's place in its chat's creation order, set by the
	// store when it reads the message (the cursor of ListMessages).
	Seq      int64  `json:"-"`
	ID       string `json:"id"`
	ChatID   string `json:"chatId"`
	ParentID string `json:"parentId"`
	Role     Role   `json:"role"`
	Content  string `json:"content"`
	// RunID is the run that wrote an assistant message (the latest one,
	// after a continue), or the run a user message started.
	RunID  string `json:"runId"`
	Status Status `json:"status"`
	// TurnRunID is the run whose turn created the message; it never
	// changes (a rollback deletes the messages of the runs it undoes).
	TurnRunID string `json:"turnRunId,omitempty"`
	// AgentNodeID is the entry agent of a stream_agent_chat turn.
	AgentNodeID string `json:"agentNodeId,omitempty"`
	// UserTools are the tools the user enabled for the turn.
	UserTools []string `json:"userTools,omitempty"`
	// Error says why an assistant message failed or was cancelled.
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Turn is what one chat call writes, in ONE transaction with the run
// store of the same database: the turn's new messages (or the claim of
// the assistant message a continue takes over) and the reservation of its
// run (a run record in status pending, which the engine's creation of the
// run then fills). So a crash leaves either nothing or messages with a
// run record that recovery settles.
type Turn struct {
	ChatID string
	// ActiveLeafID, when not empty, becomes the chat's active leaf.
	ActiveLeafID string
	// Messages are inserted (ErrConflict if an id is taken).
	Messages []*Message
	// Claim, when set, moves an existing assistant message to Run.ID.
	Claim *Claim
	// Run is the reservation: Status must be runtime.RunPending.
	Run *runtime.RunRecord
	// Request, when set, is kept under (ChatID, Request.ID): the turn is
	// refused (ErrRequestTaken) when the chat has that request id.
	Request *RequestRecord
}

// RequestRecord is a chat call made with an idempotent client request id
// (Request.Idempotent): what a call sent again is answered with.
type RequestRecord struct {
	ID string
	// Fingerprint digests what the call asked (requestFingerprint): the
	// same id with another fingerprint is another call.
	Fingerprint string
	// Ticket is what the call revealed: its run, its messages, its chat.
	Ticket    Ticket
	CreatedAt time.Time
}

// Claim names the assistant message a continue takes over: the claim
// succeeds only while the message still belongs to FromRunID (the
// compare-and-set that lets exactly one continue win); it leaves the
// message pending, with no error, under the new run.
type Claim struct {
	MessageID string
	FromRunID string
}

// InlineRun is a chat run whose stored input still carries its history
// inline (the form runs had before they referenced the chat's messages).
type InlineRun struct {
	ID     string
	ChatID string
	Attrs  map[string]any
	Input  any
}

// HistoryMigrator is an optional Store capability of the stores that
// share their database with the run store (sqlite, postgres): the data
// migration of chat runs whose input carries their history inline to
// inputs that reference it (Service.Start runs it, a batch at a time).
type HistoryMigrator interface {
	// MigrateInlineHistory is one batch of the migration, in one
	// transaction: unless the migration is recorded as applied (Done at
	// once), it reads up to limit chat runs with ids after after (in id
	// order) whose input has an inline "history", passes each to rewrite
	// with the messages of its chat, and stores the input rewrite returns
	// (false keeps the input as it is). A batch shorter than limit is the
	// last: its transaction records the migration as applied (Done).
	MigrateInlineHistory(ctx context.Context, after string, limit int, rewrite func(InlineRun, []*Message) (any, bool)) (HistoryBatch, error)
}

// HistoryBatch is what one batch of the history migration did.
type HistoryBatch struct {
	// Last is the id of the last run the batch read (the next batch's after).
	Last string
	// Rewritten and Kept count the inputs rewritten and kept inline.
	Rewritten, Kept int
	// Done: the migration is applied; there is no next batch.
	Done bool
}

// RewriteInline is the part of a MigrateInlineHistory batch the stores
// share, run in the batch's transaction: it hands each of runs (the
// batch, in id order) with the messages of its chat (read once per chat
// through messages) to rewrite, stores what rewrite returns, as JSON,
// through setInput, and counts both outcomes and the last run in b.
func RewriteInline(b *HistoryBatch, runs []InlineRun, messages func(chatID string) ([]*Message, error),
	setInput func(runID string, input []byte) error, rewrite func(InlineRun, []*Message) (any, bool)) error {
	msgs := map[string][]*Message{}
	for _, r := range runs {
		b.Last = r.ID
		ms, ok := msgs[r.ChatID]
		if !ok {
			var err error
			if ms, err = messages(r.ChatID); err != nil {
				return err
			}
			msgs[r.ChatID] = ms
		}
		in, ok := rewrite(r, ms)
		if !ok {
			b.Kept++
			continue
		}
		enc, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("run %s: input: %w", r.ID, err)
		}
		if err := setInput(r.ID, enc); err != nil {
			return err
		}
		b.Rewritten++
	}
	return nil
}

// Remaining is the part of a DeleteMessages the stores share: given the
// parent of each message it deleted, by id, it returns those ids (in
// order) and where each leads — its nearest ancestor not deleted (there,
// as the tree holds no orphan) or "" for the root.
func Remaining(parents map[string]string) (ids, leadsTo []string) {
	ids = slices.Sorted(maps.Keys(parents))
	leadsTo = make([]string, len(ids))
	for i, id := range ids {
		p := parents[id]
		for hops := 0; hops < len(parents); hops++ {
			next, deleted := parents[p]
			if !deleted {
				break
			}
			p = next
		}
		leadsTo[i] = p
	}
	return ids, leadsTo
}

// Joiner is implemented by chat stores in the run store's database whose
// writes can be committed in a run's own transactions (runtime.Joined)
// instead of their own: a turn that starts at once then writes its
// messages in the commit that creates its run and logs run_started, and
// its answer in the commit of the run's end (one transaction, one fsync,
// fewer per turn, and no moment where the two disagree). The values they
// return are writes of the run store's type (runtime.WriteBatch.Writes).
type Joiner interface {
	// TurnWrite is BeginTurn as a joined write, for the commit that
	// creates t.Run: that creation makes the reservation needless, so
	// t.Run only names the run (its record is not written). Its errors
	// are BeginTurn's. The messages are dated now, when the write is made.
	TurnWrite(t Turn) any
	// FinishWrite is FinishMessage as a joined write, except that a
	// message that no longer belongs to m.RunID is left as it is without
	// an error (a refusal would undo the run's whole commit). m is read
	// now: later changes to it are not written.
	FinishWrite(m *Message) any
}

// TombstoneTTL is how long a chat store remembers where a deleted
// message leads (Store.Remains): far longer than a turn takes from
// reading its parent to writing its messages. A tombstone exactly
// TombstoneTTL old has expired; the stores drop expired ones at a later
// DeleteMessages (of any chat).
const TombstoneTTL = 10 * time.Minute

// Page selects one page of a list: at most Limit items (0: all) that come
// after After in the list's order. After is the last item of the previous
// page: its time in that order (UpdatedAt for graphs, CreatedAt for
// chats) and its id, as the store returned them; the zero Cursor starts
// at the beginning. Keyset paging: a page never repeats or skips an item
// of the pages before it, whatever is written meanwhile (an item moved by
// an update may appear again, at its new place).
type Page struct {
	Limit int
	After Cursor
}

// Cursor is a position in a list: the time and id of an item.
type Cursor struct {
	At time.Time
	ID string
}

// IsZero reports whether c is the start of a list.
func (c Cursor) IsZero() bool { return c.ID == "" && c.At.IsZero() }

// Store persists graphs and chats, in the same database as the run store
// it was opened with. Implementations are safe for concurrent use; the
// caller closes them (closing a chat store never closes its run store).
type Store interface {
	// CreateGraph inserts g with PlanVersion 1 (or, for the id of a
	// deleted graph, one more than its last version, so compiled plans
	// cached under the old versions never apply). It sets g.PlanVersion
	// and the timestamps. ErrConflict if a live graph has the id.
	CreateGraph(ctx context.Context, g *Graph) error
	// GetGraph returns the graph; ErrNotFound if absent or deleted.
	GetGraph(ctx context.Context, id string) (*Graph, error)
	// ListGraphs returns live graphs, most recently updated first (ties
	// by id), one page of them (see Page).
	ListGraphs(ctx context.Context, p Page) ([]*Graph, error)
	// GraphsNamed returns live graphs whose name is exactly name, in
	// ListGraphs' order, at most limit of them (0: all). Deleted graphs
	// never match. Limit 2 tells a unique name from a shared one without
	// reading every graph (the OpenAI-compatible API's model names).
	GraphsNamed(ctx context.Context, name string, limit int) ([]*Graph, error)
	// UpdateGraph replaces name and body and bumps PlanVersion by one,
	// setting g.PlanVersion and the timestamps. With ifVersion > 0 it fails
	// with ErrConflict unless the stored version is ifVersion.
	UpdateGraph(ctx context.Context, g *Graph, ifVersion int64) error
	// GetGraphVersion returns the graph as it was saved at version (runs
	// recovered after a crash continue on the version they started with),
	// also after the graph was updated or deleted; ErrNotFound if never saved.
	GetGraphVersion(ctx context.Context, id string, version int64) (*Graph, error)
	// DeleteGraph deletes a graph (its id keeps its last version).
	DeleteGraph(ctx context.Context, id string) error

	// CreateChat inserts c (ErrConflict if the id is taken). With
	// maxOwned > 0 and c.Owner set, it fails with ErrTooManyChats when
	// the owner has maxOwned chats already (counted and inserted
	// atomically, so concurrent creations never pass the bound).
	CreateChat(ctx context.Context, c *Chat, maxOwned int) error
	// GetChat returns the chat; ErrNotFound if absent.
	GetChat(ctx context.Context, id string) (*Chat, error)
	// GetChatGraph returns the chat and its graph (nil when the graph is
	// absent or deleted) as one read: what every chat call reads first.
	// ErrNotFound if the chat is absent.
	GetChatGraph(ctx context.Context, id string) (*Chat, *Graph, error)
	// ListChats returns the chats of graphID ("" = all), newest first
	// (ties by id), one page of them (see Page).
	ListChats(ctx context.Context, graphID string, p Page) ([]*Chat, error)
	// DeleteChat deletes a chat and its messages.
	DeleteChat(ctx context.Context, id string) error

	// BeginTurn writes t in one transaction (see Turn). ErrNotFound if the
	// chat (or the claimed message) is absent; ErrConflict if a message
	// id is taken, the claim lost, or the run id is taken.
	//
	// A message is never written under a parent that is not there. One
	// whose parent a DeleteMessages removed (a rollback, in this process
	// or another, that committed after the caller read the parent) is
	// hung from what remains of it — the parent's nearest ancestor that
	// stayed, as DeleteMessages re-parents the children it finds (see
	// Remains) — and its ParentID is set to it; a parent that neither is
	// there nor was deleted within TombstoneTTL fails the turn with
	// ErrNotFound. The check and the insert are one transaction that
	// DeleteMessages of the chat is serialised with, so the turn is kept
	// and the tree holds no orphan whichever commits first.
	BeginTurn(ctx context.Context, t Turn) error
	// UpdateMessage writes m's content, status, run id and error. (A
	// message's parent is the store's to keep: see DeleteMessages.)
	UpdateMessage(ctx context.Context, m *Message) error
	// FinishMessage writes m's content, status and error only while the
	// stored message still belongs to run m.RunID (a continue may have
	// taken it over since); ErrConflict otherwise.
	FinishMessage(ctx context.Context, m *Message) error
	// GetMessage returns one message of a chat; ErrNotFound if absent.
	GetMessage(ctx context.Context, chatID, id string) (*Message, error)
	// Messages returns every message of a chat in creation order.
	Messages(ctx context.Context, chatID string) ([]*Message, error)
	// ListMessages returns one page of a chat's messages in creation
	// order: those whose Seq is above after (0: from the first), at most
	// limit of them (0: all). ErrNotFound if the chat is absent.
	ListMessages(ctx context.Context, chatID string, after int64, limit int) ([]*Message, error)
	// Unsettled returns up to limit assistant messages still pending or
	// running, least recently updated first: messages of runs not yet
	// ended, or of runs whose process died after the run ended and before
	// it wrote the message (recovery settles those).
	Unsettled(ctx context.Context, limit int) ([]*Message, error)
	// GetRequest returns the chat's record of a request id (Turn.Request);
	// ErrNotFound if it has none.
	GetRequest(ctx context.Context, chatID, id string) (*RequestRecord, error)
	// DeleteMessages removes messages (a rolled-back turn) and sets the
	// active leaf when activeLeafID is not empty, in one transaction that
	// also moves every remaining message whose parent it removes — and the
	// active leaf, if it is removed — onto the nearest ancestor that
	// remains ("" for the root): the tree never holds an orphan. It keeps,
	// for TombstoneTTL, where each removed id leads (Remains), so a turn
	// written under one of them a moment later is hung there too
	// (BeginTurn). Ids the chat does not hold are ignored.
	DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error
	// Remains returns the message of the chat that id leads to: id while
	// it is there, else, for a message DeleteMessages removed within
	// TombstoneTTL, its nearest ancestor that remains ("" for the root),
	// which is where BeginTurn would write a message whose parent is id.
	// ErrNotFound otherwise (or if the chat is absent).
	Remains(ctx context.Context, chatID, id string) (string, error)
	// SetActiveLeaf makes msgID the chat's active leaf.
	SetActiveLeaf(ctx context.Context, chatID, msgID string) error

	// Ping reports whether the database is reachable.
	Ping(ctx context.Context) error
	// Close releases the chat store's own resources.
	Close() error
}
