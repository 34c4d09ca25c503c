package runtime

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// inputsHash identifies what a node was asked to do: the run lineage,
// graph, plan version, node (id and data) and its routed inputs. A resumed
// run replays a succeeded node only when this hash is unchanged.
func inputsHash(root string, p *Plan, n int32, in Inputs) string {
	h := sha256.New()
	pn := &p.nodes[n]
	writeStr(h, root)
	writeStr(h, p.GraphID)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(p.PlanVersion))
	h.Write(b[:])
	writeStr(h, pn.node.ID)
	h.Write(pn.dataHash[:])
	for i := range in {
		writeStr(h, in[i].EdgeID)
		writeStr(h, in[i].Handle)
		writeValue(h, in[i].Value)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

func writeStr(h hash.Hash, s string) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(len(s)))
	h.Write(b[:])
	h.Write([]byte(s))
}

// writeValue writes a canonical encoding of JSON-like values (map keys
// sorted); anything else goes through encoding/json.
func writeValue(h hash.Hash, v any) {
	switch x := v.(type) {
	case nil:
		h.Write([]byte{'n'})
	case string:
		h.Write([]byte{'s'})
		writeStr(h, x)
	case bool:
		if x {
			h.Write([]byte{'t'})
		} else {
			h.Write([]byte{'f'})
		}
	case float64:
		var b [9]byte
		b[0] = 'd'
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(x))
		h.Write(b[:])
	case int:
		writeValue(h, float64(x))
	case int64:
		writeValue(h, float64(x))
	case int32:
		writeValue(h, float64(x))
	case float32:
		writeValue(h, float64(x))
	case []any:
		writeStr(h, "a"+strconv.Itoa(len(x)))
		for _, e := range x {
			writeValue(h, e)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		writeStr(h, "m"+strconv.Itoa(len(x)))
		for _, k := range keys {
			writeStr(h, k)
			writeValue(h, x[k])
		}
	default:
		// Structs and other Go values hash as their JSON decoding, so a
		// value read back from a durable store hashes the same.
		b, err := json.Marshal(v)
		var plain any
		if err == nil && json.Unmarshal(b, &plain) == nil {
			writeValue(h, plain)
			return
		}
		h.Write([]byte{'j'})
		writeStr(h, fmt.Sprintf("%T:%v", v, v))
	}
}

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		writeStr(h, p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

func attemptID(runID, nodeID string, attempt int) string {
	return "att_" + shortHash(runID, nodeID, strconv.Itoa(attempt))
}

func interruptID(root, nodeID string, attempt, resumes int) string {
	return "int_" + shortHash(root, nodeID, strconv.Itoa(attempt), strconv.Itoa(resumes))[:24]
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
