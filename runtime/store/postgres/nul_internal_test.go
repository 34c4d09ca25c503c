package postgres

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFixJSONBEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x\u0000y"}`:           `{"a":"x\ufffdy"}`,
		`["\u0000\u0000","\u0000"]`:  `["\ufffd\ufffd","\ufffd"]`,
		`"\\u0000"`:                  `"\\u0000"`,               // the text \u0000
		`"\\\u0000"`:                 `"\\\ufffd"`,              // a backslash, then U+0000
		`"\\\\u0000"`:                `"\\\\u0000"`,             // two backslashes, then text
		"\x01" + `{"k":"\u0000"}`:    "\x01" + `{"k":"\ufffd"}`, // jsonb binary: a version byte first
		`{"\u0000":1,"b":"\\u0000"}`: `{"\ufffd":1,"b":"\\u0000"}`,
		`"\ud800"`:                   `"\ufffd"`,             // a high surrogate alone
		`"\udc00x"`:                  `"\ufffdx"`,            // a low one alone
		`"\ud83d\ude00"`:             `"\ud83d\ude00"`,       // a pair: one character
		`"\ud83d\u0041"`:             `"\ufffd\u0041"`,       // a high one before another escape
		`"\uD83D\uDE00\uDBFF"`:       `"\uD83D\uDE00\ufffd"`, // upper-case hex, a pair then one alone
		`"a\\ud800"`:                 `"a\\ud800"`,           // the text \ud800
		`"\n\u0000\t"`:               `"\n\ufffd\t"`,
	} {
		got := fixJSONBEscapes([]byte(in))
		if got == nil { // nothing to replace
			got = []byte(in)
		}
		require.Equal(t, want, string(got), in)
	}
	require.Nil(t, fixJSONBEscapes([]byte(`{"a":"\u0001"}`)), "nothing to replace")
	require.Nil(t, fixJSONBEscapes([]byte(`"\\u0000"`)))
	require.Nil(t, fixJSONBEscapes([]byte(`{"a":"plain"}`)))
}

func TestReplaceNULArgs(t *testing.T) {
	s := "a\x00b"
	ids := []string{"r1", "r\x00"}
	args := []any{"x\x00", &s, "clean", 7, []byte("a\x00"), (*string)(nil), ids}
	replaceNULArgs(args)
	require.Equal(t, "x\uFFFD", args[0])
	require.Equal(t, "a\uFFFDb", *args[1].(*string))
	require.Equal(t, "a\x00b", s, "the caller's string is not written")
	require.Equal(t, "clean", args[2])
	require.Equal(t, 7, args[3])
	require.Equal(t, []byte("a\x00"), args[4], "bytes are not text")
	require.Equal(t, []string{"r1", "r\uFFFD"}, args[6])
	require.Equal(t, "r\x00", ids[1], "the caller's slice is not written")
}

// FuzzFixJSONBEscapes: a valid JSON text stays valid, and reads back
// as it did with U+0000 (which jsonb refuses) as U+FFFD — a lone
// surrogate escape reads as U+FFFD in Go either way.
func FuzzFixJSONBEscapes(f *testing.F) {
	for _, seed := range []string{`{"a":"x\u0000y"}`, `"\\u0000"`, `"\ud800\udc00"`, `["\ud800","\udc00",1,{"\u0000":null}]`,
		`"\\\ud800"`, `{"k":"\n\t\"\u0041"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		out := fixJSONBEscapes(in)
		if out == nil {
			out = in
		}
		require.True(t, json.Valid(out), "%q -> %q", in, out)
		before, after := decodeJSON(t, in), decodeJSON(t, out)
		want, ok := withoutNUL(before)
		if !ok {
			return // keys that differ by U+0000 alone: which one wins is the decoder's
		}
		require.Equal(t, want, after, "%q -> %q", in, out)
	})
}

// decodeJSON decodes a valid JSON text, its numbers as written (a number
// past float64's range is valid JSON).
func decodeJSON(t *testing.T, text []byte) any {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

// withoutNUL is a decoded JSON value with U+0000 as U+FFFD in its strings
// and keys; false when two keys of an object become one.
func withoutNUL(v any) (any, bool) {
	fix := func(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
	switch x := v.(type) {
	case string:
		return fix(x), true
	case []any:
		for i := range x {
			e, ok := withoutNUL(x[i])
			if !ok {
				return nil, false
			}
			x[i] = e
		}
		return x, true
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			e, ok := withoutNUL(e)
			if _, taken := m[fix(k)]; taken || !ok {
				return nil, false
			}
			m[fix(k)] = e
		}
		return m, true
	}
	return v, true
}
