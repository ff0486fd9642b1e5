package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
)

// decodeArgs decodes a tool's arguments, a JSON object, into v, a pointer
// to a struct whose fields are pointers (nil: the argument is absent or
// null). Unknown arguments are ignored. Empty arguments count as {}, since
// some models send nothing for a call without arguments.
func decodeArgs(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return errors.New("the arguments are not valid JSON; send a JSON object of the tool's parameters")
		}
		return fmt.Errorf("the arguments must be a JSON object of the tool's parameters, not a JSON %s", jsonKind(raw[0]))
	}
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("the arguments are not valid JSON (%v at byte %d); send a JSON object of the tool's parameters", syntaxErr, syntaxErr.Offset)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Errorf("argument %q must be %s, not a JSON %s", typeErr.Field, goTypeName(typeErr.Type), typeErr.Value)
	default:
		return fmt.Errorf("could not decode the arguments: %v", err)
	}
}

// jsonKind names the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// goTypeName names, for the model, the JSON type that t is decoded from.
func goTypeName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "another type"
	}
}

// missing is the error for a required argument that was not given.
func missing(name string) error {
	return fmt.Errorf("missing required argument %q", name)
}

// intArg is an optional whole-number argument of at least lo, def when
// absent. Numbers are decoded as float64 so that 10.0 is accepted as 10.
func intArg(name string, v *float64, def, lo int) (int, error) {
	if v == nil {
		return def, nil
	}
	f := *v
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("argument %q must be a whole number, not %v", name, f)
	}
	if f < float64(lo) {
		return 0, fmt.Errorf("argument %q must be at least %d, not %v", name, lo, f)
	}
	return int(min(f, math.MaxInt32)), nil
}

// stringOr is *v, or def if v is nil.
func stringOr(v *string, def string) string {
	if v == nil {
		return def
	}
	return *v
}
