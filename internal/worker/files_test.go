package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// fileCall serves req (with body after it on stdin) in root and returns
// the exit code, the answer line, what followed it and stderr.
func fileCall(t *testing.T, root string, req fswire.Request, body []byte) (int, fswire.Response, []byte, string) {
	t.Helper()
	in := append(fswire.Line(req), body...)
	var out, errOut bytes.Buffer
	code := serveFiles(root, bytes.NewReader(in), &out, &errOut, nil)
	br := bufio.NewReader(&out)
	line, err := br.ReadBytes('\n')
	var resp fswire.Response
	if err == nil {
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("answer %q: %v", line, err)
		}
	}
	rest := new(bytes.Buffer)
	_, _ = rest.ReadFrom(br)
	return code, resp, rest.Bytes(), errOut.String()
}

// fileTree makes root/dir/a (0640), root/dir/sub/b, root/dir/link -> a,
// root/file, and root/out -> a directory outside root.
func fileTree(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "dir", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "dir", "a"), []byte("alpha"), 0o640))
	must(os.Chmod(filepath.Join(root, "dir", "a"), 0o640))
	must(os.WriteFile(filepath.Join(root, "dir", "sub", "b"), []byte("beta"), 0o755))
	must(os.Chmod(filepath.Join(root, "dir", "sub", "b"), 0o755))
	must(os.Symlink("a", filepath.Join(root, "dir", "link")))
	must(os.WriteFile(filepath.Join(root, "file"), []byte("plain"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "out")))
	return root, outside
}

// Bad requests each get one line that says what was wrong, and what is
// there stays as it was.
func TestFilesRefusals(t *testing.T) {
	root, outside := fileTree(t)
	tests := []struct {
		name string
		req  fswire.Request
		body string
		kind string
		want string
	}{
		{"missing", fswire.Request{Op: fswire.OpRead, Path: "nope"}, "", fswire.KindNotFound, `cannot read "nope": it does not exist; check the path`},
		{"dotdot", fswire.Request{Op: fswire.OpRead, Path: "../x"}, "", fswire.KindOutside, `path "../x" is outside the allowed root`},
		{"absolute outside", fswire.Request{Op: fswire.OpStat, Path: outside}, "", fswire.KindOutside, "is outside the allowed root"},
		{"symlink out read", fswire.Request{Op: fswire.OpRead, Path: "out/secret"}, "", fswire.KindOutside, "leads outside the allowed root"},
		{"symlink out write", fswire.Request{Op: fswire.OpWrite, Path: "out/new"}, "x", fswire.KindOutside, "leads outside the allowed root"},
		{"symlink out unpack", fswire.Request{Op: fswire.OpUnpack, Path: "out/tree"}, "", fswire.KindOutside, "leads outside the allowed root"},
		{"file onto dir", fswire.Request{Op: fswire.OpWrite, Path: "dir"}, "x", fswire.KindIsDir, `cannot write "dir": it is a directory`},
		{"dir onto file", fswire.Request{Op: fswire.OpUnpack, Path: "file"}, "", fswire.KindNotDir, `cannot copy a directory onto "file": it is a file`},
		{"no parent", fswire.Request{Op: fswire.OpWrite, Path: "none/x"}, "x", fswire.KindNotFound, `its directory "none" does not exist`},
		{"read dir", fswire.Request{Op: fswire.OpRead, Path: "dir"}, "", fswire.KindIsDir, "it is a directory"},
		{"remove full dir", fswire.Request{Op: fswire.OpRemove, Path: "dir"}, "", fswire.KindExists, "not empty"},
		{"remove root", fswire.Request{Op: fswire.OpRemove, Path: "."}, "", fswire.KindBadInput, "cannot remove the root"},
		{"unknown op", fswire.Request{Op: "chown", Path: "x"}, "", "", `unknown file operation "chown"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, resp, _, _ := fileCall(t, root, tt.req, []byte(tt.body))
			if code != exitFailed || resp.Kind != tt.kind || !strings.Contains(resp.Error, tt.want) || strings.Contains(resp.Error, "\n") {
				t.Fatalf("exit %d, answer %+v; want exit 1, kind %q, a line with %q", code, resp, tt.kind, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(root, "file")); string(b) != "plain" {
		t.Errorf("file holds %q after the refusals", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory outside holds %d entries, want only its secret", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "dir")); len(ents) != 3 {
		t.Errorf("dir holds %d entries after the refusals, want 3 (no temporary files left)", len(ents))
	}
}

// A write lands whole, with its mode, through a temporary file renamed
// into place; a read streams it back; stat, list and remove see it.
func TestFilesWriteReadListRemove(t *testing.T) {
	root, _ := fileTree(t)
	body := bytes.Repeat([]byte("0123456789"), 100_000)
	code, resp, _, _ := fileCall(t, root, fswire.Request{Op: fswire.OpWrite, Path: "dir/new", Mode: 0o600}, body)
	if code != 0 || resp.Path != "dir/new" {
		t.Fatalf("write: exit %d, %+v", code, resp)
	}
	fi, err := os.Stat(filepath.Join(root, "dir", "new"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != int64(len(body)) {
		t.Fatalf("written file: %v, %v", fi, err)
	}
	// Into a directory, under the name given; replacing keeps the mode.
	if code, resp, _, _ := fileCall(t, root, fswire.Request{Op: fswire.OpWrite, Path: "dir", Into: "a"}, []byte("new alpha")); code != 0 || resp.Path != "dir/a" {
		t.Fatalf("write into: exit %d, %+v", code, resp)
	}
	if fi, _ := os.Stat(filepath.Join(root, "dir", "a")); fi.Mode().Perm() != 0o640 {
		t.Errorf("replaced file has mode %v, want the one it replaced, 0640", fi.Mode())
	}
	code, resp, got, _ := fileCall(t, root, fswire.Request{Op: fswire.OpRead, Path: filepath.Join(root, "dir/new")}, nil)
	if code != 0 || !bytes.Equal(got, body) || resp.Entry == nil || resp.Entry.Size != int64(len(body)) || resp.Entry.Mode != 0o600 {
		t.Fatalf("read: exit %d, %+v, %d bytes", code, resp.Entry, len(got))
	}
	_, resp, _, _ = fileCall(t, root, fswire.Request{Op: fswire.OpList, Path: "dir"}, nil)
	var names []string
	for _, e := range resp.Entries {
		names = append(names, e.Name+":"+e.Type+":"+e.Target)
	}
	if want := "a:file:,link:symlink:a,new:file:,sub:dir:"; strings.Join(names, ",") != want {
		t.Errorf("list: %s, want %s", strings.Join(names, ","), want)
	}
	_, resp, _, _ = fileCall(t, root, fswire.Request{Op: fswire.OpStat, Path: "dir/link"}, nil)
	if resp.Entry == nil || resp.Entry.Type != fswire.TypeSymlink || resp.Entry.Target != "a" {
		t.Errorf("stat of a link: %+v", resp.Entry)
	}
	if code, _, _, _ := fileCall(t, root, fswire.Request{Op: fswire.OpRemove, Path: "dir", Recursive: true}, nil); code != 0 {
		t.Fatalf("remove -r: exit %d", code)
	}
	if _, err := os.Lstat(filepath.Join(root, "dir")); !os.IsNotExist(err) {
		t.Errorf("dir is still there: %v", err)
	}
}

// A tree packed in one root and unpacked into another comes out the same:
// contents, modes, links as links.
func TestFilesPackUnpack(t *testing.T) {
	root, _ := fileTree(t)
	code, resp, tarball, stderr := fileCall(t, root, fswire.Request{Op: fswire.OpPack, Path: "dir"}, nil)
	if code != 0 || resp.Entry == nil || resp.Entry.Type != fswire.TypeDir || resp.Entry.Name != "dir" {
		t.Fatalf("pack: exit %d, %+v, %s", code, resp, stderr)
	}
	dst := t.TempDir()
	if err := os.Mkdir(filepath.Join(dst, "into"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, resp, _, _ = fileCall(t, dst, fswire.Request{Op: fswire.OpUnpack, Path: "into", Into: "dir"}, tarball)
	if code != 0 || resp.Path != "into/dir" {
		t.Fatalf("unpack: exit %d, %+v", code, resp)
	}
	for _, c := range []struct {
		path string
		mode fs.FileMode
		body string
	}{{"a", 0o640, "alpha"}, {"sub/b", 0o755, "beta"}} {
		p := filepath.Join(dst, "into", "dir", c.path)
		fi, err := os.Stat(p)
		b, _ := os.ReadFile(p)
		if err != nil || fi.Mode().Perm() != c.mode || string(b) != c.body {
			t.Errorf("%s: %v %v %q", c.path, fi, err, b)
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "into", "dir", "link")); err != nil || target != "a" {
		t.Errorf("link: %q, %v", target, err)
	}
	// A file packs as its bytes.
	_, resp, got, _ := fileCall(t, root, fswire.Request{Op: fswire.OpPack, Path: "file"}, nil)
	if resp.Entry == nil || resp.Entry.Type != fswire.TypeFile || string(got) != "plain" {
		t.Errorf("pack of a file: %+v %q", resp.Entry, got)
	}
}
