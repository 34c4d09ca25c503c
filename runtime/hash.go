package runtime

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"
)

// inputsHash identifies what a node was asked to do: the run lineage,
// graph, plan version, node (id and data) and its routed inputs. A resumed
// run replays a succeeded node only when this hash is unchanged.
func inputsHash(root string, p *Plan, n int32, in Inputs) string {
	k := keyPool.Get().(*key)
	defer keyPool.Put(k)
	k.b = k.b[:0]
	pn := &p.nodes[n]
	k.str(root)
	k.str(p.GraphID)
	k.b = binary.BigEndian.AppendUint64(k.b, uint64(p.PlanVersion))
	k.str(pn.node.ID)
	k.b = append(k.b, pn.dataHash[:]...)
	for i := range in {
		k.str(in[i].EdgeID)
		k.str(in[i].Handle)
		k.value(in[i].Value)
	}
	return k.sum("")
}

// key accumulates a canonical byte encoding to hash in one go.
type key struct{ b []byte }

var keyPool = sync.Pool{New: func() any { return &key{b: make([]byte, 0, 256)} }}

// str appends a length-prefixed string.
func (k *key) str(s string) {
	k.b = binary.BigEndian.AppendUint64(k.b, uint64(len(s)))
	k.b = append(k.b, s...)
}

// sum returns prefix + the first 16 bytes of the SHA-256 of the key, hex.
func (k *key) sum(prefix string) string {
	h := sha256.Sum256(k.b)
	var out [64]byte
	n := copy(out[:], prefix)
	hex.Encode(out[n:], h[:16])
	return string(out[:n+32])
}

// value appends a canonical encoding of JSON-like values (map keys
// sorted; numbers as float64); other Go values are encoded as their JSON
// decoding, so a value read back from a durable store encodes the same.
func (k *key) value(v any) {
	switch x := v.(type) {
	case nil:
		k.b = append(k.b, 'n')
	case string:
		k.b = append(k.b, 's')
		k.str(x)
	case bool:
		if x {
			k.b = append(k.b, 't')
		} else {
			k.b = append(k.b, 'f')
		}
	case float64:
		k.b = append(k.b, 'd')
		k.b = binary.BigEndian.AppendUint64(k.b, math.Float64bits(x))
	case int:
		k.value(float64(x))
	case int64:
		k.value(float64(x))
	case int32:
		k.value(float64(x))
	case float32:
		k.value(float64(x))
	case []any:
		k.b = append(k.b, 'a')
		k.b = binary.BigEndian.AppendUint64(k.b, uint64(len(x)))
		for _, e := range x {
			k.value(e)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for key := range x {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		k.b = append(k.b, 'm')
		k.b = binary.BigEndian.AppendUint64(k.b, uint64(len(x)))
		for _, key := range keys {
			k.str(key)
			k.value(x[key])
		}
	default:
		b, err := json.Marshal(v)
		var plain any
		if err == nil && json.Unmarshal(b, &plain) == nil {
			k.value(plain)
			return
		}
		k.b = append(k.b, 'j')
		k.str(fmt.Sprintf("%T:%v", v, v))
	}
}

func shortHash(prefix string, parts ...string) string {
	k := keyPool.Get().(*key)
	defer keyPool.Put(k)
	k.b = k.b[:0]
	for _, p := range parts {
		k.str(p)
	}
	return k.sum(prefix)
}

func attemptID(runID, nodeID string, attempt int) string {
	var n [20]byte
	return shortHash("att_", runID, nodeID, string(strconv.AppendInt(n[:0], int64(attempt), 10)))
}

func interruptID(root, nodeID string, attempt, resumes int) string {
	return shortHash("int_", root, nodeID, strconv.Itoa(attempt), strconv.Itoa(resumes))[:28]
}

// summarize derives a short description of an output for checkpoints.
func summarize(v any) string {
	const max = 200
	var s string
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		s = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			s = fmt.Sprintf("%v", v)
		} else {
			s = string(b)
		}
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// clone gives a node its own copy of its inputs: the slice and, for
// JSON-like values, the maps and slices inside (other values are shared
// as they are; outputs are meant to be treated as immutable).
func (in Inputs) clone() Inputs {
	if in == nil {
		return nil
	}
	out := make(Inputs, len(in))
	for i := range in {
		out[i] = in[i]
		out[i].Value = cloneValue(in[i].Value)
	}
	return out
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneValue(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneValue(e)
		}
		return s
	case []byte:
		return append([]byte(nil), x...)
	case json.RawMessage:
		return append(json.RawMessage(nil), x...)
	}
	return v
}
