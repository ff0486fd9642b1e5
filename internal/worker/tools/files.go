package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

const (
	defaultReadLimit = 2000
	maxLineChars     = 2000     // read_file cuts longer lines
	maxEditBytes     = 64 << 20 // edit_file refuses larger files
)

func (s *Set) ls(_ context.Context, raw json.RawMessage) Result {
	var a struct {
		Path *string `json:"path"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	rel, err := s.resolve(stringOr(a.Path, "."))
	if err != nil {
		return failure(err)
	}
	entries, err := s.readDir(rel)
	if err != nil {
		return failure(err)
	}
	if len(entries) == 0 {
		return Result{Output: fmt.Sprintf("Directory %s is empty.", slashRel(rel))}
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		name := e.Name()
		if rel != "." {
			name = slashRel(rel) + "/" + name
		}
		b.WriteString(name)
		if s.isDirEntry(name, e) {
			b.WriteByte('/')
		}
	}
	return Result{Output: b.String()}
}

// readDir lists the directory rel, sorted by name.
func (s *Set) readDir(rel string) ([]fs.DirEntry, error) {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, s.fsError("list", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, s.fsError("list", rel, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("cannot list %s: it is a file, not a directory; use read_file to read it", display(rel))
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, s.fsError("list", rel, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// isDirEntry reports whether e, at path name, is a directory or a symbolic
// link to one inside the working directory.
func (s *Set) isDirEntry(name string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	fi, err := s.root.Stat(name)
	return err == nil && fi.IsDir()
}

func (s *Set) readFile(_ context.Context, raw json.RawMessage) Result {
	var a struct {
		FilePath *string  `json:"file_path"`
		Offset   *float64 `json:"offset"`
		Limit    *float64 `json:"limit"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.FilePath == nil {
		return failure(missing("file_path"))
	}
	offset, err := intArg("offset", a.Offset, 0, 0)
	if err != nil {
		return failure(err)
	}
	limit, err := intArg("limit", a.Limit, defaultReadLimit, 1)
	if err != nil {
		return failure(err)
	}
	rel, err := s.resolve(*a.FilePath)
	if err != nil {
		return failure(err)
	}
	f, fi, err := s.openFile("read", rel)
	if err != nil {
		return failure(err)
	}
	defer f.Close()
	out, err := s.readLines(f, fi.Size(), rel, offset, limit)
	if err != nil {
		return failure(err)
	}
	return Result{Output: out}
}

// readLines formats lines offset+1 .. offset+limit of f, of about size
// bytes, like cat -n, stopping early, with a note saying how to go on, if
// the output would pass MaxOutputChars.
func (s *Set) readLines(f io.Reader, size int64, rel string, offset, limit int) (string, error) {
	br := s.getReader(f)
	defer s.putReader(br)
	binary, empty, err := isBinary(br)
	switch {
	case err != nil:
		return "", s.fsError("read", rel, err)
	case empty:
		return fmt.Sprintf("File %s exists but is empty.", slashRel(rel)), nil
	case binary:
		return "", fmt.Errorf("cannot read %s: it is a binary file (it contains NUL bytes); use execute with a tool such as xxd or file to inspect it", display(rel))
	}
	lr := lineReader{br: br, max: maxLineChars * utf8.UTFMax, s: s}
	defer lr.release()

	var b strings.Builder
	budget := MaxOutputChars - outputReserve
	b.Grow(int(min(size+size/4, int64(budget)*utf8.UTFMax)) + outputReserve)
	used, lineNo, shown := 0, 0, 0
	var numBuf [20]byte
	note := ""
	for {
		line, cut, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", s.fsError("read", rel, err)
		}
		lineNo++
		if lineNo <= offset {
			continue
		}
		if shown == limit {
			note = fmt.Sprintf("\n[showed lines %d-%d; the file has more: read on with offset=%d]", offset+1, lineNo-1, lineNo-1)
			break
		}
		if n := runeOffsetBytes(line, maxLineChars); n < len(line) {
			line, cut = line[:n], true
		}
		chars := utf8.RuneCount(line) + 8
		if shown > 0 && used+chars > budget {
			note = fmt.Sprintf("\n[output limit reached: showed lines %d-%d; read on with offset=%d]", offset+1, lineNo-1, lineNo-1)
			break
		}
		if shown > 0 {
			b.WriteByte('\n')
		}
		num := strconv.AppendInt(numBuf[:0], int64(lineNo), 10)
		for range 6 - len(num) {
			b.WriteByte(' ')
		}
		b.Write(num)
		b.WriteByte('\t')
		b.Write(line)
		if cut {
			b.WriteString(" [line cut at 2000 characters]")
			chars += 30
		}
		used += chars
		shown++
	}
	if shown == 0 {
		return "", fmt.Errorf("offset %d is past the end of %s, which has %d lines; use an offset below %d", offset, slashRel(rel), lineNo, lineNo)
	}
	b.WriteString(note)
	return b.String(), nil
}

func (s *Set) writeFile(_ context.Context, raw json.RawMessage) Result {
	var a struct {
		FilePath *string `json:"file_path"`
		Content  *string `json:"content"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.FilePath == nil {
		return failure(missing("file_path"))
	}
	if a.Content == nil {
		return failure(missing("content"))
	}
	rel, err := s.resolve(*a.FilePath)
	if err != nil {
		return failure(err)
	}
	if rel == "." {
		return errorf("file_path %q is the working directory itself; give the path of a file", *a.FilePath)
	}
	created, err := s.write(rel, []byte(*a.Content), true)
	if err != nil {
		return failure(err)
	}
	out := fmt.Sprintf("Wrote %d bytes to %s", len(*a.Content), slashRel(rel))
	if created {
		out += " (new file)"
	}
	return Result{Output: out}
}

// write replaces the content of the regular file rel, creating it (0o644)
// if it does not exist and, with mkdirs, its parent directories (0o755).
// An existing file keeps its mode. It reports whether the file was created.
func (s *Set) write(rel string, data []byte, mkdirs bool) (created bool, err error) {
	if fi, err := s.root.Stat(rel); err == nil {
		if fi.IsDir() {
			return false, fmt.Errorf("cannot write %s: it is a directory", display(rel))
		}
		if !fi.Mode().IsRegular() {
			return false, fmt.Errorf("cannot write %s: it is not a regular file (%v)", display(rel), fi.Mode().Type())
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		created = true
		if dir := filepath.Dir(rel); mkdirs && dir != "." {
			if err := s.root.MkdirAll(dir, 0o755); err != nil {
				return false, s.fsError("create the directory for", rel, err)
			}
		}
	} else {
		return false, s.fsError("write", rel, err)
	}
	f, err := s.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return false, s.fsError("write", rel, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, s.fsError("write", rel, err)
	}
	return created, nil
}

func (s *Set) editFile(_ context.Context, raw json.RawMessage) Result {
	var a struct {
		FilePath   *string `json:"file_path"`
		OldString  *string `json:"old_string"`
		NewString  *string `json:"new_string"`
		ReplaceAll *bool   `json:"replace_all"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	switch {
	case a.FilePath == nil:
		return failure(missing("file_path"))
	case a.OldString == nil:
		return failure(missing("old_string"))
	case a.NewString == nil:
		return failure(missing("new_string"))
	case *a.OldString == "":
		return errorf("old_string is empty; give the exact text to replace (use write_file to create a file or replace all of it)")
	case *a.OldString == *a.NewString:
		return errorf("old_string and new_string are the same, so the edit would change nothing")
	}
	rel, err := s.resolve(*a.FilePath)
	if err != nil {
		return failure(err)
	}
	data, err := s.readForEdit(rel)
	if err != nil {
		return failure(err)
	}
	old, repl := []byte(*a.OldString), []byte(*a.NewString)
	n := bytes.Count(data, old)
	switch {
	case n == 0:
		return errorf("old_string %s was not found in %s; read the file again and copy the text exactly, including whitespace and indentation%s",
			quotePrefix(*a.OldString), slashRel(rel), lineNumberHint(*a.OldString))
	case n > 1 && (a.ReplaceAll == nil || !*a.ReplaceAll):
		return errorf("old_string occurs %d times in %s; pass replace_all=true to replace every occurrence, or add surrounding lines to old_string so that it matches exactly once",
			n, slashRel(rel))
	}
	if _, err := s.write(rel, bytes.ReplaceAll(data, old, repl), false); err != nil {
		return failure(err)
	}
	if n == 1 {
		return Result{Output: fmt.Sprintf("Replaced 1 occurrence in %s", slashRel(rel))}
	}
	return Result{Output: fmt.Sprintf("Replaced %d occurrences in %s", n, slashRel(rel))}
}

// readForEdit reads all of the regular file rel.
func (s *Set) readForEdit(rel string) ([]byte, error) {
	f, fi, err := s.openFile("edit", rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > maxEditBytes {
		return nil, fmt.Errorf("cannot edit %s: it is %d bytes, more than edit_file handles (%d); use execute with sed or a script", display(rel), fi.Size(), maxEditBytes)
	}
	data := make([]byte, 0, fi.Size()+512)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if len(data) > maxEditBytes {
			return nil, fmt.Errorf("cannot edit %s: it is larger than edit_file handles (%d bytes); use execute with sed or a script", display(rel), maxEditBytes)
		}
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, s.fsError("edit", rel, err)
		}
	}
}

// quotePrefix quotes s, cut to its first 80 characters.
func quotePrefix(s string) string {
	const max = 80
	if n := runeOffset(s, max); n < len(s) {
		return strconv.Quote(s[:n]) + "..."
	}
	return strconv.Quote(s)
}

// lineNumberHint is a hint for an old_string that starts with the line
// number prefix that read_file shows.
func lineNumberHint(old string) string {
	t := strings.TrimLeft(old, " ")
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i > 0 && i < len(t) && t[i] == '\t' {
		return " (do not include the line numbers and tab that read_file puts before each line)"
	}
	return ""
}
