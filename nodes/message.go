package nodes

import (
	"encoding/json"
	"fmt"
	"strings"
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
// nodes use as output.
func (m Message) Value() any { return jsonValue(m) }

// ChatInput is the run input of a chat run (what the server passes as
// RunRequest.Input): the message branch before this turn, the new user
// content, and the user's enabled tools (names in the tool registry).
//
// Pass ChatInput.Value() rather than the struct so a durable store gives
// back the same value the run started with.
type ChatInput struct {
	// History is the branch of the chat before this turn, oldest first.
	History []Message `json:"history,omitempty"`
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

// ClientTool declares a tool the client executes: the model sees its
// name, description and JSON Schema parameters.
type ClientTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Value returns c as canonical JSON values.
func (c ChatInput) Value() any { return jsonValue(c) }

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
	}
	var c ChatInput
	if b, err := json.Marshal(v); err == nil && json.Unmarshal(b, &c) == nil {
		return c
	}
	return ChatInput{Content: fmt.Sprint(v)}
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
// string, float64, bool, nil) by a JSON round trip; v is returned as is
// when it cannot be encoded.
func jsonValue(v any) any {
	switch v.(type) {
	case nil, string, bool, float64:
		return v
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
