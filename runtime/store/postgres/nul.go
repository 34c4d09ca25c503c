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
// \u0000 in a jsonb value. Such values come from outside: a tool's error
// quoting its input, a model's output, a client's message or the id in a
// URL. Refused, a read answered 500 and a run's write failed at every
// attempt, the run retried for ever. The store's connections (those of
// the chat store that shares its pool too) therefore write U+0000 as
// U+FFFD, the replacement character:
//   - in every string argument of a query (nulSafeArgs): text and varchar
//     columns, ids compared in a WHERE. An encoded JSON text holds no raw
//     U+0000 (encoders escape it), so a string bound to a json column is
//     unchanged.
//   - in every jsonb value (nulSafeJSONB), where the escape \u0000 becomes
//     \ufffd.
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
			if strings.IndexByte(v, 0) >= 0 {
				args[i] = strings.ReplaceAll(v, "\x00", "\uFFFD")
			}
		case *string:
			if v != nil && strings.IndexByte(*v, 0) >= 0 {
				s := strings.ReplaceAll(*v, "\x00", "\uFFFD")
				args[i] = &s // not the caller's string
			}
		case []string: // an array, as in id = ANY($1)
			if slices.ContainsFunc(v, func(s string) bool { return strings.IndexByte(s, 0) >= 0 }) {
				out := make([]string, len(v)) // not the caller's slice
				for j, s := range v {
					out[j] = strings.ReplaceAll(s, "\x00", "\uFFFD")
				}
				args[i] = out
			}
		}
	}
}

// nulSafeJSONB registers, in m, a jsonb type whose encoded values have
// each escape \u0000 written \ufffd.
func nulSafeJSONB(m *pgtype.Map) {
	if jsonb, ok := m.TypeForOID(pgtype.JSONBOID); ok {
		m.RegisterType(&pgtype.Type{Name: jsonb.Name, OID: jsonb.OID, Codec: nulSafeCodec{jsonb.Codec}})
	}
}

// nulSafeCodec is a jsonb codec whose encoded values pass through
// replaceNULEscapes.
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
	if fixed := replaceNULEscapes(out[start:]); fixed != nil {
		out = append(out[:start], fixed...)
	}
	return out, nil
}

// replaceNULEscapes returns an encoded JSON value with each escape \u0000
// in its strings written \ufffd, or nil when it has none. An escape is
// one whose backslash is not itself escaped: "\\u0000" is the text
// \u0000 and stays. (The jsonb binary format is the JSON text after a
// version byte, which the scan passes over like any byte outside a
// string.)
func replaceNULEscapes(encoded []byte) []byte {
	const esc = `\u0000`
	i := bytes.Index(encoded, []byte(esc))
	if i < 0 {
		return nil
	}
	out := make([]byte, 0, len(encoded))
	for {
		// The match is an escape when an even number of backslashes come
		// before it (the byte before encoded, if any, ended the last
		// match: a '0').
		n := 0
		for j := i - 1; j >= 0 && encoded[j] == '\\'; j-- {
			n++
		}
		out = append(out, encoded[:i]...)
		if n%2 == 0 {
			out = append(out, `\ufffd`...)
		} else {
			out = append(out, esc...)
		}
		encoded = encoded[i+len(esc):]
		if i = bytes.Index(encoded, []byte(esc)); i < 0 {
			return append(out, encoded...)
		}
	}
}
