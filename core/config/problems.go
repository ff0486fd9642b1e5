package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Key is the dot-separated path of the offending key as written in
	// the file, e.g. "profiles.dev.sandbox.network"; list items are
	// written "allowed_hosts[2]" (0-based) and keys that contain dots or
	// spaces are quoted.
	Key string
	// Message says what is wrong and, where there is a choice, names the
	// allowed values. It is a single line.
	Message string
}

// String renders the problem as "key: message".
func (p Problem) String() string {
	if p.Key == "" {
		return p.Message
	}
	return p.Key + ": " + p.Message
}

// ValidationError reports every problem found in a configuration.
type ValidationError struct {
	// File is the configuration file, or "" for the built-in default.
	File     string
	Problems []Problem
}

// Error is one line: the file, the first problem, and how many more there
// are. Use Problems to print them all.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(sourceName(e.File))
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

// sourceName names a configuration source in messages.
func sourceName(file string) string {
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
// a quote or a space.
func (p path) String() string {
	var b strings.Builder
	for i, s := range p {
		if s.isIdx {
			fmt.Fprintf(&b, "[%d]", s.index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		if needsQuote(s.key) {
			b.WriteString(strconv.Quote(s.key))
		} else {
			b.WriteString(s.key)
		}
	}
	return b.String()
}

func needsQuote(k string) bool {
	if k == "" {
		return true
	}
	for _, r := range k {
		if r == '.' || r == '[' || r == ']' || r == '"' || r == '\'' || r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
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
