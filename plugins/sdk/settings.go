package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// DecodeSettings decodes a provider settings block (SandboxRef.Config,
// ListRequest.Config) into v strictly, with errors a profile's author can
// act on, each naming the key under prefix (the provider's block,
// "docker"): an unknown key (a typo) is an error, and so is a value of the
// wrong kind ("docker.resources.cpus: want a number, not a string"). An
// error a value's own UnmarshalJSON returns matching ErrInvalid passes as
// it is, so it can name its key itself. Empty settings leave v untouched.
// Every error matches ErrInvalid.
//
// It is the SDK's one settings decoder: a provider that reads its settings
// any other way lets a typo pass unseen, which the conformance kit's
// FailClosed group reports.
func DecodeSettings(raw json.RawMessage, prefix string, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		return Errorf(ErrInvalid, "%s settings: more than one JSON value", prefix)
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil, errors.Is(err, ErrInvalid):
		return err
	case errors.As(err, &typeErr):
		key := prefix
		if typeErr.Field != "" {
			key += "." + typeErr.Field
		}
		return Errorf(ErrInvalid, "%s: want a %s, not %s", key, kindName(typeErr.Type.Kind()), valueName(typeErr.Value))
	}
	return Errorf(ErrInvalid, "%s settings: %s", prefix, strings.TrimPrefix(err.Error(), "json: "))
}

// kindName names a kind of value as a profile's author writes it.
func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Float32, reflect.Float64, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "number"
	case reflect.Map, reflect.Struct:
		return "mapping"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Bool:
		return "true or false"
	}
	return k.String()
}

// valueName names a JSON value's kind as a profile's author writes it.
func valueName(v string) string {
	switch v {
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	case "bool":
		return "true or false"
	}
	return "a " + v
}
