package nodes

import (
	"encoding/json"
	"testing"
)

var benchSchema = json.RawMessage(`{"type":"object","properties":{"word":{"type":"string","minLength":1},"times":{"type":"integer","minimum":1,"maximum":5},"tags":{"type":"array","items":{"type":"string"}}},"required":["word","times"],"additionalProperties":false}`)

// BenchmarkToolArgumentCheck measures what checking a call's arguments
// against its tool's JSON Schema adds to a tool call (schema compiled
// once and cached; valid and invalid arguments).
func BenchmarkToolArgumentCheck(b *testing.B) {
	a := newArgumentSchemas()
	for _, bc := range []struct{ name, args string }{
		{"valid", `{"word":"ab","times":3,"tags":["x","y"]}`},
		{"invalid", `{"word":"","times":9,"color":"red"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := json.RawMessage(bc.args)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.check(benchSchema, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
