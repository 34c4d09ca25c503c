package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Echo is the built-in offline model: deterministic, no key, no network.
//
// It answers the content of the last message it is given:
//   - a tool message: "tool NAME returned: <content>";
//   - content starting with "/tool NAME {json}": a call of tool NAME with
//     those arguments ({} when none), and no text;
//   - anything else: "echo: <content>".
//
// Text is streamed word by word (each fragment is a word with the
// whitespace before it) on a schedule of its own, as a provider's stream
// is: fragment k is due k×Request.TokenDelay after the first, however
// long onText took with the ones before, and one already due comes at
// once. (A pause after each onText would let a slow reader slow the
// model, and a loaded server would see fewer tokens than it is sent.)
type Echo struct{}

// Stream implements Provider.
func (Echo) Stream(ctx context.Context, req Request, onText func(string)) (Response, error) {
	if err := context.Cause(ctx); err != nil {
		return Response{}, err
	}
	var last Message
	if n := len(req.Messages); n > 0 {
		last = req.Messages[n-1]
	}
	if last.Role != RoleTool {
		if name, args, ok := ParseToolCommand(last.Content); ok {
			id := echoCallID(name, args, len(req.Messages))
			return Response{ToolCalls: []ToolCall{{ID: id, Name: name, Arguments: args}}, FinishReason: "tool_calls"}, nil
		}
	}
	var text string
	if last.Role == RoleTool {
		text = "tool " + last.Name + " returned: " + last.Content
	} else {
		text = "echo: " + last.Content
	}
	var timer *time.Timer
	start := time.Now()
	i := -1
	for w := range Words(text) {
		i++
		if wait := time.Until(start.Add(time.Duration(i) * req.TokenDelay)); i > 0 && wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
				defer timer.Stop()
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
				return Response{}, context.Cause(ctx)
			}
		} else if err := context.Cause(ctx); err != nil {
			return Response{}, err
		}
		if onText != nil {
			onText(w)
		}
	}
	return Response{Content: text, FinishReason: "stop"}, nil
}

// ParseToolCommand recognises "/tool NAME {json}" at the start of content
// (leading whitespace allowed). args is the rest of the content after the
// name, trimmed; "{}" when empty.
func ParseToolCommand(content string) (name, args string, ok bool) {
	s := strings.TrimLeft(content, " \t\r\n")
	rest, found := strings.CutPrefix(s, "/tool")
	if !found || rest == "" || !isSpace(rest[0]) {
		return "", "", false
	}
	rest = strings.TrimLeft(rest, " \t\r\n")
	end := strings.IndexAny(rest, " \t\r\n")
	if end < 0 {
		end = len(rest)
	}
	name, args = rest[:end], strings.TrimSpace(rest[end:])
	if name == "" {
		return "", "", false
	}
	if args == "" {
		args = "{}"
	}
	return name, args, true
}

// Words yields s as streaming fragments: each starts where a whitespace
// run starts (except the first) so that joining them gives s back. It
// finds each fragment as it is asked for, so a streaming answer holds no
// list of its words (a thousand answers streaming at once would keep
// every word's string header for the collector to scan).
func Words(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if s == "" {
			return
		}
		start := 0
		for i := 1; i < len(s); i++ {
			if isSpace(s[i]) && !isSpace(s[i-1]) {
				if !yield(s[start:i]) {
					return
				}
				start = i
			}
		}
		yield(s[start:])
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func echoCallID(name, args string, n int) string {
	h := sha256.Sum256([]byte(name + "\x00" + args + "\x00" + strconv.Itoa(n)))
	return "call_" + hex.EncodeToString(h[:6])
}
