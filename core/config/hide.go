package config

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A value that came from a ${VAR} or from an AMELIA_PROFILES__...
// override is never shown as it is, whatever its key: the variable may
// hold a secret (a key put in the wrong variable, or a variable named
// where another was meant), and what amelia shows ends up in terminals,
// logs and bug reports. The decoder reads every value through expand,
// which records each such value at its path, with what was written;
// messages quote values through sval.quote, ShowYAML shows them as
// written, and Redact puts them back as written in any text, for what
// others say about them (a provider, the plugin host).

// sval is a string value as decoded: what it is, what the file says, and
// the environment variable that set it instead, if one did.
type sval struct {
	val, raw string
	env      string // the AMELIA_PROFILES__... (or AMELIA_DEFAULT_PROFILE) variable, or ""
}

// hidden reports whether the value came from a ${VAR} or an override,
// and so must not be shown.
func (s sval) hidden() bool { return s.env != "" || s.val != s.raw }

// written is the value as it may be shown: as the file writes it, or a
// reference to the variable that set it.
func (s sval) written() string {
	if s.env != "" {
		return "${" + s.env + "}"
	}
	return s.raw
}

// quote renders the value for a message: quoted, and, when it is
// hidden, as written and never expanded.
func (s sval) quote() string {
	switch {
	case s.env != "":
		return "the value from " + s.env
	case s.hidden():
		return fmt.Sprintf("%q (as expanded)", s.raw)
	}
	return fmt.Sprintf("%q", s.val)
}

// minRedact is the shortest hidden value that Redact replaces where it
// is not quoted: shorter ones are too likely to be parts of other words
// (and a secret is longer).
const minRedact = 8

// hiding is what a loaded config knows of its hidden values: each one at
// its path (the whole path from the top of the file, as path.String
// writes it), and a replacer that writes them back as written.
type hiding struct {
	at       map[string]sval
	replacer *strings.Replacer
}

// newHiding is the hiding of the values at.
func newHiding(at map[string]sval) *hiding {
	type pair struct{ old, new string }
	var pairs []pair
	add := func(old, new string) {
		pairs = append(pairs, pair{strconv.Quote(old), strconv.Quote(new)})
		if len(old) >= minRedact {
			pairs = append(pairs, pair{old, new})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(at)) {
		s := at[k]
		if s.val != "" {
			add(s.val, s.written())
		}
		if s.env != "" && s.raw != s.val && s.raw != "" {
			add(s.raw, s.written()) // the override's own text, before its ${VAR}s
		}
	}
	// The longest first: at each place in the text, the first one that
	// matches is replaced.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &hiding{at: at, replacer: strings.NewReplacer(args...)}
}

// value is the hidden value at a path, if the value there is hidden.
func (h *hiding) value(at path) (sval, bool) {
	if h == nil {
		return sval{}, false
	}
	s, ok := h.at[at.String()]
	return s, ok
}

// redact writes every hidden value in s as written: wherever s quotes
// one, and wherever it holds one of at least minRedact bytes.
func (h *hiding) redact(s string) string {
	if h == nil || len(h.at) == 0 {
		return s
	}
	return h.replacer.Replace(s)
}

// Redact writes the values of the config that came from ${VAR}s or
// environment overrides as they were written (${KEY}, or
// ${AMELIA_PROFILES__...} for an override), wherever s quotes one, or
// holds one of 8 bytes or more: for text that may quote them, such as an
// error of a provider or a log record, before it is shown.
func (c *Config) Redact(s string) string { return c.hide.redact(s) }

// Redact is Config.Redact for the config the profile is in.
func (p *Profile) Redact(s string) string { return p.hide.redact(s) }
