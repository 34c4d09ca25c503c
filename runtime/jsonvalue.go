package runtime

import (
	"math"
	"reflect"
	"slices"
	"strconv"
)

// AppendJSONValue appends v as json.Marshal encodes it and reports true,
// when v is made of the values a node's output and a run's input usually
// are: nil, bools, strings, finite float64s, Go integers, map[string]any,
// []any, []string, map[string]string, and DataAppenders. For anything
// else — a struct, a Marshaler, a json.RawMessage, a NaN — it reports
// false and returns b as it was, and the caller encodes v with
// encoding/json, which also reports the errors. The bytes are the same
// either way (map keys in order, strings escaped HTML-safe, floats
// formatted as encoding/json formats them); only the time differs:
// encoding/json reflects on every map and sorts its keys through
// reflect values, and a run encodes such values for every event payload,
// checkpoint output and run record it writes.
func AppendJSONValue(b []byte, v any) ([]byte, bool) {
	n := len(b)
	b, ok := appendValue(b, v, 0)
	if !ok {
		return b[:n], false
	}
	return b, true
}

// maxValueDepth bounds the nesting appendValue follows; deeper values go
// to encoding/json, which reports a cycle where there is one.
const maxValueDepth = 64

func appendValue(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxValueDepth {
		return b, false
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return AppendJSONString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case float64:
		return appendFloat(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case int32:
		return strconv.AppendInt(b, int64(x), 10), true
	case uint64:
		return strconv.AppendUint(b, x, 10), true
	case map[string]any:
		return appendObject(b, x, func(b []byte, v any) ([]byte, bool) { return appendValue(b, v, depth+1) })
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendValue(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case []string:
		return appendJSONStrings(b, x), true
	case map[string]string:
		return appendObject(b, x, func(b []byte, v string) ([]byte, bool) { return AppendJSONString(b, v), true })
	case DataAppender:
		if isNilPointer(x) {
			return b, false // encoding/json's null, or its MarshalJSON's
		}
		return x.AppendJSON(b), true
	}
	return b, false
}

// isNilPointer reports whether v holds a nil pointer, whose value-receiver
// methods cannot be called.
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// appendObject appends m as encoding/json encodes a map with string
// keys: its members in key order, each value appended by value (false:
// one that does not encode by hand).
func appendObject[V any](b []byte, m map[string]V, value func([]byte, V) ([]byte, bool)) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = value(append(AppendJSONString(b, k), ':'), m[k]); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendFloat appends f as encoding/json formats a float64: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from
// 1e21 on (with at least one exponent digit, as in 1e-7). NaN and the
// infinities do not encode.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
