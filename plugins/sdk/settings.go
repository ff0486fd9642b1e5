package sdk

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a profile's settings block for a
// provider: what ValidateSettings answers, and what a SettingsError holds.
type Problem struct {
	// Key is the path of the offending key inside the block, as JoinKey
	// writes it ("resources.memory", "labels.\"a.b\"", "env[2]"); "" means
	// the block as a whole. The host puts the block's own path in front
	// ("profiles.dev.sandbox.docker.resources.memory").
	Key string
	// Message says what is wrong, on one line, naming the allowed values
	// where there is a choice; for an unknown key it suggests the key it
	// is likely a typo of and lists the known ones.
	Message string
}

// String is "key: message", or the message alone for the whole block.
func (p Problem) String() string {
	if p.Key == "" {
		return p.Message
	}
	return p.Key + ": " + p.Message
}

// SettingsError is every problem found in a provider's settings block:
// what DecodeSettings and InvalidSetting return. It matches ErrInvalid,
// and reads as the problems, each with the block's name in front
// ("docker.resources.memory: ..."), joined by "; ".
type SettingsError struct {
	// Block is the name of the block, the provider's ("docker").
	Block    string
	Problems []Problem
}

func (e *SettingsError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		at := e.Block
		if p.Key != "" {
			at += "." + p.Key
		}
		parts[i] = at + ": " + p.Message
	}
	return strings.Join(parts, "; ")
}

func (e *SettingsError) Unwrap() error { return ErrInvalid }

// InvalidSetting is a SettingsError of one problem, at key inside block:
// sdk.InvalidSetting("docker", "resources.cpus", "%v is not a number of
// CPUs", cpus). Providers check their values with it, so that
// ValidateSettings can tell the host which key is wrong.
func InvalidSetting(block, key, format string, args ...any) error {
	return &SettingsError{Block: block, Problems: []Problem{{Key: key, Message: oneLine(fmt.Sprintf(format, args...))}}}
}

// SettingsProblems turns the outcome of reading and checking a settings
// block into what ValidateSettings answers: no problems for nil, the
// problems of a SettingsError, and for any other error matching
// ErrInvalid one problem of the whole block saying it. Any other error is
// returned as it is: the check itself failed.
//
//	func (p *Provider) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
//		_, err := decodeSettings(req.Config)
//		return sdk.SettingsProblems(err)
//	}
func SettingsProblems(err error) ([]Problem, error) {
	var se *SettingsError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &se):
		return slices.Clone(se.Problems), nil
	case errors.Is(err, ErrInvalid):
		return []Problem{{Message: oneLine(err.Error())}}, nil
	}
	return nil, err
}

// DecodeSettings decodes a provider settings block (SandboxRef.Config,
// ListRequest.Config, ValidateRequest.Config) into v, a pointer,
// strictly: a key v has no field for (a typo) is a problem, and so is a
// value of the wrong kind or one its own UnmarshalJSON refuses. It reports
// every problem at once, each at its full key path inside the block
// (Problem.Key) — an unknown key with the known keys of its level and the
// one it is likely a typo of — as a *SettingsError, which matches
// ErrInvalid; its message names each key under block, the provider's
// name ("docker.resources.memroy: unknown key, did you mean memory?
// (known: cpus, memory, pids)"). Empty settings leave v untouched.
//
// Keys match fields by their json tags (exactly, else ignoring case, as
// encoding/json does); a value is decoded as encoding/json decodes it into
// its field's type, so a field's UnmarshalJSON says only what is wrong
// with its value ("\"4x\" is not a size"), and DecodeSettings adds the
// key. The tag's ",string" option is not honoured: a number or a boolean
// is written as one, not quoted. The keys of an embedded struct are those
// of the struct embedding it, as in encoding/json; embedding a pointer to
// a struct is not supported. Structs, pointers, maps with string keys and
// slices are walked key by key; anything else is decoded whole. A v
// that is not a non-nil pointer is an error that is not a SettingsError
// (a bug in the provider).
//
// It is the SDK's one settings decoder: a provider that reads its
// settings any other way lets a typo pass unseen, which the conformance
// kit's FailClosed and Settings groups report.
func DecodeSettings(raw json.RawMessage, block string, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("decode %s settings: want a non-nil pointer to decode into, not %T", block, v)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var doc json.RawMessage
	if err := dec.Decode(&doc); err != nil {
		return &SettingsError{Block: block, Problems: []Problem{{Message: "the settings are not JSON: " + strings.TrimPrefix(err.Error(), "json: ")}}}
	}
	if dec.More() {
		return &SettingsError{Block: block, Problems: []Problem{{Message: "the settings are more than one JSON value"}}}
	}
	d := &settingsDecoder{}
	d.value("", doc, rv.Elem())
	if len(d.problems) > 0 {
		return &SettingsError{Block: block, Problems: d.problems}
	}
	return nil
}

// settingsDecoder walks a settings block against the Go value it goes
// into, collecting every problem with its key path.
type settingsDecoder struct {
	problems []Problem
}

func (d *settingsDecoder) add(at, format string, args ...any) {
	d.problems = append(d.problems, Problem{Key: at, Message: oneLine(fmt.Sprintf(format, args...))})
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether values of t are decoded by their own
// UnmarshalJSON or UnmarshalText.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler)
}

// value decodes raw into v, which is settable.
func (d *settingsDecoder) value(at string, raw json.RawMessage, v reflect.Value) {
	t := v.Type()
	if decodesItself(t) {
		d.leaf(at, raw, v)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(raw) {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(at, raw, v.Elem())
	case reflect.Struct:
		d.object(at, raw, v)
	case reflect.Map:
		if t.Key().Kind() != reflect.String || decodesItself(t.Key()) {
			d.leaf(at, raw, v)
			return
		}
		d.mapping(at, raw, v)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // []byte is base64 text
			d.leaf(at, raw, v)
			return
		}
		d.list(at, raw, v)
	default:
		d.leaf(at, raw, v)
	}
}

// object decodes a JSON object into the struct v, field by field.
func (d *settingsDecoder) object(at string, raw json.RawMessage, v reflect.Value) {
	m, ok := d.members(at, raw)
	if !ok {
		return
	}
	fields := settingsFields(v.Type())
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key := JoinKey(at, k)
		f, ok := findField(fields, k)
		if !ok {
			d.add(key, "%s", UnknownKeyMessage(k, names, ""))
			continue
		}
		d.value(key, m[k], v.FieldByIndex(f.index))
	}
}

// mapping decodes a JSON object into the map v, entry by entry.
func (d *settingsDecoder) mapping(at string, raw json.RawMessage, v reflect.Value) {
	if isNull(raw) {
		v.SetZero()
		return
	}
	m, ok := d.members(at, raw)
	if !ok {
		return
	}
	t := v.Type()
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(t, len(m)))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		elem := reflect.New(t.Elem()).Elem()
		d.value(JoinKey(at, k), m[k], elem)
		v.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), elem)
	}
}

// list decodes a JSON array into the slice v, item by item.
func (d *settingsDecoder) list(at string, raw json.RawMessage, v reflect.Value) {
	if isNull(raw) {
		v.SetZero()
		return
	}
	var items []json.RawMessage
	if !d.decode(at, raw, &items) {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, item := range items {
		d.value(at+"["+strconv.Itoa(i)+"]", item, s.Index(i))
	}
	v.Set(s)
}

// members are the members of the JSON object raw; null has none.
func (d *settingsDecoder) members(at string, raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if isNull(raw) {
		return nil, false
	}
	var m map[string]json.RawMessage
	ok := d.decode(at, raw, &m)
	return m, ok
}

// leaf decodes raw into v whole, with encoding/json.
func (d *settingsDecoder) leaf(at string, raw json.RawMessage, v reflect.Value) {
	d.decode(at, raw, v.Addr().Interface())
}

// decode decodes raw into ptr with encoding/json, a struct's unknown keys
// refused, and reports whether it could: a value of the wrong kind is a
// problem at its key saying what was wanted, anything else one at at in
// encoding/json's words (a value's own UnmarshalJSON saying what is wrong
// with it).
func (d *settingsDecoder) decode(at string, raw json.RawMessage, ptr any) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(ptr)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return true
	case errors.As(err, &typeErr):
		key := at
		if typeErr.Field != "" {
			// The path of the field inside ptr, its keys joined by dots.
			for part := range strings.SplitSeq(typeErr.Field, ".") {
				key = JoinKey(key, part)
			}
		}
		d.add(key, "%s", typeMessage(typeErr))
	default:
		d.add(at, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return false
}

// typeMessage says what kind of value a key wants, and what it got.
func typeMessage(e *json.UnmarshalTypeError) string {
	num, isNum := strings.CutPrefix(e.Value, "number ")
	k := e.Type.Kind()
	switch {
	case isNum && isInt(k):
		if f, err := strconv.ParseFloat(num, 64); err != nil || f != math.Trunc(f) {
			return num + " is not a whole number"
		}
		return num + " is out of range"
	case isNum && isFloat(k):
		return num + " is out of range"
	}
	return "want " + kindName(k) + ", not " + valueName(e.Value)
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func isFloat(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }

// kindName names a kind of value as a profile's author writes it.
func kindName(k reflect.Kind) string {
	switch {
	case isInt(k):
		return "a whole number"
	case isFloat(k):
		return "a number"
	}
	switch k {
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + k.String()
}

// valueName names a JSON value's kind, as encoding/json reports it, as a
// profile's author writes it.
func valueName(v string) string {
	switch v {
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	case "bool":
		return "true or false"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	return "a " + v
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// A settingsField is a key of a settings struct: its json name and where
// the field is (through embedded structs).
type settingsField struct {
	name  string
	index []int
}

// settingsFields lists the keys of struct type t as encoding/json sees
// them: by json tag, else the field's name; fields of embedded structs
// without a tag promoted; "-" and unexported fields left out. An embedded
// pointer to a struct is not promoted.
func settingsFields(t reflect.Type) []settingsField {
	var out []settingsField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for _, sf := range settingsFields(f.Type) {
				out = append(out, settingsField{sf.name, append([]int{i}, sf.index...)})
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, settingsField{name, []int{i}})
	}
	return out
}

// findField finds a key's field: its exact name, else one equal to it
// ignoring case.
func findField(fields []settingsField, key string) (settingsField, bool) {
	for _, f := range fields {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return settingsField{}, false
}

// oneLine joins the lines of s with spaces: a problem is one line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
