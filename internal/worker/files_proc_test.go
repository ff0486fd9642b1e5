package worker_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// A write stopped half way (the host cancelled: SIGTERM) leaves no
// temporary file, and the file it would have replaced as it was.
func TestFilesWriteStopped(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(workerBin, "files", "--root", root)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := stdin.Write(append(fswire.Line(fswire.Request{Op: fswire.OpWrite, Path: "f"}), "partial"...)); err != nil {
		t.Fatal(err)
	}
	// Wait for the temporary file, then stop the worker.
	for {
		ents, _ := os.ReadDir(root)
		if len(ents) == 2 {
			break
		}
		if t.Context().Err() != nil {
			t.Fatal("no temporary file appeared")
		}
		time.Sleep(time.Millisecond) // a poll on the condition, not a deadline
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ents, _ := os.ReadDir(root)
	if b, _ := os.ReadFile(filepath.Join(root, "f")); len(ents) != 1 || string(b) != "old" {
		t.Errorf("after the stop: %d entries, f holds %q; want only f, as it was", len(ents), b)
	}
}

// A worker holding a staging directory for the provider's copy that is
// stopped (the host cancelled: SIGTERM) removes it before it exits, and
// writes nothing in the root.
func TestFilesStagingStopped(t *testing.T) {
	for _, op := range []string{fswire.OpStageIn, fswire.OpPack} {
		t.Run(op, func(t *testing.T) {
			root, ws := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "f"), []byte("the file"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(ws, ".amelia"), 0o755); err != nil {
				t.Fatal(err)
			}
			stage := filepath.Join(ws, ".amelia", "stage")
			req := fswire.Request{Op: op, Path: "new", Stage: stage}
			if op == fswire.OpPack {
				req = fswire.Request{Op: op, Path: "f", Stage: stage, StageMin: 1}
			}
			cmd := exec.Command(workerBin, "files", "--root", root)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			if _, err := stdin.Write(fswire.Line(req)); err != nil {
				t.Fatal(err)
			}
			var resp fswire.Response
			line, err := bufio.NewReader(stdout).ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(line, &resp)
			}
			if err != nil || resp.Staged == nil {
				t.Fatalf("answer %q, %v; want a staging directory", line, err)
			}
			if _, err := os.Stat(filepath.Join(stage, resp.Staged.Name)); err != nil {
				t.Fatalf("the staging directory while held: %v", err)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if des, _ := os.ReadDir(stage); len(des) != 0 {
				t.Errorf("after the stop the stage holds %d entries", len(des))
			}
			if ents, _ := os.ReadDir(root); len(ents) != 1 {
				t.Errorf("after the stop the root holds %d entries, want only f", len(ents))
			}
		})
	}
}
