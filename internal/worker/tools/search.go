package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

const (
	maxGlobResults = 1000
	maxGrepLines   = 500     // content mode stops after this many matching lines
	maxGrepLine    = 500     // content mode cuts longer lines (characters)
	maxScanLine    = 1 << 20 // grep only looks at a line's first MiB
	grepBudget     = MaxOutputChars - outputReserve
)

// outputBuffer collects lines of a listing up to a byte budget; bytes
// bound characters, so what fits is never cut by Call.
type outputBuffer struct {
	b     strings.Builder
	lines int
	full  bool
}

// add appends line unless that would pass grepBudget; it reports whether
// line was added.
func (o *outputBuffer) add(line string) bool {
	if o.full || o.b.Len()+len(line)+1 > grepBudget {
		o.full = true
		return false
	}
	if o.lines > 0 {
		o.b.WriteByte('\n')
	}
	o.b.WriteString(line)
	o.lines++
	return true
}

func (s *Set) glob(ctx context.Context, raw json.RawMessage) Result {
	var a struct {
		Pattern *string `json:"pattern"`
		Path    *string `json:"path"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.Pattern == nil {
		return failure(missing("pattern"))
	}
	pattern, err := s.globPattern(*a.Pattern)
	if err != nil {
		return failure(err)
	}
	rel, err := s.resolve(stringOr(a.Path, "."))
	if err != nil {
		return failure(err)
	}
	if err := s.statDir("search", rel); err != nil {
		return failure(err)
	}
	matches, err := s.globWalk(ctx, rel, pattern)
	if err != nil {
		return failure(err)
	}
	if len(matches) == 0 {
		return Result{Output: fmt.Sprintf("No files match %q in %s.", pattern, display(rel))}
	}
	slices.Sort(matches)
	var out outputBuffer
	for _, m := range matches[:min(len(matches), maxGlobResults)] {
		if !out.add(m) {
			break
		}
	}
	if out.lines < len(matches) {
		out.b.WriteString(fmt.Sprintf("\n[showed %d of %d matching files; use a narrower pattern or path]", out.lines, len(matches)))
	}
	return Result{Output: out.b.String()}
}

// globPattern checks a glob pattern and makes it relative.
func (s *Set) globPattern(p string) (string, error) {
	if p == "" {
		return "", errors.New(`pattern is empty; give a glob pattern such as "**/*.go"`)
	}
	if strings.HasPrefix(p, "/") {
		// A model may prefix the working directory; anything else absolute
		// can never match paths under it.
		stripped := false
		for _, base := range s.cwdAlias {
			if rest, ok := strings.CutPrefix(p, base+"/"); ok {
				p, stripped = rest, true
				break
			}
		}
		if !stripped {
			return "", fmt.Errorf("pattern %q is absolute; give a pattern relative to path, such as \"**/*.go\"", p)
		}
	}
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	if !doublestar.ValidatePattern(p) {
		return "", fmt.Errorf("pattern %q is not a valid glob pattern; check its brackets, braces and escapes", p)
	}
	return p, nil
}

// globWalk returns the cwd-relative paths of the files (anything but
// directories) under rel whose path relative to rel matches pattern.
// Directories named .git and symbolic links to directories are not entered.
func (s *Set) globWalk(ctx context.Context, rel, pattern string) ([]string, error) {
	base := slashRel(rel)
	maxDepth := -1 // without "**", no match lies deeper than the pattern
	if !strings.Contains(pattern, "**") {
		maxDepth = strings.Count(pattern, "/") + 1
	}
	var matches []string
	err := fs.WalkDir(s.root.FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return err
			}
			return nil // unreadable below: skip it
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		sub := relTo(base, p)
		if d.IsDir() {
			if p != base && (d.Name() == ".git" || maxDepth >= 0 && depth(sub) >= maxDepth) {
				return fs.SkipDir
			}
			return nil
		}
		if doublestar.MatchUnvalidated(pattern, sub) {
			matches = append(matches, p)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("search cancelled: %w", ctx.Err())
		}
		return nil, s.fsError("search", rel, err)
	}
	return matches, nil
}

// relTo is p, a slash path under base, relative to base.
func relTo(base, p string) string {
	if base == "." {
		return p
	}
	if p == base {
		return "."
	}
	return p[len(base)+1:]
}

// depth is how many elements the slash path p has.
func depth(p string) int {
	if p == "." {
		return 0
	}
	return strings.Count(p, "/") + 1
}

const (
	modeFiles   = "files_with_matches"
	modeContent = "content"
	modeCount   = "count"
)

// grepper is one grep call's state.
type grepper struct {
	s       *Set
	re      *regexp.Regexp
	mode    string
	out     outputBuffer
	matches int // matching lines shown in content mode
	files   int // files with matches
	capped  bool
	lineBuf []byte
}

func (s *Set) grep(ctx context.Context, raw json.RawMessage) Result {
	var a struct {
		Pattern    *string `json:"pattern"`
		Path       *string `json:"path"`
		Glob       *string `json:"glob"`
		OutputMode *string `json:"output_mode"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.Pattern == nil {
		return failure(missing("pattern"))
	}
	g := &grepper{s: s, mode: stringOr(a.OutputMode, modeFiles)}
	switch g.mode {
	case modeFiles, modeContent, modeCount:
	default:
		return errorf("output_mode must be %q, %q or %q, not %q", modeFiles, modeContent, modeCount, g.mode)
	}
	re, err := regexp.Compile(*a.Pattern)
	if err != nil {
		return errorf("pattern %q is not a valid regular expression (%v); it uses Go RE2 syntax: escape special characters such as ( [ { . * + ? with a backslash, and lookaround and backreferences are not supported", *a.Pattern, err)
	}
	g.re = re
	glob := stringOr(a.Glob, "")
	if glob != "" && !doublestar.ValidatePattern(glob) {
		return errorf("glob %q is not a valid glob pattern; check its brackets, braces and escapes", glob)
	}
	rel, err := s.resolve(stringOr(a.Path, "."))
	if err != nil {
		return failure(err)
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return failure(s.fsError("search", rel, err))
	}
	if fi.IsDir() {
		err = g.walk(ctx, rel, glob)
	} else {
		err = g.file(rel, true)
	}
	if err != nil {
		return failure(err)
	}
	return Result{Output: g.result(*a.Pattern, rel)}
}

// walk searches the regular files under rel whose base name or
// cwd-relative path matches glob (all if glob is empty), skipping .git
// directories and symbolic links.
func (g *grepper) walk(ctx context.Context, rel, glob string) error {
	base := slashRel(rel)
	err := fs.WalkDir(g.s.root.FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return err
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if p != base && d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if glob != "" && !doublestar.MatchUnvalidated(glob, d.Name()) && !doublestar.MatchUnvalidated(glob, p) {
			return nil
		}
		if err := g.file(p, false); err != nil {
			return err
		}
		if g.capped {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("search cancelled: %w", ctx.Err())
		}
		return g.s.fsError("search", rel, err)
	}
	return nil
}

// file searches one file. Binary files are skipped, or refused if the
// model named the file itself (explicit); a file that cannot be read is
// skipped unless explicit.
func (g *grepper) file(rel string, explicit bool) error {
	f, _, err := g.s.openFile("search", rel)
	if err != nil {
		if explicit {
			return err
		}
		return nil
	}
	defer f.Close()
	br := g.s.getReader(f)
	defer g.s.putReader(br)
	binary, _, err := isBinary(br)
	if err != nil || binary {
		if explicit && binary {
			return fmt.Errorf("cannot search %s: it is a binary file (it contains NUL bytes)", display(rel))
		}
		if explicit {
			return g.s.fsError("search", rel, err)
		}
		return nil
	}
	lr := lineReader{br: br, max: maxScanLine, s: g.s}
	defer lr.release()
	path := slashRel(rel)
	count := 0
	for lineNo := 1; ; lineNo++ {
		line, _, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if explicit {
				return g.s.fsError("search", rel, err)
			}
			break
		}
		if !g.re.Match(line) {
			continue
		}
		count++
		if g.mode == modeFiles {
			break
		}
		if g.mode == modeContent && !g.addLine(path, lineNo, line) {
			break
		}
	}
	if count == 0 || g.capped {
		return nil
	}
	g.files++
	switch g.mode {
	case modeFiles:
		g.capped = !g.out.add(path)
	case modeCount:
		g.capped = !g.out.add(path + ":" + strconv.Itoa(count))
	}
	return nil
}

// addLine adds a content-mode match; it reports false once capped.
func (g *grepper) addLine(path string, lineNo int, line []byte) bool {
	if g.matches >= maxGrepLines {
		g.capped = true
		return false
	}
	b := g.lineBuf[:0]
	b = append(b, path...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(lineNo), 10)
	b = append(b, ':')
	if n := runeOffsetBytes(line, maxGrepLine); n < len(line) {
		b = append(b, line[:n]...)
		b = append(b, " [line cut]"...)
	} else {
		b = append(b, line...)
	}
	g.lineBuf = b
	if !g.out.add(string(b)) {
		g.capped = true
		return false
	}
	g.matches++
	return true
}

// result is the grep output with its closing note.
func (g *grepper) result(pattern, rel string) string {
	if g.out.lines == 0 && !g.capped {
		return fmt.Sprintf("No matches for %q in %s.", pattern, display(rel))
	}
	if g.capped {
		what := fmt.Sprintf("%d files", g.out.lines)
		if g.mode == modeContent {
			what = fmt.Sprintf("%d matching lines", g.out.lines)
		}
		g.out.b.WriteString(fmt.Sprintf("\n[results capped after %s; narrow the pattern, path or glob to see the rest]", what))
	}
	return g.out.b.String()
}
