package chatstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Errors callers branch on.
var (
	// ErrNotFound: no graph, chat or message with that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the id is taken, or a compare-and-set lost.
	ErrConflict = errors.New("conflict")
)

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
	ID           string    `json:"id"`
	GraphID      string    `json:"graphId"`
	Title        string    `json:"title,omitempty"`
	ActiveLeafID string    `json:"activeLeafId"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// Message roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message statuses. User messages are completed when written; an
// assistant message follows its run.
const (
	StatusPending     = "pending"
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusFailed      = "failed"
	StatusCancelled   = "cancelled"
	StatusInterrupted = "interrupted"
)

// Continuable reports whether an assistant message in status s may be
// continued (its run resumed).
func Continuable(s string) bool {
	return s == StatusInterrupted || s == StatusCancelled || s == StatusFailed
}

// Message is one node of a chat's message tree.
type Message struct {
	ID       string `json:"id"`
	ChatID   string `json:"chatId"`
	ParentID string `json:"parentId"`
	Role     string `json:"role"`
	Content  string `json:"content"`
	// RunID is the run that wrote an assistant message (the latest one,
	// after a continue), or the run a user message started.
	RunID  string `json:"runId"`
	Status string `json:"status"`
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

// Store persists graphs and chats. Implementations are safe for
// concurrent use; the caller closes them.
type Store interface {
	// CreateGraph inserts g with PlanVersion 1 (or, for the id of a
	// deleted graph, one more than its last version, so compiled plans
	// cached under the old versions never apply). It sets g.PlanVersion
	// and the timestamps. ErrConflict if a live graph has the id.
	CreateGraph(ctx context.Context, g *Graph) error
	// GetGraph returns the graph; ErrNotFound if absent or deleted.
	GetGraph(ctx context.Context, id string) (*Graph, error)
	// ListGraphs returns every live graph, most recently updated first.
	ListGraphs(ctx context.Context) ([]*Graph, error)
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

	// CreateChat inserts c (ErrConflict if the id is taken).
	CreateChat(ctx context.Context, c *Chat) error
	// GetChat returns the chat; ErrNotFound if absent.
	GetChat(ctx context.Context, id string) (*Chat, error)
	// ListChats returns the chats of graphID ("" = all), newest first.
	ListChats(ctx context.Context, graphID string) ([]*Chat, error)
	// DeleteChat deletes a chat and its messages.
	DeleteChat(ctx context.Context, id string) error

	// AddMessages inserts msgs into chat chatID in one transaction and,
	// when activeLeafID is not empty, makes it the chat's active leaf.
	// ErrNotFound if the chat is absent; ErrConflict if an id is taken.
	AddMessages(ctx context.Context, chatID, activeLeafID string, msgs ...*Message) error
	// UpdateMessage writes m's parent, content, status, run id and error.
	UpdateMessage(ctx context.Context, m *Message) error
	// ClaimMessage moves an assistant message whose run is fromRunID and
	// whose status is Continuable to run toRunID in status pending — the
	// compare-and-set that lets exactly one continue win. ErrConflict
	// otherwise; ErrNotFound if absent.
	ClaimMessage(ctx context.Context, chatID, msgID, fromRunID, toRunID string) error
	// GetMessage returns one message of a chat; ErrNotFound if absent.
	GetMessage(ctx context.Context, chatID, id string) (*Message, error)
	// Messages returns every message of a chat in creation order.
	Messages(ctx context.Context, chatID string) ([]*Message, error)
	// DeleteMessages removes messages (a rolled-back turn) and sets the
	// active leaf when activeLeafID is not empty.
	DeleteMessages(ctx context.Context, chatID string, ids []string, activeLeafID string) error
	// SetActiveLeaf makes msgID the chat's active leaf.
	SetActiveLeaf(ctx context.Context, chatID, msgID string) error

	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}
