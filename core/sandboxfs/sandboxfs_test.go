package sandboxfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxfs"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

var worker string

// The test binary doubles as the local provider plugin (sandboxtest):
// the library reaches the sandbox as amelia does, through the plugin and
// the worker built for the test.
func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		worker, err = testbin.BuildWorker(dir)
		return err
	}))
}

func newFS(t *testing.T) (*sandboxfs.FS, string) {
	t.Helper()
	sb := sandboxtest.New(t, "files")
	return sandboxfs.New(sb, worker, sb.Workdir), sb.Workdir
}

// WriteFile streams in, ReadFile streams out, the same bytes; Stat, List
// and Remove see what is there.
func TestReadWrite(t *testing.T) {
	f, root := newFS(t)
	ctx := t.Context()
	body := make([]byte, 8<<20+3)
	rand.Read(body)
	if p, err := f.WriteFile(ctx, "big", bytes.NewReader(body), 0o640); err != nil || p != "big" {
		t.Fatalf("WriteFile: %q, %v", p, err)
	}
	rc, e, err := f.ReadFile(ctx, filepath.Join(root, "big"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) || e.Size != int64(len(body)) || e.Mode != 0o640 {
		t.Fatalf("ReadFile: %d bytes, entry %+v, %v", len(got), e, err)
	}
	// Closing early stops the stream without an error.
	rc, _, err = f.ReadFile(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("early Close: %v", err)
	}
	ents, err := f.List(ctx, ".")
	if err != nil || len(ents) != 1 || ents[0].Name != "big" {
		t.Fatalf("List: %+v, %v", ents, err)
	}
	if err := f.Remove(ctx, "big", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(ctx, "big"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v, want fs.ErrNotExist", err)
	}
}

// A refused write says why in one line, even with much input still to
// send, and leaves what was there.
func TestRefusals(t *testing.T) {
	f, root := newFS(t)
	ctx := t.Context()
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	big := io.LimitReader(zeros{}, 64<<20)
	tmp := t.TempDir()
	if err := os.Mkdir(filepath.Join(tmp, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		do   func() error
		want string
	}{
		{"write onto a directory", func() error { _, err := f.WriteFile(ctx, "d", big, 0); return err }, `cannot write "d": it is a directory`},
		{"read missing", func() error { _, _, err := f.ReadFile(ctx, "nope"); return err }, `cannot read "nope": it does not exist`},
		{"dotdot", func() error { _, err := f.Stat(ctx, "../etc"); return err }, `path "../etc" is outside the allowed root`},
		{"link out", func() error { _, err := f.WriteFile(ctx, "out/x", strings.NewReader("x"), 0); return err }, "leads outside the allowed root"},
		{"dir onto file", func() error { _, err := f.CopyIn(ctx, filepath.Join(tmp, "tree"), "file"); return err }, `cannot copy a directory onto "file": it is a file`},
		{"host missing", func() error { _, err := f.CopyIn(ctx, filepath.Join(tmp, "nope"), "x"); return err }, "does not exist on this host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line with %q", err, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(root, "file")); string(b) != "keep" {
		t.Errorf("file holds %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("something was written outside: %v", ents)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A tree goes in and comes back out the same, as docker cp places it:
// into an existing directory under its own name, else at the path named.
// A link the sandbox made that leads out of the destination is written
// as a link, never followed.
func TestCopyInOut(t *testing.T) {
	f, root := newFS(t)
	ctx := t.Context()
	src := filepath.Join(t.TempDir(), "tree")
	for p, mode := range map[string]os.FileMode{"a": 0o600, "sub/b": 0o755, "sub/deep/c": 0o644} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755)
		if err := os.WriteFile(filepath.Join(src, p), []byte(p), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(src, p), mode)
	}
	os.Symlink("/etc", filepath.Join(src, "abs"))
	if p, err := f.CopyIn(ctx, src, "."); err != nil || p != "tree" {
		t.Fatalf("CopyIn into the root: %q, %v", p, err)
	}
	if p, err := f.CopyIn(ctx, src, "copy"); err != nil || p != "copy" {
		t.Fatalf("CopyIn to a new path: %q, %v", p, err)
	}
	if p, err := f.CopyIn(ctx, filepath.Join(src, "a"), "tree/sub/"); err != nil || p != "tree/sub/a" {
		t.Fatalf("CopyIn a file into a directory: %q, %v", p, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "copy", "sub", "b")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("copied file: %v, %v", fi, err)
	}
	out := t.TempDir()
	if p, err := f.CopyOut(ctx, "tree", out); err != nil || p != filepath.Join(out, "tree") {
		t.Fatalf("CopyOut: %q, %v", p, err)
	}
	for _, c := range []struct {
		path, body string
		mode       os.FileMode
	}{{"a", "a", 0o600}, {"sub/b", "sub/b", 0o755}, {"sub/deep/c", "sub/deep/c", 0o644}, {"sub/a", "a", 0o600}} {
		p, mode := c.path, c.mode
		fi, err := os.Stat(filepath.Join(out, "tree", p))
		b, _ := os.ReadFile(filepath.Join(out, "tree", p))
		if err != nil || fi.Mode().Perm() != mode || string(b) != c.body {
			t.Errorf("%s: %v %v %q", p, fi, err, b)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "tree", "abs")); err != nil || target != "/etc" {
		t.Errorf("link: %q %v", target, err)
	}
	// A file out, to a new name.
	if p, err := f.CopyOut(ctx, "tree/sub/b", filepath.Join(out, "b2")); err != nil || p != filepath.Join(out, "b2") {
		t.Fatalf("CopyOut a file: %q, %v", p, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "b2")); string(b) != "sub/b" {
		t.Errorf("b2 holds %q", b)
	}
	// A sandbox link to a directory, then a file "through" it: the host
	// writes neither outside the destination.
	victim := t.TempDir()
	os.MkdirAll(filepath.Join(root, "evil"), 0o755)
	os.Symlink(victim, filepath.Join(root, "evil", "esc"))
	os.WriteFile(filepath.Join(root, "evil", "f"), []byte("x"), 0o644)
	if _, err := f.CopyOut(ctx, "evil", out); err != nil {
		t.Fatalf("CopyOut evil: %v", err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("CopyOut wrote outside its destination: %v", ents)
	}
}

// hostile is a sandbox whose worker answers with what it likes.
type hostile struct{ answer string }

func (h hostile) Exec(_ context.Context, _ sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if eio.Stdin != nil {
		_, _ = io.Copy(io.Discard, eio.Stdin)
	}
	_, _ = io.WriteString(eio.Stdout, h.answer)
	return sdk.ExitStatus{}, nil
}

func (hostile) SandboxRef() sdk.SandboxRef { return sdk.SandboxRef{Name: "hostile"} }

// A sandbox that names what it sends with a path writes nothing outside
// the destination, and a short stream is an error, not a short file.
func TestCopyOutHostileWorker(t *testing.T) {
	parent := t.TempDir()
	dst := filepath.Join(parent, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, answer, want string }{
		{"dotdot name", `{"entry":{"name":"../evil","type":"file","mode":420,"size":3}}` + "\nabc", "not a file name"},
		{"slash name", `{"entry":{"name":"a/b","type":"file","mode":420,"size":3}}` + "\nabc", "not a file name"},
		{"short", `{"entry":{"name":"f","type":"file","mode":420,"size":10}}` + "\nabc", "3 of 10 bytes"},
		{"long", `{"entry":{"name":"f","type":"file","mode":420,"size":3}}` + "\nabcdef", "3 bytes more than it announced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := sandboxfs.New(hostile{c.answer}, "/w", "/root")
			_, err := f.CopyOut(t.Context(), "x", dst)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CopyOut: %v, want %q", err, c.want)
			}
		})
	}
	for _, d := range []string{parent, dst} {
		if ents, _ := os.ReadDir(d); len(ents) != map[string]int{parent: 1, dst: 0}[d] {
			t.Errorf("%s holds %v after the hostile copies", d, ents)
		}
	}
}

// hostArchiver is an sdk.Archiver for the local test sandbox, whose
// paths are this host's: it puts and gets one-file archives as docker's
// archive endpoints do. fail, if set, is what a copy meets instead.
type hostArchiver struct {
	fail func(ctx context.Context) error
}

func (a hostArchiver) PutArchive(ctx context.Context, _ sdk.SandboxRef, dir string, r io.Reader) error {
	if a.fail != nil {
		return a.fail(ctx)
	}
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(dir, h.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, h.FileInfo().Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, tr)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func (a hostArchiver) GetArchive(ctx context.Context, _ sdk.SandboxRef, path string, w io.Writer) error {
	if a.fail != nil {
		return a.fail(ctx)
	}
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.Base(path), Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, in); err != nil {
		return err
	}
	return tw.Close()
}

// Big files go through the provider's archive copy by way of a staging
// directory the worker holds for the copy: it is gone once the copy
// returns, whether it worked, failed, or was cancelled, and a failed
// copy writes nothing at its destination.
func TestCopyByArchiveLeavesNoStage(t *testing.T) {
	f, root := newFS(t)
	ctx := t.Context()
	f.Stage, f.ArchiveMin = filepath.Join(root, ".amelia", "stage"), 1
	if err := os.Mkdir(filepath.Join(root, ".amelia"), 0o755); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	src := filepath.Join(host, "big.bin")
	body := make([]byte, 3<<20+5)
	rand.Read(body)
	if err := os.WriteFile(src, body, 0o640); err != nil {
		t.Fatal(err)
	}
	stageEmpty := func(when string) {
		t.Helper()
		if des, err := os.ReadDir(f.Stage); err != nil || len(des) != 0 {
			t.Errorf("%s: the stage holds %d entries (%v)", when, len(des), err)
		}
	}
	f.Archive = hostArchiver{}
	if p, err := f.CopyIn(ctx, src, "in.bin"); err != nil || p != "in.bin" {
		t.Fatalf("CopyIn: %q, %v", p, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "in.bin")); !bytes.Equal(b, body) {
		t.Fatalf("CopyIn wrote %d bytes, want the %d of the file", len(b), len(body))
	}
	stageEmpty("after CopyIn")
	if p, err := f.CopyOut(ctx, "in.bin", filepath.Join(host, "out.bin")); err != nil {
		t.Fatalf("CopyOut: %q, %v", p, err)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "out.bin")); !bytes.Equal(b, body) {
		t.Fatalf("CopyOut wrote %d bytes, want the %d of the file", len(b), len(body))
	}
	stageEmpty("after CopyOut")

	for _, c := range []struct {
		name   string
		cancel bool // the caller's ctx ends in the middle of the archive copy
	}{{"failed", false}, {"cancelled", true}} {
		t.Run(c.name, func(t *testing.T) {
			// A copy whose provider's archive copy fails, or whose
			// caller cancels while it runs.
			failing := func() context.Context {
				cctx, cancel := context.WithCancel(ctx)
				t.Cleanup(cancel)
				f.Archive = hostArchiver{fail: func(actx context.Context) error {
					if !c.cancel {
						return errors.New("the engine said no")
					}
					cancel()
					<-actx.Done() // the caller's own ctx reaches the provider
					return actx.Err()
				}}
				return cctx
			}
			if _, err := f.CopyIn(failing(), src, "in2.bin"); err == nil {
				t.Error("CopyIn worked with a failing archive copy")
			}
			if _, err := os.Lstat(filepath.Join(root, "in2.bin")); !os.IsNotExist(err) {
				t.Errorf("a failed CopyIn wrote in2.bin: %v", err)
			}
			stageEmpty("after a failed CopyIn")
			if _, err := f.CopyOut(failing(), "in.bin", filepath.Join(host, "out2.bin")); err == nil {
				t.Error("CopyOut worked with a failing archive copy")
			}
			if ents, _ := os.ReadDir(host); len(ents) != 2 {
				t.Errorf("a failed CopyOut left %d entries on the host, want big.bin and out.bin", len(ents))
			}
			stageEmpty("after a failed CopyOut")
		})
	}
}
