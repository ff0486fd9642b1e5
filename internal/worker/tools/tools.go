// Package tools is what the in-sandbox coding agent (amelia-worker agentic)
// offers the model: ls, read_file, write_file, edit_file, glob, grep,
// execute and write_todos, with the names and arguments of LangChain
// DeepAgents so transcripts read the same.
//
// Every tool acts inside one working directory. Path arguments are checked
// lexically first, so the model gets a clear message, and every file access
// then goes through an [os.Root], so that symbolic links (or races on them)
// cannot lead outside. execute runs bash in that directory and kills the
// command's whole process group when it ends, times out or is cancelled.
//
// The package is meant for Linux (the sandbox); it builds on other Unix
// systems with a weaker execute (see proc_unix.go).
package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Definition is a tool as the model sees it.
type Definition struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema object
}

// Result is what a tool call gives back to the model.
type Result struct {
	Output  string // valid UTF-8, at most MaxOutputChars characters plus the truncation marker
	IsError bool
}

// MaxOutputChars is the most characters (runes) of a Result's Output before
// Call cuts it and appends a truncation marker.
const MaxOutputChars = 10000

// outputReserve is kept free below MaxOutputChars by tools that stop early
// on their own (read_file, grep, glob, execute), for their closing note, so
// that Call never has to cut that note off.
const outputReserve = 300

// Options tunes a Set. The zero value is usable.
type Options struct {
	Logger         *slog.Logger  // nil: discard
	DefaultTimeout time.Duration // execute's default; 0 means 120s
	MaxTimeout     time.Duration // cap for the timeout argument; 0 means 1h
}

const (
	defaultTimeout = 120 * time.Second
	maxTimeout     = time.Hour
)

// Set is the tools bound to one working directory. It is safe for
// concurrent use.
type Set struct {
	cwd      string   // absolute, cleaned; shown to the model and used by execute
	cwdAlias []string // absolute forms of cwd accepted in path arguments
	root     *os.Root
	log      *slog.Logger

	defaultTimeout time.Duration
	maxTimeout     time.Duration

	defs    []Definition
	runners map[string]runner

	readers sync.Pool // *bufio.Reader, for read_file and grep
	lineBuf sync.Pool // *[]byte, for lines longer than a reader's buffer

	mu    sync.Mutex
	todos []todo
}

// runner is one tool's implementation. Its Result is finished by Call.
type runner func(ctx context.Context, args json.RawMessage) Result

// New opens the tools on cwd, which must exist and be a directory.
func New(cwd string, opts Options) (*Set, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return nil, fmt.Errorf("resolve working directory %q: %w", cwd, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open working directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open working directory: %s is not a directory", abs)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("open working directory: %w", err)
	}
	s := &Set{
		cwd:            abs,
		cwdAlias:       []string{abs},
		root:           root,
		log:            opts.Logger,
		defaultTimeout: opts.DefaultTimeout,
		maxTimeout:     opts.MaxTimeout,
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		s.cwdAlias = append(s.cwdAlias, real)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxTimeout <= 0 {
		s.maxTimeout = maxTimeout
	}
	if s.defaultTimeout <= 0 {
		s.defaultTimeout = defaultTimeout
	}
	s.defaultTimeout = min(s.defaultTimeout, s.maxTimeout)
	s.readers.New = func() any { return bufio.NewReaderSize(nil, readerSize) }
	s.lineBuf.New = func() any { b := make([]byte, 0, readerSize); return &b }
	if err := s.buildTools(); err != nil {
		root.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the working directory. Calls after Close fail.
func (s *Set) Close() error {
	return s.root.Close()
}

// Definitions returns the tools in a stable order: ls, read_file,
// write_file, edit_file, glob, grep, execute, write_todos.
func (s *Set) Definitions() []Definition {
	return append([]Definition(nil), s.defs...)
}

// Call runs the tool name with args, a JSON object. Every failure is a
// Result with IsError set and a message for the model; Output is valid
// UTF-8 and cut to MaxOutputChars characters.
func (s *Set) Call(ctx context.Context, name string, args json.RawMessage) (res Result) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("tool panicked", "tool", name, "panic", p, "stack", string(debug.Stack()))
			res = errorf("internal error in tool %s: %v", name, p)
		}
		res = finish(res)
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.DebugContext(ctx, "tool call", "tool", name, "is_error", res.IsError,
				"output_chars", len(res.Output), "duration", time.Since(start))
		}
	}()
	run, ok := s.runners[name]
	if !ok {
		return errorf("unknown tool %q; the tools are %s", name, s.toolNames())
	}
	return run(ctx, args)
}

func (s *Set) toolNames() string {
	names := make([]string, len(s.defs))
	for i, d := range s.defs {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

// errorf is a failed Result with a message for the model.
func errorf(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true}
}

// failure is a failed Result carrying err's message.
func failure(err error) Result {
	return Result{Output: err.Error(), IsError: true}
}

// finish makes res.Output valid UTF-8 and at most MaxOutputChars runes
// followed by a truncation marker.
func finish(res Result) Result {
	if !utf8.ValidString(res.Output) {
		res.Output = strings.ToValidUTF8(res.Output, "\uFFFD")
	}
	if len(res.Output) <= MaxOutputChars { // bytes bound runes
		return res
	}
	total := utf8.RuneCountInString(res.Output)
	if total <= MaxOutputChars {
		return res
	}
	cut := runeOffset(res.Output, MaxOutputChars)
	res.Output = fmt.Sprintf("%s\n[output truncated: showed %d of %d characters]",
		res.Output[:cut], MaxOutputChars, total)
	return res
}

// runeOffset returns the byte offset in s after its first n runes, or
// len(s) if s is shorter.
func runeOffset(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	count := 0
	for i := range s {
		if count == n {
			return i
		}
		count++
	}
	return len(s)
}

// runeOffsetBytes is runeOffset for a byte slice.
func runeOffsetBytes(b []byte, n int) int {
	if len(b) <= n {
		return len(b)
	}
	count := 0
	for i := range string(b) { // does not copy b
		if count == n {
			return i
		}
		count++
	}
	return len(b)
}
