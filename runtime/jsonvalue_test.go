package runtime_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runtime"
)

// jsonStrings are strings encoding/json escapes in every way it does:
// HTML characters, control characters, quotes and backslashes, U+2028
// and U+2029, invalid UTF-8.
var jsonStrings = []string{"", "plain", "<b>&amp;</b>", "tab\there\n", "quote\" back\\slash", "\u2028\u2029",
	"bad \xff utf8", "\x00\x1f", "héllo wörld 日本", "emoji 🙂", "a\xc3"}

// jsonFloats are float64s at every edge of encoding/json's formats.
var jsonFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 123.456, 1e20, 1e21, 1.5e21, 1e-6, 9.99e-7, 1e-7,
	1.234e-9, 5e-324, math.MaxFloat64, -math.MaxFloat64, 2000.5, 1 << 53}

func randomJSONValue(rng *rand.Rand, depth int) any {
	k := rng.IntN(12)
	if depth > 3 && k >= 8 {
		k = rng.IntN(8)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2, 3:
		return jsonStrings[rng.IntN(len(jsonStrings))]
	case 4:
		return jsonFloats[rng.IntN(len(jsonFloats))]
	case 5:
		return rng.Float64() * math.Pow(10, float64(rng.IntN(50)-25))
	case 6:
		return []int{0, -7, 1 << 40}[rng.IntN(3)]
	case 7:
		return int64(rng.Int()) - math.MaxInt64/2
	case 8:
		m := map[string]any{}
		for range rng.IntN(5) {
			m[jsonStrings[rng.IntN(len(jsonStrings))]] = randomJSONValue(rng, depth+1)
		}
		return m
	case 9:
		s := make([]any, rng.IntN(4))
		for i := range s {
			s[i] = randomJSONValue(rng, depth+1)
		}
		return s
	case 10:
		return []string{jsonStrings[rng.IntN(len(jsonStrings))], "x"}
	default:
		return map[string]string{jsonStrings[rng.IntN(len(jsonStrings))]: jsonStrings[rng.IntN(len(jsonStrings))], "k": "v"}
	}
}

// AppendJSONValue gives json.Marshal's bytes for every value it takes.
func TestAppendJSONValueIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		v := randomJSONValue(rng, 0)
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, ok := runtime.AppendJSONValue([]byte("prefix"), v)
		require.True(t, ok, "value %d: %#v", i, v)
		require.Equal(t, "prefix"+string(want), string(got), "value %d: %#v", i, v)
	}
	for _, v := range []any{map[string]any(nil), []any(nil), []string(nil), map[string]string(nil), []any{}, map[string]any{},
		nodeDelta{"<x>"}, map[string]any{"delta": nodeDelta{"y"}}} {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, ok := runtime.AppendJSONValue(nil, v)
		require.True(t, ok, "%#v", v)
		require.Equal(t, string(want), string(got), "%#v", v)
	}
}

// What AppendJSONValue does not take it leaves to encoding/json: it
// reports false and hands b back as it was, even when the value it
// refuses is deep inside one it took the start of.
func TestAppendJSONValueRefusesTheRest(t *testing.T) {
	deep := any("bottom")
	for range 100 {
		deep = []any{deep}
	}
	for _, v := range []any{
		struct{ A int }{1}, float32(1.5), json.RawMessage(`{"a": 1}`), math.NaN(), math.Inf(1),
		map[string]any{"a": 1, "b": []any{"x", math.Inf(-1)}}, map[int]string{1: "x"}, []int{1},
		deep, uint8(1),
	} {
		got, ok := runtime.AppendJSONValue([]byte("keep"), v)
		require.False(t, ok, "%#v", v)
		require.Equal(t, "keep", string(got), "%#v", v)
	}
}

// nodeDelta is a DataAppender (nodes.NodeDeltaData's shape, without
// importing nodes).
type nodeDelta struct {
	Text string `json:"text"`
}

func (d nodeDelta) AppendJSON(b []byte) []byte {
	return append(runtime.AppendJSONString(append(b, `{"text":`...), d.Text), '}')
}

func FuzzAppendJSONValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"<x>"],"b":null}`, `[true,false,1e-7,"\u2028"]`, `"\xff"`, `1e21`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			v = string(data) // any string, valid UTF-8 or not
		}
		want, err := json.Marshal(v)
		got, ok := runtime.AppendJSONValue(nil, v)
		if err != nil {
			require.False(t, ok)
			return
		}
		require.True(t, ok)
		require.Equal(t, string(want), string(got))
	})
}

// The engine's payloads encode by hand what encoding/json gives for
// them, whatever their outputs hold, and fail where it fails.
func TestPayloadsEncodeAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type point struct {
		X, Y int
	}
	outputs := []any{nil, "text", 2.5, map[string]any{"kind": "reply", "text": "<hi> & bye"}, point{1, 2},
		json.RawMessage(` {"a" : 1} `), []any{point{3, 4}, "x"}}
	for i := range 3000 {
		out := outputs[rng.IntN(len(outputs))]
		if i%2 == 0 {
			out = randomJSONValue(rng, 0)
		}
		str := jsonStrings[rng.IntN(len(jsonStrings))]
		f := jsonFloats[rng.IntN(len(jsonFloats))]
		for _, v := range []any{
			runtime.NodeCompletedData{Output: out, Replayed: i%3 == 0, DurationMs: f, Error: str},
			runtime.NodeCompletedData{DurationMs: f},
			runtime.EdgeTakenData{EdgeID: str, Source: "a<b", Target: jsonStrings[rng.IntN(len(jsonStrings))]},
			runtime.RunCompletedData{DurationMs: f},
		} {
			want, err := json.Marshal(v)
			require.NoError(t, err)
			got, err := (&runtime.Event{Data: v}).DataJSON()
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%#v", v)
		}
		// Details flatten into node_started's object as a map encodes.
		details := map[string]any{"name": str, "items": []any{}, "count": f, "nested": out}
		want, err := json.Marshal(details)
		require.NoError(t, err)
		got, err := (&runtime.Event{Data: runtime.NodeStartedData{Details: details}}).DataJSON()
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
	// Nil pointers to them encode as encoding/json encodes them.
	for _, v := range []any{(*runtime.NodeCompletedData)(nil), (*runtime.EdgeTakenData)(nil), (*runtime.RunStartedData)(nil),
		map[string]any{"delta": (*nodeDelta)(nil)}, []any{(*runtime.NodeCompletedData)(nil)}} {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := (&runtime.Event{Data: v}).DataJSON()
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%#v", v)
	}
	for _, v := range []any{
		runtime.NodeCompletedData{Output: math.NaN()}, runtime.NodeCompletedData{DurationMs: math.Inf(1)},
		runtime.NodeCompletedData{Output: map[string]any{"c": make(chan int)}}, runtime.RunCompletedData{DurationMs: math.NaN()},
		runtime.NodeStartedData{Details: map[string]any{"f": math.Inf(-1)}},
	} {
		_, want := json.Marshal(v)
		require.Error(t, want, "%#v", v)
		_, err := (&runtime.Event{Data: v}).DataJSON()
		require.Error(t, err, "%#v", v)
	}
}
