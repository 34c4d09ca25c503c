package rowjson

import (
	"encoding/json"
	"fmt"

	"chatgraph/runtime"
)

// Run holds a run record's JSON columns, encoded. A nil field is SQL NULL.
type Run struct {
	Attrs, EntryNodeIDs, Input, Options, Interrupts, Answers []byte
}

// EncodeRun encodes r's JSON columns.
func EncodeRun(r *runtime.RunRecord) (Run, error) {
	var j Run
	var err error
	if j.Attrs, err = Bytes(r.Attrs); err != nil {
		return j, fmt.Errorf("attrs: %w", err)
	}
	if j.EntryNodeIDs, err = runtime.EncodeJSON(r.EntryNodeIDs); err != nil {
		return j, fmt.Errorf("entry node ids: %w", err)
	}
	if j.Input, err = Bytes(r.Input); err != nil {
		return j, fmt.Errorf("input: %w", err)
	}
	if j.Options, err = json.Marshal(r.Options); err != nil {
		return j, fmt.Errorf("options: %w", err)
	}
	if r.Interrupts != nil {
		if j.Interrupts, err = json.Marshal(r.Interrupts); err != nil {
			return j, fmt.Errorf("interrupts: %w", err)
		}
	}
	if r.Answers != nil {
		if j.Answers, err = json.Marshal(r.Answers); err != nil {
			return j, fmt.Errorf("answers: %w", err)
		}
	}
	return j, nil
}

// DecodeInto fills r's JSON-backed fields from the columns.
func (j Run) DecodeInto(r *runtime.RunRecord) error {
	var err error
	if r.Input, err = Any(j.Input); err != nil {
		return fmt.Errorf("run %s input: %w", r.ID, err)
	}
	for _, f := range []struct {
		b   []byte
		dst any
	}{{j.Attrs, &r.Attrs}, {j.EntryNodeIDs, &r.EntryNodeIDs}, {j.Options, &r.Options}, {j.Interrupts, &r.Interrupts}, {j.Answers, &r.Answers}} {
		if err := Into(f.b, f.dst); err != nil {
			return fmt.Errorf("run %s: %w", r.ID, err)
		}
	}
	return nil
}

// Bytes encodes v, or returns nil (NULL) for a nil v.
func Bytes(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return runtime.EncodeJSON(v)
}

// Any decodes a JSON column into its generic Go value; NULL is nil.
func Any(b []byte) (any, error) {
	if b == nil {
		return nil, nil
	}
	var v any
	err := json.Unmarshal(b, &v)
	return v, err
}

// Into decodes a JSON column into dst; NULL leaves dst as it is.
func Into(b []byte, dst any) error {
	if b == nil {
		return nil
	}
	return json.Unmarshal(b, dst)
}
