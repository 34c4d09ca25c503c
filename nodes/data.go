package nodes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-playground/validator/v10"

	"chatgraph/runtime"
)

// dataDecoder decodes and validates node data into per-type structs.
type dataDecoder struct{ v *validator.Validate }

func newDataDecoder() *dataDecoder {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	return &dataDecoder{v: v}
}

// decode fills dst from n.Data (absent data leaves dst as is) and runs
// its validate tags. Fields the runtime owns (retry, timeoutMs...) and
// unknown fields are ignored. The error is a *runtime.FieldError.
func (d *dataDecoder) decode(n *runtime.Node, dst any) error {
	data := bytes.TrimSpace(n.Data)
	if len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, dst); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return &runtime.FieldError{Field: te.Field, Message: fmt.Sprintf("expected %s, got JSON %s", jsonKind(te.Type), te.Value)}
			}
			return &runtime.FieldError{Message: "data must be a JSON object"}
		}
	}
	if err := d.v.Struct(dst); err != nil {
		var ves validator.ValidationErrors
		if errors.As(err, &ves) && len(ves) > 0 {
			fe := ves[0]
			ns := fe.Namespace()
			if _, rest, ok := strings.Cut(ns, "."); ok {
				ns = rest
			}
			return &runtime.FieldError{Field: ns, Message: validationMessage(fe)}
		}
		return &runtime.FieldError{Message: err.Error()}
	}
	return nil
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

func validationMessage(fe validator.FieldError) string {
	isStr := fe.Kind() == reflect.String
	switch fe.Tag() {
	case "required":
		return "is required"
	case "gte", "min":
		if isStr {
			return "must be at least " + fe.Param() + " characters long"
		}
		return "must be at least " + fe.Param()
	case "lte", "max":
		if isStr {
			return "must be at most " + fe.Param() + " characters long"
		}
		return "must be at most " + fe.Param()
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	}
	return fmt.Sprintf("failed the %q check", fe.Tag())
}
