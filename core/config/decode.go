package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// decoder walks the merged configuration tree, expanding ${VAR}s,
// converting values and collecting every problem.
type decoder struct {
	lookup   func(string) (string, bool)
	home     string            // for "~/" in paths; "" if there is none
	envKeys  map[string]string // lowercased key path → env variable that set it
	problems []Problem
	bad      map[string]bool // paths with a problem
	// expanded counts the bytes ${VAR}s have expanded to so far, held to
	// maxConfigBytes like the file.
	expanded int
	// hidden are the values that came from ${VAR}s or overrides, by path
	// (see sval.hidden).
	hidden map[string]sval
}

// problemf records a problem at a path, naming the environment variables
// that set the value (or something below it) when there are any.
func (d *decoder) problemf(at path, format string, args ...any) {
	pr := problemAt(at, fmt.Sprintf(format, args...), d.envKeys)
	key := pr.Key
	d.problems = append(d.problems, pr)
	if d.bad == nil {
		d.bad = map[string]bool{}
	}
	d.bad[key] = true
}

// failed reports whether a problem was recorded at the path.
func (d *decoder) failed(at path) bool { return d.bad[at.String()] }

// problemAt is a problem at a path, naming the environment variables
// that set the value (or something below it) when there are any and msg
// does not name them already.
func problemAt(at path, msg string, envKeys map[string]string) Problem {
	var vars []string
	for _, v := range envVarsFor(at, envKeys) {
		if !namesVar(msg, v) {
			vars = append(vars, v)
		}
	}
	if len(vars) > 0 {
		msg += " (set by " + strings.Join(vars, ", ") + ")"
	}
	return Problem{Key: at.String(), Message: msg}
}

// namesVar reports whether msg names the environment variable name as a
// whole word.
func namesVar(msg, name string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(msg)
}

func envVarsFor(at path, envKeys map[string]string) []string {
	key := at.envKey()
	var vars []string
	for k, v := range envKeys {
		if k == key || strings.HasPrefix(k, key+keyDelim) {
			vars = append(vars, v)
		}
	}
	slices.Sort(vars)
	return vars
}

func (d *decoder) fromEnv(at path) bool {
	_, ok := d.envKeys[at.envKey()]
	return ok
}

// envName converts a non-nil value to the name of an environment variable
// for the key named key (like example). What it expanded to is never
// echoed: when it is not a name, it is probably the secret itself.
func (d *decoder) envName(at path, v any, key, example string) (string, bool) {
	s, ok := d.str(at, v)
	switch {
	case !ok:
	case looksLikeSecret(s.val) && s.hidden():
		d.problemf(at, "%s looks like a secret, not a variable name: %s takes the variable's name (like %s), not its value", s.quote(), key, example)
	case looksLikeSecret(s.val):
		// Not echoed, even as written: it would end up in logs.
		d.problemf(at, "this looks like a secret, not a variable name: %s takes the variable's name (like %s), not its value", key, example)
	case !validEnvName(s.val) && s.hidden():
		d.problemf(at, "%s is not a valid environment variable name: %s takes the variable's name (like %s), not its value", s.quote(), key, example)
	case !validEnvName(s.val):
		d.problemf(at, "%q is not a valid environment variable name (letters, digits and _, not starting with a digit)", s.val)
	default:
		return s.val, true
	}
	return "", false
}

// durationHint says what a duration looks like, for messages.
const durationHint = "like 90s, 10m, 14d"

// duration converts a non-nil value to a positive duration, written as Go
// writes them (90s, 10m, 1h30m), or with a leading number of days (14d,
// 1d12h): see ParseDuration.
func (d *decoder) duration(at path, v any) (time.Duration, bool) {
	if _, ok := v.(string); !ok {
		d.problemf(at, "must be a duration (%s), got %s", durationHint, typeName(v))
		return 0, false
	}
	s, ok := d.str(at, v)
	if !ok {
		return 0, false
	}
	t, err := ParseDuration(s.val)
	switch {
	case err != nil:
		d.problemf(at, "%s is not a duration (%s)", s.quote(), durationHint)
		return 0, false
	case t <= 0:
		d.problemf(at, "%s is not a positive duration (%s)", s.quote(), durationHint)
		return 0, false
	}
	return t, true
}

// ParseDuration reads a duration as a config file writes one: as Go
// writes them (90s, 10m, 1h30m), optionally led by a whole number of
// days (14d, 1d12h; a day is 24 hours). Surrounding spaces are ignored.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 32)
	if err != nil || days == "" || days[0] == '+' {
		return 0, fmt.Errorf("%q is not a duration (%s)", s, durationHint)
	}
	const maxDays = 100 * 365 // far beyond any retention, far below overflow
	if n > maxDays {
		return 0, fmt.Errorf("%q is too long a duration (at most %d days)", s, maxDays)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 {
		return 0, fmt.Errorf("%q is not a duration (%s)", s, durationHint)
	}
	return d + r, nil
}

// FormatDays writes d as ParseDuration reads it, in days where it is a
// whole number of them (14d), else as Go does (36h).
func FormatDays(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return formatDuration(d)
}

// sizeHint says what a size looks like, for messages.
const sizeHint = "an integer of bytes, or like 512KiB, 10MiB"

// size converts a non-nil value to a number of bytes between lo and hi: a
// YAML integer, or a string (as environment variables always are) holding
// an integer with an optional unit (see parseSize).
func (d *decoder) size(at path, v any, lo, hi int64) (int64, bool) {
	var n int64
	var shown string
	switch t := v.(type) {
	case int:
		n, shown = int64(t), fmt.Sprint(t)
	case int64:
		n, shown = t, fmt.Sprint(t)
	case uint64:
		n, shown = int64(min(t, math.MaxInt64)), fmt.Sprint(t)
	case float64:
		shown = fmt.Sprint(t)
		if t != math.Trunc(t) || math.Abs(t) > 1<<53 {
			d.problemf(at, "%s is not a size (%s)", shown, sizeHint)
			return 0, false
		}
		n = int64(t)
	case string:
		s, ok := d.str(at, v)
		if !ok {
			return 0, false
		}
		if n, ok = parseSize(s.val); !ok {
			d.problemf(at, "%s is not a size (%s)", s.quote(), sizeHint)
			return 0, false
		}
		shown = s.quote()
	default:
		d.problemf(at, "must be a size (%s), got %s", sizeHint, typeName(v))
		return 0, false
	}
	switch {
	case n < lo:
		d.problemf(at, "%s is too small (at least %s)", shown, formatSize(lo))
		return 0, false
	case n > hi:
		d.problemf(at, "%s is too large (at most %s)", shown, formatSize(hi))
		return 0, false
	}
	return n, true
}

// count converts a non-nil value to a whole number from lo to hi: a
// YAML integer, or a string (as environment variables always are)
// holding one.
func (d *decoder) count(at path, v any, lo, hi int) (int, bool) {
	var n int64
	var shown string
	switch t := v.(type) {
	case int:
		n, shown = int64(t), strconv.Itoa(t)
	case uint64: // too large for an int
		n, shown = math.MaxInt64, fmt.Sprint(t)
	case float64:
		shown = fmt.Sprint(t)
		if t != math.Trunc(t) {
			d.problemf(at, "%s is not a whole number (from %d to %d)", shown, lo, hi)
			return 0, false
		}
		n = int64(max(min(t, math.MaxInt32), math.MinInt32))
	case string:
		s, ok := d.str(at, v)
		if !ok {
			return 0, false
		}
		shown = s.quote()
		var err error
		if n, err = strconv.ParseInt(strings.TrimSpace(s.val), 10, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			d.problemf(at, "%s is not a whole number (from %d to %d)", shown, lo, hi)
			return 0, false
		}
	default:
		d.problemf(at, "must be a whole number from %d to %d, got %s", lo, hi, typeName(v))
		return 0, false
	}
	if n < int64(lo) || n > int64(hi) {
		d.problemf(at, "%s is not from %d to %d", shown, lo, hi)
		return 0, false
	}
	return int(n), true
}

// absPath checks that s is an absolute path, or one starting with "~/"
// (expanded with the home directory), and returns it cleaned.
func (d *decoder) absPath(at path, s sval) (string, bool) {
	p := s.val
	if p == "~" || strings.HasPrefix(p, "~/") {
		if d.home == "" {
			d.problemf(at, "%s starts with ~ but there is no home directory; write an absolute path", s.quote())
			return "", false
		}
		p = filepath.Join(d.home, p[1:])
	}
	if !filepath.IsAbs(p) {
		d.problemf(at, "%s is not an absolute path (write /dir or ~/dir)", s.quote())
		return "", false
	}
	return filepath.Clean(p), true
}

// str converts a non-nil value to a string, expanding ${VAR}s.
func (d *decoder) str(at path, v any) (sval, bool) {
	s, ok := v.(string)
	if !ok {
		d.problemf(at, "must be a string, got %s", typeName(v))
		return sval{}, false
	}
	return d.expand(at, s)
}

// boolean is v as a bool: YAML's true or false, or the strings "true" and
// "false" (an environment override, or a ${VAR} that expands to one).
func (d *decoder) boolean(at path, v any) (bool, bool) {
	if b, ok := v.(bool); ok {
		return b, true
	}
	s, ok := v.(string)
	if !ok {
		d.problemf(at, "must be true or false, got %s", typeName(v))
		return false, false
	}
	x, ok := d.expand(at, s)
	if !ok {
		return false, false
	}
	switch strings.ToLower(strings.TrimSpace(x.val)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	d.problemf(at, "%s is not true or false", x.quote())
	return false, false
}

func (d *decoder) expand(at path, s string) (sval, bool) {
	x, err := expand(s, d.lookup)
	if err != nil {
		d.problemf(at, "%v", err)
		return sval{}, false
	}
	for _, name := range x.unset {
		d.problemf(at, "environment variable %s is not set (write ${%s:-default} to give a default)", name, name)
	}
	if len(x.unset) > 0 {
		return sval{}, false
	}
	if x.changed {
		over := d.expanded > maxConfigBytes
		d.expanded += len(x.value)
		switch {
		case over:
			return sval{}, false // said once already
		case d.expanded > maxConfigBytes:
			d.problemf(at, "${VAR}s in the config expand to more than %s in all, the limit of config text", formatSize(maxConfigBytes))
			return sval{}, false
		}
	}
	sv := sval{val: x.value, raw: s, env: d.envKeys[at.envKey()]}
	if sv.hidden() {
		d.hide(at, sv)
	}
	return sv, true
}

// hide records that the value at a path came from ${VAR}s or an
// override.
func (d *decoder) hide(at path, s sval) {
	if d.hidden == nil {
		d.hidden = map[string]sval{}
	}
	d.hidden[at.String()] = s
}

// strList converts a non-nil list of strings, expanding ${VAR}s in each
// item. A string that came from an environment variable is a
// comma-separated list.
func (d *decoder) strList(at path, v any, item func(at path, s sval) (string, bool)) ([]string, bool) {
	if s, ok := v.(string); ok && d.fromEnv(at) {
		d.hide(at, sval{val: s, raw: s, env: d.envKeys[at.envKey()]})
		var items []any
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				items = append(items, f)
			}
		}
		v = items
	}
	list, ok := v.([]any)
	if !ok {
		d.problemf(at, "must be a list, got %s", typeName(v))
		return nil, false
	}
	out := make([]string, 0, len(list))
	good := true
	for i, it := range list {
		s, ok := d.str(at.index(i), it)
		if ok {
			var val string
			if val, ok = item(at.index(i), s); ok {
				out = append(out, val)
			}
		}
		good = good && ok
	}
	return out, good
}

// mapping converts a value to a map; nil (absent or null) is an empty map.
func (d *decoder) mapping(at path, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case nil:
		return map[string]any{}, true
	case map[string]any:
		return m, true
	}
	d.problemf(at, "must be a map, got %s", typeName(v))
	return nil, false
}

// tree copies an arbitrary value (a provider's settings), expanding
// ${VAR}s in every string at any depth. Keys are not expanded.
func (d *decoder) tree(at path, v any) any {
	switch t := v.(type) {
	case string:
		s, _ := d.expand(at, t)
		return s.val
	case map[string]any:
		out := make(map[string]any, len(t))
		for _, k := range slices.Sorted(maps.Keys(t)) {
			out[k] = d.tree(at.key(k), t[k])
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[fmt.Sprint(k)] = val
		}
		return d.tree(at, out)
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = d.tree(at.index(i), val)
		}
		return out
	}
	return v
}

// typeName names a decoded YAML value's type for messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, uint64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a map"
	case time.Time:
		return "a timestamp"
	}
	return fmt.Sprintf("a %T", v)
}

// A field is one known key of a section: how to decode it into T and how
// to show it. decode gets nil when the key is absent or null and is
// responsible for the default (or the "required" problem).
type field[T any] struct {
	key    string
	decode func(d *decoder, at path, v any, dst *T)
	show   func(s *shower, at path, src *T) any // nil: omit the key
	// block marks an optional map whose presence matters: written with
	// nothing under it ("anthropic:", a YAML null), it is an empty map,
	// as a provider settings block is; absent, or unset by an empty
	// environment variable, it is nil.
	block bool
}

// A section is a map of known keys, in schema order.
type section[T any] struct {
	fields []field[T]
	// extra handles a key that is not a field and reports whether it is
	// acceptable; nil means every other key is unknown.
	extra func(d *decoder, at path, key string, v any, dst *T) bool
	// extraHint ends the "known:" list in unknown-key problems.
	extraHint string
	// check runs after the fields: cross-key rules and defaults. set holds
	// the field keys that were present and not null.
	check func(d *decoder, at path, set map[string]bool, dst *T)
	// showExtra returns key/value pairs shown after the fields.
	showExtra func(s *shower, at path, src *T) []keyValue
}

type keyValue struct {
	key string
	val any
}

// liftFields turns fields of an inner struct into fields of the struct
// that holds it, so that one set of decoders serves both (llm and
// llm.anthropic are both Upstreams).
func liftFields[O, I any](fields []field[I], inner func(*O) *I) []field[O] {
	out := make([]field[O], len(fields))
	for i, f := range fields {
		out[i] = field[O]{
			key:    f.key,
			block:  f.block,
			decode: func(d *decoder, at path, v any, o *O) { f.decode(d, at, v, inner(o)) },
		}
		if f.show != nil {
			out[i].show = func(s *shower, at path, o *O) any { return f.show(s, at, inner(o)) }
		}
	}
	return out
}

func (sec section[T]) keys() []string {
	keys := make([]string, len(sec.fields))
	for i, f := range sec.fields {
		keys[i] = f.key
	}
	return keys
}

// decodeSection decodes the map v into dst: every field in order, then
// the other keys (sorted) through extra, then check.
func decodeSection[T any](d *decoder, at path, v any, sec section[T], dst *T) bool {
	m, ok := d.mapping(at, v)
	if !ok {
		return false
	}
	set := map[string]bool{}
	for _, f := range sec.fields {
		fv, present := m[f.key]
		if f.block && present && fv == nil && !d.fromEnv(at.key(f.key)) {
			fv = map[string]any{}
		}
		if fv != nil {
			set[f.key] = true
		}
		f.decode(d, at.key(f.key), fv, dst)
	}
	known := sec.keys()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if slices.Contains(known, k) {
			continue
		}
		if sec.extra != nil && sec.extra(d, at.key(k), k, m[k], dst) {
			continue
		}
		d.problemf(at.key(k), "%s", sdk.UnknownKeyMessage(k, known, sec.extraHint))
	}
	if sec.check != nil {
		sec.check(d, at, set, dst)
	}
	return true
}
