package worker

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// stageDir is a workspace's .amelia/stage beside root (not made).
func stageDir(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".amelia"), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(ws, ".amelia", "stage")
}

// heldCall serves req, a staging request, whose worker holds what it
// stages while its stdin is open: it returns the answer, and then, which
// sends next on stdin (none: stdin just ends) and returns the exit code
// and the answer to next.
func heldCall(t *testing.T, root string, req fswire.Request) (fswire.Response, func(next *fswire.Request) (int, fswire.Response)) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- serveFiles(root, inR, outW, io.Discard, nil)
		outW.Close()
	}()
	go func() { _, _ = inW.Write(fswire.Line(req)) }()
	out := bufio.NewReader(outR)
	answer := func() fswire.Response {
		var resp fswire.Response
		if line, err := out.ReadBytes('\n'); err == nil {
			if err := json.Unmarshal(line, &resp); err != nil {
				t.Fatalf("answer %q: %v", line, err)
			}
		}
		return resp
	}
	first := answer()
	return first, func(next *fswire.Request) (int, fswire.Response) {
		if next != nil {
			go func() { _, _ = inW.Write(fswire.Line(*next)); inW.Close() }()
		} else {
			inW.Close()
		}
		resp := answer()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		return <-code, resp
	}
}

var place = &fswire.Request{Op: fswire.OpPlace}

// In: stage-in checks the destination and makes a private staging
// directory (the stage made 1733 on first use); what a provider puts
// there is renamed into place with the mode asked, and the staging
// directory goes.
func TestFilesStageIn(t *testing.T) {
	root, _ := fileTree(t)
	stage := stageDir(t)
	resp, then := heldCall(t, root, fswire.Request{Op: fswire.OpStageIn, Path: "dir", Into: "new.bin", Mode: 0o640, Stage: stage})
	if resp.Staged == nil || resp.Path != "dir/new.bin" {
		t.Fatalf("stage-in: %+v", resp)
	}
	if fi, err := os.Lstat(stage); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o733 {
		t.Fatalf("the stage: %v, %v; want a 1733 directory", fi.Mode(), err)
	}
	staged := filepath.Join(stage, resp.Staged.Name)
	if fi, err := os.Lstat(staged); err != nil || fi.Mode().Perm() != 0o700 || resp.Staged.UID != os.Geteuid() {
		t.Fatalf("the staging directory: %v, %v, uid %d", fi.Mode(), err, resp.Staged.UID)
	}
	// The provider puts the file.
	if err := os.WriteFile(filepath.Join(staged, fswire.StagedFile), []byte("staged bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, resp2 := then(place)
	if code != 0 || resp2.Path != "dir/new.bin" {
		t.Fatalf("place: exit %d, %+v", code, resp2)
	}
	b, err := os.ReadFile(filepath.Join(root, "dir", "new.bin"))
	fi, _ := os.Stat(filepath.Join(root, "dir", "new.bin"))
	if err != nil || string(b) != "staged bytes" || fi.Mode().Perm() != 0o640 {
		t.Errorf("placed: %q, %v, mode %v", b, err, fi.Mode())
	}
	if _, err := os.Lstat(staged); !os.IsNotExist(err) {
		t.Errorf("the staging directory is still there: %v", err)
	}
}

// Place refuses what is not a regular file of this uid's alone (a link
// put there, a hard link to another file), writes nothing, and removes
// the staging directory all the same; so does a stage-in whose host ends
// stdin without asking to place (its copy failed, or it died), or asks
// for anything else. Stage-in refuses what write would.
func TestFilesPlaceRefusals(t *testing.T) {
	half := func(t *testing.T, _, file string) {
		if err := os.WriteFile(file, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		put  func(t *testing.T, root, file string)
		next *fswire.Request // after stage-in (nil: stdin ends)
		want string          // in the answer to next ("": none)
	}{
		{"symlink", func(t *testing.T, root, file string) {
			if err := os.Symlink(filepath.Join(root, "file"), file); err != nil {
				t.Fatal(err)
			}
		}, place, "no file to place"},
		{"hard link", func(t *testing.T, root, file string) {
			if err := os.Link(filepath.Join(root, "file"), file); err != nil {
				t.Fatal(err)
			}
		}, place, "not a regular file of this uid's alone"},
		{"directory", func(t *testing.T, root, file string) {
			if err := os.Mkdir(file, 0o700); err != nil {
				t.Fatal(err)
			}
		}, place, "not a regular file"},
		{"stdin ends", half, nil, ""},
		{"not place", half, &fswire.Request{Op: fswire.OpRemove, Path: "file"}, "takes only a place request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, _ := fileTree(t)
			stage := stageDir(t)
			resp, then := heldCall(t, root, fswire.Request{Op: fswire.OpStageIn, Path: "new", Stage: stage})
			if resp.Staged == nil {
				t.Fatalf("stage-in: %+v", resp)
			}
			c.put(t, root, filepath.Join(stage, resp.Staged.Name, fswire.StagedFile))
			code, resp2 := then(c.next)
			if (code == 0) != (c.want == "") || !strings.Contains(resp2.Error, c.want) || (c.want == "") != (resp2.Error == "") {
				t.Errorf("exit %d, %+v; want a refusal with %q", code, resp2, c.want)
			}
			if _, err := os.Lstat(filepath.Join(root, "new")); !os.IsNotExist(err) {
				t.Errorf("new was written: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "file")); string(b) != "plain" {
				t.Errorf("file now holds %q", b)
			}
			if _, err := os.Lstat(filepath.Join(stage, resp.Staged.Name)); !os.IsNotExist(err) {
				t.Errorf("the staging directory is still there: %v", err)
			}
		})
	}
	root, _ := fileTree(t)
	stage := stageDir(t)
	if err := shared(filepath.Dir(stage), "stage"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  fswire.Request
		want string
	}{
		{"through a link", fswire.Request{Op: fswire.OpStageIn, Path: "out/x", Stage: stage}, "leads outside the allowed root"},
		{"onto a directory", fswire.Request{Op: fswire.OpStageIn, Path: "dir", Stage: stage}, "it is a directory"},
		{"not a stage", fswire.Request{Op: fswire.OpStageIn, Path: "x", Stage: "/etc"}, "is not a workspace's .amelia/stage"},
		{"place alone", fswire.Request{Op: fswire.OpPlace, Path: "x", Stage: stage}, "unknown file operation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, resp, _, _ := fileCall(t, root, c.req, nil)
			if code == 0 || !strings.Contains(resp.Error, c.want) {
				t.Errorf("exit %d, %+v; want %q", code, resp, c.want)
			}
		})
	}
}

// Out: pack with a stage stages a big regular file as a hard link to the
// very file it opened through the jail; a small one, a directory, or a
// path through a link out of the root is streamed or refused as before.
func TestFilesStageOut(t *testing.T) {
	root, _ := fileTree(t)
	stage := stageDir(t)
	resp, then := heldCall(t, root, fswire.Request{Op: fswire.OpPack, Path: "dir/link", Stage: stage, StageMin: 4})
	if resp.Staged == nil || resp.Entry == nil || resp.Entry.Name != "link" || resp.Entry.Size != 5 {
		t.Fatalf("pack: %+v", resp)
	}
	staged := filepath.Join(stage, resp.Staged.Name, fswire.StagedFile)
	var a, s syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "dir", "a"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(staged, &s); err != nil || s.Ino != a.Ino {
		t.Fatalf("staged while stdin is open: %v, inode %d; want a hard link to dir/a (%d)", err, s.Ino, a.Ino)
	}
	// The host is done (or gone): stdin ends, and the staging directory
	// goes.
	code, _ := then(nil)
	if _, err := os.Lstat(filepath.Dir(staged)); code != 0 || !os.IsNotExist(err) {
		t.Errorf("once stdin ended: exit %d; staging directory: %v", code, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "dir", "a")); string(b) != "alpha" {
		t.Errorf("dir/a after the staging: %q", b)
	}
	for _, c := range []struct {
		name string
		req  fswire.Request
		want string // in the stream, or the error
	}{
		{"small", fswire.Request{Op: fswire.OpPack, Path: "file", Stage: stage, StageMin: 100}, "plain"},
		{"directory", fswire.Request{Op: fswire.OpPack, Path: "dir/sub", Stage: stage, StageMin: 1}, "beta"},
		{"link out", fswire.Request{Op: fswire.OpPack, Path: "out/secret", Stage: stage, StageMin: 1}, "leads outside the allowed root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, resp, rest, _ := fileCall(t, root, c.req, nil)
			if resp.Staged != nil || !strings.Contains(string(rest)+resp.Error, c.want) {
				t.Errorf("%+v, %q; want no staging and %q", resp, rest, c.want)
			}
		})
	}
	if des, _ := os.ReadDir(stage); len(des) != 0 {
		t.Errorf("the stage holds %d entries", len(des))
	}
}
