package nodes

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is the payload that flows between chat nodes: chat_start emits
// the user's message, agents emit their final answer, templates rewrite
// the content, chat_output emits the assistant message the chat keeps.
//
// On the wire and in node outputs a Message is its JSON object
// ({"role","content","name"?,"metadata"?}); nodes emit that canonical
// JSON form (see Value) so checkpoint replay and inputs hashes behave the
// same in every store. Read any payload with AsMessage.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Name is who wrote it: an agent's name, when an agent did.
	Name string `json:"name,omitempty"`
	// Metadata is free-form (agents set nodeId and model).
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Value returns m as canonical JSON values (map[string]any), the form
// nodes use as output: what a JSON round trip of m gives, built directly
// when its strings are valid UTF-8 and its metadata plain values (every
// agent and output node of a turn makes one, and the round trip was a
// visible share of a turn's CPU).
func (m Message) Value() any {
	if !utf8.ValidString(m.Role) || !utf8.ValidString(m.Content) || !utf8.ValidString(m.Name) {
		return jsonValue(m)
	}
	v := make(map[string]any, 4)
	v["role"], v["content"] = m.Role, m.Content
	if m.Name != "" {
		v["name"] = m.Name
	}
	if len(m.Metadata) > 0 {
		md, ok := plainCopy(m.Metadata)
		if !ok {
			return jsonValue(m)
		}
		v["metadata"] = md
	}
	return v
}

// plainCopy returns what a JSON round trip of v gives, when v is made of
// values whose round trip is known: nil, bools, valid UTF-8 strings,
// finite float64s, ints (as float64s), and maps with valid UTF-8 keys and
// slices of them. ok is false for anything else.
func plainCopy(v any) (out any, ok bool) {
	switch x := v.(type) {
	case nil, bool:
		return x, true
	case string:
		return x, utf8.ValidString(x)
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case map[string]any:
		if x == nil {
			return nil, true // null
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			if !utf8.ValidString(k) {
				return nil, false
			}
			if m[k], ok = plainCopy(e); !ok {
				return nil, false
			}
		}
		return m, true
	case []any:
		if x == nil {
			return nil, true // null
		}
		s := make([]any, len(x))
		for i, e := range x {
			if s[i], ok = plainCopy(e); !ok {
				return nil, false
			}
		}
		return s, true
	}
	return nil, false
}

// ChatInput is the run input of a chat run (what the server passes as
// RunRequest.Input): the message branch before this turn (inline, or a
// reference to where the chat keeps it), the new user content, and the
// user's enabled tools (names in the tool registry).
//
// Pass ChatInput.Value() rather than the struct so a durable store gives
// back the same value the run started with.
type ChatInput struct {
	// History is the branch of the chat before this turn, oldest first.
	// When set it wins over HistoryFrom.
	History []Message `json:"history,omitempty"`
	// HistoryFrom names the branch in the chat's own store instead of
	// copying it into every run (the chat server's runs use it): entry
	// agents resolve it through the HistorySource in the run's services.
	HistoryFrom *HistoryRef `json:"historyFrom,omitempty"`
	// Content is the new user message.
	Content string `json:"content"`
	// UserTools are tools the user enabled for this chat; entry agents get
	// them when the chat scope includes user tools.
	UserTools []string `json:"userTools,omitempty"`
	// ClientTools are tools the client runs itself (AG-UI frontend tools,
	// OpenAI request tools). Entry agents get them under the same rule as
	// UserTools; a call of one interrupts the run (reason client_tool)
	// until the client resumes it with the call's result.
	ClientTools []ClientTool `json:"clientTools,omitempty"`
}

// HistoryRef names a chat run's history where the chat keeps it: the
// branch that ends at message MessageID of chat ChatID (the parent of the
// turn's user message), walked by parent to the root.
type HistoryRef struct {
	ChatID    string `json:"chatId"`
	MessageID string `json:"messageId"`
	// Pinned holds, by message id, the content that messages of the
	// branch whose content could still change (assistant messages of runs
	// that may be continued) had when the turn started: the history reads
	// it instead of their content now, so a resumed or recovered run sees
	// the history it started with. "" leaves the message out, as an
	// assistant message without content is.
	Pinned map[string]string `json:"pinned,omitempty"`
}

// ClientTool declares a tool the client executes: the model sees its
// name, description and JSON Schema parameters.
type ClientTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Value returns c as canonical JSON values: what a JSON round trip of c
// gives, built directly when it holds no client tools (their parameters
// are JSON text to decode) and only valid UTF-8 strings (a chat turn makes
// one).
func (c ChatInput) Value() any {
	if len(c.ClientTools) > 0 || !utf8.ValidString(c.Content) {
		return jsonValue(c)
	}
	v := make(map[string]any, 4)
	if len(c.History) > 0 {
		h := make([]any, len(c.History))
		for i, m := range c.History {
			h[i] = m.Value()
			if _, ok := h[i].(map[string]any); !ok {
				return jsonValue(c) // a message that does not encode
			}
		}
		v["history"] = h
	}
	if r := c.HistoryFrom; r != nil {
		if !utf8.ValidString(r.ChatID) || !utf8.ValidString(r.MessageID) {
			return jsonValue(c)
		}
		ref := map[string]any{"chatId": r.ChatID, "messageId": r.MessageID}
		if len(r.Pinned) > 0 {
			pinned := make(map[string]any, len(r.Pinned))
			for id, content := range r.Pinned {
				if !utf8.ValidString(id) || !utf8.ValidString(content) {
					return jsonValue(c)
				}
				pinned[id] = content
			}
			ref["pinned"] = pinned
		}
		v["historyFrom"] = ref
	}
	v["content"] = c.Content
	if len(c.UserTools) > 0 {
		tools := make([]any, len(c.UserTools))
		for i, name := range c.UserTools {
			if !utf8.ValidString(name) {
				return jsonValue(c)
			}
			tools[i] = name
		}
		v["userTools"] = tools
	}
	return v
}

// AsChatInput reads a run input: a ChatInput (value or pointer), its JSON
// object form, or a plain string (the content, no history).
func AsChatInput(v any) ChatInput {
	switch x := v.(type) {
	case nil:
		return ChatInput{}
	case ChatInput:
		return x
	case *ChatInput:
		if x == nil {
			return ChatInput{}
		}
		return *x
	case string:
		return ChatInput{Content: x}
	case map[string]any:
		// The JSON object form, as a durable store gives it back and as
		// ChatInput.Value makes it: read directly when it holds only what
		// that form holds (every node of a turn reads it; a JSON round
		// trip of the whole history each time was a visible share of a
		// turn's CPU).
		if c, ok := chatInputOf(x); ok {
			return c
		}
	}
	return decodeChatInput(v)
}

// decodeChatInput reads any value through its JSON text.
func decodeChatInput(v any) ChatInput {
	var c ChatInput
	if b, err := json.Marshal(v); err == nil && json.Unmarshal(b, &c) == nil {
		return c
	}
	return ChatInput{Content: fmt.Sprint(v)}
}

// chatInputOf reads m as json.Unmarshal would when m holds only the
// plain form of a ChatInput: a string content, history messages of
// string role, content and name, a history reference of strings, string
// user tools. Anything else (client tools, metadata, other keys or types)
// is not ok: decode it as JSON.
func chatInputOf(m map[string]any) (ChatInput, bool) {
	var c ChatInput
	for k, v := range m {
		switch k {
		case "content":
			s, ok := v.(string)
			if !ok {
				return ChatInput{}, false
			}
			c.Content = s
		case "history":
			items, ok := v.([]any)
			if !ok {
				return ChatInput{}, false
			}
			c.History = make([]Message, len(items))
			for i, it := range items {
				hm, ok := it.(map[string]any)
				if !ok {
					return ChatInput{}, false
				}
				for hk, hv := range hm {
					s, ok := hv.(string)
					if !ok {
						return ChatInput{}, false
					}
					switch hk {
					case "role":
						c.History[i].Role = s
					case "content":
						c.History[i].Content = s
					case "name":
						c.History[i].Name = s
					default:
						return ChatInput{}, false
					}
				}
			}
		case "historyFrom":
			ref, ok := historyRefOf(v)
			if !ok {
				return ChatInput{}, false
			}
			c.HistoryFrom = ref
		case "userTools":
			items, ok := v.([]any)
			if !ok {
				return ChatInput{}, false
			}
			c.UserTools = make([]string, len(items))
			for i, it := range items {
				s, ok := it.(string)
				if !ok {
					return ChatInput{}, false
				}
				c.UserTools[i] = s
			}
		default:
			return ChatInput{}, false
		}
	}
	return c, true
}

// AsMessage reads any flow payload as a Message: a Message (value or
// pointer), a JSON object with "content" (a string; anything else is
// rendered as JSON), a ChatInput (its content, as the user), a string
// (the user's). Any other value becomes a user message whose content is
// the value's JSON text.
func AsMessage(v any) Message {
	switch x := v.(type) {
	case nil:
		return Message{Role: RoleUser}
	case Message:
		return x
	case *Message:
		if x == nil {
			return Message{Role: RoleUser}
		}
		return *x
	case ChatInput:
		return Message{Role: RoleUser, Content: x.Content}
	case *ChatInput:
		return AsMessage(AsChatInput(x))
	case string:
		return Message{Role: RoleUser, Content: x}
	case map[string]any:
		c, ok := x["content"]
		if !ok {
			return Message{Role: RoleUser, Content: jsonText(x)}
		}
		m := Message{Role: RoleUser}
		if s, ok := c.(string); ok {
			m.Content = s
		} else {
			m.Content = jsonText(c)
		}
		if r, ok := x["role"].(string); ok && r != "" {
			m.Role = r
		}
		if n, ok := x["name"].(string); ok {
			m.Name = n
		}
		if md, ok := x["metadata"].(map[string]any); ok {
			m.Metadata = md
		}
		return m
	}
	jv := jsonValue(v)
	if m, ok := jv.(map[string]any); ok {
		return AsMessage(m)
	}
	if s, ok := jv.(string); ok {
		return Message{Role: RoleUser, Content: s}
	}
	return Message{Role: RoleUser, Content: jsonText(jv)}
}

// jsonValue converts v to plain JSON values (map[string]any, []any,
// string, float64, bool, nil) by a JSON round trip, or by plainCopy when v
// is made of plain values already (a node's output map, say); v is
// returned as is when it cannot be encoded.
func jsonValue(v any) any {
	switch v.(type) {
	case nil, string, bool, float64:
		return v
	}
	if out, ok := plainCopy(v); ok {
		return out // plain values: their round trip is known
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// jsonText renders v as compact JSON (or %v when it cannot be encoded).
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// rawJSON returns s as a JSON value for event payloads: s itself when it
// is valid JSON, else s as a JSON string.
func rawJSON(s string) json.RawMessage {
	t := strings.TrimSpace(s)
	if t != "" && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(s)
	return b
}

// historyRefOf reads v as json.Unmarshal would read a *HistoryRef when v
// is its plain object form (string ids, pinned contents of strings).
func historyRefOf(v any) (*HistoryRef, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	ref := &HistoryRef{}
	for k, x := range m {
		switch k {
		case "chatId", "messageId":
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			if k == "chatId" {
				ref.ChatID = s
			} else {
				ref.MessageID = s
			}
		case "pinned":
			pm, ok := x.(map[string]any)
			if !ok {
				return nil, false
			}
			ref.Pinned = make(map[string]string, len(pm))
			for id, c := range pm {
				s, ok := c.(string)
				if !ok {
					return nil, false
				}
				ref.Pinned[id] = s
			}
		default:
			return nil, false
		}
	}
	return ref, true
}
