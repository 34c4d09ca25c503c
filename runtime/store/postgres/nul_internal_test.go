package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplaceNULEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x\u0000y"}`:           `{"a":"x\ufffdy"}`,
		`["\u0000\u0000","\u0000"]`:  `["\ufffd\ufffd","\ufffd"]`,
		`"\\u0000"`:                  `"\\u0000"`,               // the text \u0000
		`"\\\u0000"`:                 `"\\\ufffd"`,              // a backslash, then U+0000
		`"\\\\u0000"`:                `"\\\\u0000"`,             // two backslashes, then text
		"\x01" + `{"k":"\u0000"}`:    "\x01" + `{"k":"\ufffd"}`, // jsonb binary: a version byte first
		`{"\u0000":1,"b":"\\u0000"}`: `{"\ufffd":1,"b":"\\u0000"}`,
	} {
		require.Equal(t, want, string(replaceNULEscapes([]byte(in))), in)
	}
	require.Nil(t, replaceNULEscapes([]byte(`{"a":"\u0001"}`)), "no \\u0000: nothing to replace")
	require.Nil(t, replaceNULEscapes([]byte(`{"a":"plain"}`)))
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
