package mcp

import (
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A result cut at MaxResultBytes stays valid UTF-8: the cut never splits
// a character, wherever the limit falls.
func TestResultTextCutKeepsCharactersWhole(t *testing.T) {
	text := strings.Repeat("é€😀a", 50)
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
	for max := 1; max < 40; max++ {
		out := resultText(res, max)
		if !utf8.ValidString(out) {
			t.Fatalf("max %d: invalid UTF-8 %q", max, out)
		}
		kept := strings.TrimSuffix(out, "…[truncated]")
		if kept == out || len(kept) > max || !strings.HasPrefix(text, kept) || max-len(kept) > 3 {
			t.Fatalf("max %d: kept %q", max, kept)
		}
	}
}
