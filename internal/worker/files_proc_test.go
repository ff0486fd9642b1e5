package worker_test

import (
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
