package postgres

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// PostgreSQL holds no U+0000 in text: a text value carrying one is refused
// ("invalid byte sequence for encoding UTF8: 0x00"), and so is the escape
// \u0000 in a jsonb value, as is a surrogate escape there that is not
// half of a pair (\ud800 alone). Such values come from outside: a tool's
// error quoting its input, a model's output, a client's message, graph
// or the id in a URL. Refused, a read answered 500 and a run's write failed at every
// attempt, the run retried for ever. The store's connections (those of
// the chat store that shares its pool too) therefore write U+0000 as
// U+FFFD, the replacement character:
//   - in every string argument of a query (nulSafeArgs): text and varchar
//     columns, ids compared in a WHERE. An encoded JSON text holds no raw
//     U+0000 (encoders escape it), so a string bound to a json column is
//     unchanged.
//   - in every jsonb value (nulSafeJSONB), where the escape \u0000, and a
//     surrogate escape that is not half of a pair, become \ufffd (a
//     client's graph kept as it sent it, say).
//
// Columns of type json keep the escape as they keep the rest of their
// value verbatim: event payloads, inputs, outputs. A value without
// U+0000 costs one scan for the byte.

// nulSafeArgs is the pool's tracer. pgx hands it the arguments of each
// query and batch before it encodes them, as the very slice it encodes:
// it replaces there each string (*string, []string) holding U+0000. (pgx
// writes a string in the text format itself, asking no codec, so a
// codec cannot do this.)
type nulSafeArgs struct{}

func (nulSafeArgs) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	replaceNULArgs(data.Args)
	return ctx
}

func (nulSafeArgs) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (nulSafeArgs) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		replaceNULArgs(q.Arguments)
	}
	return ctx
}

func (nulSafeArgs) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (nulSafeArgs) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// replaceNULArgs writes U+0000 as U+FFFD in the strings among args.
func replaceNULArgs(args []any) {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			if hasNUL(v) {
				args[i] = replaceNUL(v)
			}
		case *string:
			if v != nil && hasNUL(*v) {
				s := replaceNUL(*v)
				args[i] = &s // not the caller's string
			}
		case []string: // an array, as in id = ANY($1)
			if slices.ContainsFunc(v, hasNUL) {
				out := make([]string, len(v)) // not the caller's slice
				for j, s := range v {
					out[j] = replaceNUL(s)
				}
				args[i] = out
			}
		}
	}
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func replaceNUL(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

// nulSafeJSONB registers, in m, a jsonb type whose encoded values pass
// through fixJSONBEscapes.
func nulSafeJSONB(m *pgtype.Map) {
	if jsonb, ok := m.TypeForOID(pgtype.JSONBOID); ok {
		m.RegisterType(&pgtype.Type{Name: jsonb.Name, OID: jsonb.OID, Codec: nulSafeCodec{jsonb.Codec}})
	}
}

// nulSafeCodec is a jsonb codec whose encoded values pass through
// fixJSONBEscapes (nulSafePlan).
type nulSafeCodec struct{ pgtype.Codec }

func (c nulSafeCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	plan := c.Codec.PlanEncode(m, oid, format, value)
	if plan == nil {
		return nil
	}
	return nulSafePlan{plan}
}

type nulSafePlan struct{ pgtype.EncodePlan }

func (p nulSafePlan) Encode(value any, buf []byte) ([]byte, error) {
	start := len(buf)
	out, err := p.EncodePlan.Encode(value, buf)
	if err != nil || out == nil { // an error, or SQL NULL
		return out, err
	}
	if fixed := fixJSONBEscapes(out[start:]); fixed != nil {
		out = append(out[:start], fixed...)
	}
	return out, nil
}

// fixJSONBEscapes returns an encoded JSON value with each escape that
// jsonb refuses written \ufffd — \u0000, and a surrogate escape that is
// not half of a pair (\ud800 alone) — or nil when it has none. It walks
// the escapes from the start, so an escaped backslash is never taken for
// the start of one: "\\u0000" is the text \u0000 and stays. (A JSON
// text holds backslashes in strings only; the jsonb binary format is the
// JSON text after a version byte.)
func fixJSONBEscapes(encoded []byte) []byte {
	var out []byte // nil until an escape is replaced
	done := 0      // encoded[:done] is in out
	for i := 0; i < len(encoded); {
		j := bytes.IndexByte(encoded[i:], '\\')
		if j < 0 {
			break
		}
		i += j
		code, ok := hexEscape(encoded[i:])
		if !ok { // \\, \n, ...: two bytes
			i += 2
			continue
		}
		width, refused := 6, code == 0 || code >= 0xdc00 && code <= 0xdfff // a low surrogate alone
		if code >= 0xd800 && code <= 0xdbff {
			if low, ok := hexEscape(encoded[i+6:]); ok && low >= 0xdc00 && low <= 0xdfff {
				width = 12 // a pair: one character
			} else {
				refused = true
			}
		}
		if refused {
			if out == nil {
				out = make([]byte, 0, len(encoded))
			}
			out = append(append(out, encoded[done:i]...), `\ufffd`...)
			done = i + width
		}
		i += width
	}
	if out == nil {
		return nil
	}
	return append(out, encoded[done:]...)
}

// hexEscape reads the \uXXXX escape b begins with.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var code rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			code = code<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			code = code<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			code = code<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return code, true
}
