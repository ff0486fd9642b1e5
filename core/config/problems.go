package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Problem is one thing wrong with a configuration: the SDK's Problem,
// whose Key here is the whole path from the top of the file, e.g.
// "profiles.dev.sandbox.network"; list items are written
// "allowed_hosts[2]" (0-based) and keys that contain dots or spaces are
// quoted (sdk.JoinKey).
type Problem = sdk.Problem

// ValidationError reports every problem found in a configuration.
type ValidationError struct {
	// File is the configuration file, or "" for the built-in default.
	File     string
	Problems []Problem

	partial *Config // see Partial
}

// Partial is the configuration as far as Load could read it despite its
// Problems, or nil: every profile it could tell apart, each key with a
// problem left at its zero value. It is for checking what those problems
// leave unchecked (`amelia config validate` asks each profile's provider
// about its settings block), never for running anything; what such a
// check finds at a key Reported already is said, or stems from it.
func (e *ValidationError) Partial() *Config { return e.partial }

// Reported reports whether one of the problems is at key (a whole path,
// as Problem.Key) or above it.
func (e *ValidationError) Reported(key string) bool {
	for _, p := range e.Problems {
		if within(key, p.Key) {
			return true
		}
	}
	return false
}

// within reports whether key is at or under the path at.
func within(key, at string) bool {
	rest, ok := strings.CutPrefix(key, at)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// Error is one line: the file, the first problem, and how many more there
// are. Use Problems to print them all.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(SourceName(e.File))
	b.WriteString(": ")
	if len(e.Problems) == 0 {
		b.WriteString("invalid configuration")
		return b.String()
	}
	b.WriteString(e.Problems[0].String())
	if n := len(e.Problems) - 1; n > 0 {
		fmt.Fprintf(&b, " (and %d more; run `amelia config validate`)", n)
	}
	return b.String()
}

// SourceName names a configuration source in messages.
func SourceName(file string) string {
	if file == "" {
		return "built-in default config"
	}
	return file
}

// A path locates a value in the configuration tree while it is decoded.
type path []segment

type segment struct {
	key   string
	index int // when isIndex
	isIdx bool
}

func (p path) key(k string) path {
	return append(p[:len(p):len(p)], segment{key: k})
}

func (p path) index(i int) path {
	return append(p[:len(p):len(p)], segment{index: i, isIdx: true})
}

// String renders the path as the user wrote it: dot-separated keys,
// [i] for list items, quoted keys when they contain a dot, a bracket,
// a quote or a space (sdk.JoinKey, as providers write the keys of their
// settings).
func (p path) String() string {
	s := ""
	for _, seg := range p {
		if seg.isIdx {
			s += "[" + strconv.Itoa(seg.index) + "]"
			continue
		}
		s = sdk.JoinKey(s, seg.key)
	}
	return s
}

// parsePath reads a path as String writes it (and sdk.JoinKey, as
// providers write the keys of their settings).
func parsePath(s string) (path, bool) {
	var p path
	for s != "" {
		switch s[0] {
		case '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, false
			}
			i, err := strconv.Atoi(s[1:end])
			if err != nil {
				return nil, false
			}
			p, s = p.index(i), s[end+1:]
		case '"':
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false
			}
			k, _ := strconv.Unquote(q)
			p, s = p.key(k), s[len(q):]
		default:
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, false
			}
			p, s = p.key(s[:end]), s[end:]
		}
		if rest, ok := strings.CutPrefix(s, "."); ok {
			if rest == "" || rest[0] == '[' {
				return nil, false
			}
			s = rest
		} else if s != "" && s[0] != '[' {
			return nil, false
		}
	}
	return p, true
}

// envKey is the lowercased, delimiter-joined form of the path's keys (up
// to the first list index) used to find the environment variable that set
// a value.
func (p path) envKey() string {
	var parts []string
	for _, s := range p {
		if s.isIdx {
			break
		}
		parts = append(parts, strings.ToLower(s.key))
	}
	return strings.Join(parts, keyDelim)
}
