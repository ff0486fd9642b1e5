package main_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// bigFile writes a file of n incompressible bytes, with mode, on the host.
func bigFile(t *testing.T, n int, mode os.FileMode) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{7}).Read(b)
	p := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// A file of DefaultArchiveMin (32 MiB) or more moves through docker's
// archive endpoints by way of the worker's staging directory: it arrives
// whole, with its mode, owned by the uid the worker writes as (the
// sandbox's user, or the workflow's; never root, as docker cp's would
// be), through the same jail, and no staging directory is left behind.
func TestFilesBigOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	sb := strings.Replace(dockerSandbox("open"), "docker: {", "docker: {tmpfs: {/workspace/small: 1m}, ", 1)
	h := newDockerHost(t, cli, sb,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("agent.txt", "by the agent\n")}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	src, want := bigFile(t, 40<<20, 0o640)
	stat := func(args ...string) string {
		return strings.TrimSpace(h.mustAmelia(t, append([]string{"sandbox", "exec", "--", "stat", "-c", "%u %a %s"}, args...)...).stdout)
	}
	user := strings.TrimSpace(h.mustAmelia(t, "sandbox", "exec", "--", "id", "-u").stdout)
	// No staging directory, and so no archive copy, before the first big
	// file.
	if r := h.amelia(t, "sandbox", "exec", "--", "test", "-e", ".amelia/stage"); r.code == 0 {
		t.Fatal(".amelia/stage exists before any big file was copied")
	}

	h.mustAmelia(t, "sandbox", "cp", src, ":in.bin")
	if got := stat("in.bin"); got != user+" 640 41943040" {
		t.Errorf("in.bin: uid, mode and size %q, want %q", got, user+" 640 41943040")
	}
	if got := stat(".amelia/stage"); !strings.HasPrefix(got, user+" 1733 ") {
		t.Errorf(".amelia/stage: %q, want the sandbox's user's, mode 1733 (the archive copy was not used)", got)
	}
	out := t.TempDir()
	h.mustAmelia(t, "sandbox", "cp", ":in.bin", out)
	if got, err := os.ReadFile(filepath.Join(out, "in.bin")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("in.bin back on the host: %d bytes, %v; want the %d sent", len(got), err, len(want))
	}
	if fi, _ := os.Stat(filepath.Join(out, "in.bin")); fi == nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("in.bin on the host: mode %v, want 0640", fi.Mode())
	}
	// Into a directory, under its own name; over a file, replacing it.
	h.mustAmelia(t, "sandbox", "exec", "--", "mkdir", "d")
	h.mustAmelia(t, "sandbox", "cp", src, ":d/")
	h.mustAmelia(t, "sandbox", "cp", src, ":in.bin")
	if got := stat("d/big.bin"); got != user+" 640 41943040" {
		t.Errorf("d/big.bin: %q", got)
	}

	// The jail holds: a link out of the root is refused both ways, and
	// a big file onto a directory too.
	h.mustAmelia(t, "sandbox", "exec", "--", "ln", "-s", "/tmp", "escape")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"in through a link", []string{"cp", src, ":escape/x"}, "leads outside the allowed root"},
		{"file onto a directory", []string{"cp", src, ":d/big.bin/"}, "not a directory"},
		{"out of a missing file", []string{"cp", ":nope.bin", out}, "does not exist"},
		{"full disk", []string{"cp", src, ":small/"}, "the sandbox's disk is full; free space in the sandbox"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.amelia(t, append([]string{"sandbox"}, c.args...)...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 1 || !strings.Contains(lines[len(lines)-1], c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and a last line with %q", r.code, r.stderr, c.want)
			}
		})
	}
	if ls := h.mustAmelia(t, "sandbox", "exec", "--", "ls", "-A", "small", "/tmp").stdout; strings.Contains(ls, "big") || strings.Contains(ls, "amelia") || strings.Contains(ls, "\nx\n") {
		t.Errorf("after the refusals, small and /tmp hold:\n%s", ls)
	}

	// A workflow's: written as its uid.
	if r := h.amelia(t, "run", "--keep-worktree", "--workflow", "wf", "Write agent.txt."); r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	h.mustAmelia(t, "sandbox", "cp", "--workflow", "wf", src, ":host.bin")
	var entries []struct {
		Name string `json:"name"`
		UID  uint32 `json:"uid"`
		Mode uint32 `json:"mode"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal([]byte(h.mustAmelia(t, "sandbox", "ls", "--json", "--workflow", "wf", ".").stdout), &entries); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, e := range entries {
		uids[e.Name] = strconv.Itoa(int(e.UID))
		if e.Name == "host.bin" && (e.Mode != 0o640 || e.Size != 40<<20) {
			t.Errorf("host.bin: mode %o, size %d", e.Mode, e.Size)
		}
	}
	if uids["agent.txt"] == "" || uids["host.bin"] != uids["agent.txt"] || uids["host.bin"] == user || uids["host.bin"] == "0" {
		t.Errorf("owners: %v, the sandbox's user %s; want host.bin the workflow's uid, as agent.txt", uids, user)
	}
	wfOut := t.TempDir()
	h.mustAmelia(t, "sandbox", "cp", "--workflow", "wf", ":host.bin", wfOut)
	if got, err := os.ReadFile(filepath.Join(wfOut, "host.bin")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("host.bin back on the host: %d bytes, %v", len(got), err)
	}

	// Nothing staged is left behind.
	if ls := strings.TrimSpace(h.mustAmelia(t, "sandbox", "exec", "--", "ls", "-A", ".amelia/stage").stdout); ls != "" {
		t.Errorf(".amelia/stage holds after the copies:\n%s", ls)
	}
}

// A host killed in the middle of a big file's copy leaves no staging
// directory in the sandbox: the worker holds it for the length of its
// exec, which ends with the host (the plugin's stream breaks, and the
// exec is stopped or its stdin ends).
func TestFilesBigCopyHostKilledOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
	// 8 GiB of holes: a copy long enough to be caught in its middle.
	h.mustAmelia(t, "sandbox", "exec", "--", "truncate", "-s", "8G", "sparse.bin")
	ctr := "amelia-sandbox-" + h.sandboxName(t, "e2e")
	staged := func() string {
		return strings.TrimSpace(dockerExec(t, cli, ctr, "sh", "-c", "ls -A /workspace/.amelia/stage 2>/dev/null"))
	}
	cp := h.command("sandbox", "cp", ":sparse.bin", t.TempDir())
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cp.Wait() }()
	for staged() == "" {
		select {
		case err := <-ended:
			t.Fatalf("the copy ended (%v) before its staging directory was seen", err)
		default:
		}
	}
	if err := cp.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-ended
	for staged() != "" {
		if t.Context().Err() != nil {
			t.Fatal("the staging directory stayed after the host was killed")
		}
		time.Sleep(50 * time.Millisecond) // a poll on the condition, not a deadline
	}
	if r := h.amelia(t, "sandbox", "exec", "--", "stat", "-c", "%s", "sparse.bin"); strings.TrimSpace(r.stdout) != "8589934592" {
		t.Errorf("sparse.bin after the killed copy: %q %s", r.stdout, r.stderr)
	}
}
