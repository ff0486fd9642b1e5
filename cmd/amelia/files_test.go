package main_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// End-to-end tests of amelia sandbox cp, cat, put and ls PATH on every
// provider: files go in and out over the worker, and bad input gets one
// line saying what to do.

// ameliaIn runs amelia with stdin.
func (h *host) ameliaIn(t testing.TB, stdin []byte, args ...string) result {
	t.Helper()
	cmd := h.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errorsAs(err, &ee) {
		t.Fatalf("run amelia: %v", err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// mustAmelia runs amelia and fails the test unless it exits 0.
func (h *host) mustAmelia(t testing.TB, args ...string) result {
	t.Helper()
	r := h.amelia(t, args...)
	if r.code != 0 {
		t.Fatalf("amelia %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// hostTree makes a tree on the host: a/x (0600), a/run.sh (0755),
// a/deep/y, a/link -> x.
func hostTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "a")
	for _, f := range []struct {
		path, body string
		mode       os.FileMode
	}{{"x", "ex\n", 0o600}, {"run.sh", "#!/bin/sh\necho run\n", 0o755}, {"deep/y", strings.Repeat("why\n", 50_000), 0o644}} {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("x", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sameTree fails the test unless got holds want's files, modes and links.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	err := filepath.WalkDir(want, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		wi, _ := os.Lstat(p)
		gi, err := os.Lstat(filepath.Join(got, rel))
		if err != nil {
			t.Errorf("%s: missing from the copy: %v", rel, err)
			return nil
		}
		if wi.Mode() != gi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, gi.Mode(), wi.Mode())
		}
		switch {
		case wi.Mode().IsRegular():
			wb, _ := os.ReadFile(p)
			gb, _ := os.ReadFile(filepath.Join(got, rel))
			if !bytes.Equal(wb, gb) {
				t.Errorf("%s: %d bytes differ from the %d sent", rel, len(gb), len(wb))
			}
		case wi.Mode()&os.ModeSymlink != 0:
			wl, _ := os.Readlink(p)
			gl, _ := os.Readlink(filepath.Join(got, rel))
			if wl != gl {
				t.Errorf("%s: link to %q, want %q", rel, gl, wl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkFiles drives the file commands on h's profile's sandbox: a tree
// in and back out, a file put and read, a directory listed, and each
// refusal as one line that says what to do.
func checkFiles(t *testing.T, h *host) {
	t.Helper()
	src := hostTree(t)
	h.mustAmelia(t, "sandbox", "cp", src, ":")                            // into the workdir, as a
	h.mustAmelia(t, "sandbox", "cp", src, ":b")                           // to a new name
	h.mustAmelia(t, "sandbox", "cp", filepath.Join(src, "x"), ":b/deep/") // a file into a directory
	if r := h.ameliaIn(t, []byte("put\x00bytes\n"), "sandbox", "put", "--mode", "0640", "b/put.bin"); r.code != 0 {
		t.Fatalf("sandbox put: exit %d: %s", r.code, r.stderr)
	}
	if r := h.mustAmelia(t, "sandbox", "cat", "b/put.bin"); r.stdout != "put\x00bytes\n" {
		t.Errorf("sandbox cat: %q", r.stdout)
	}
	ls := h.mustAmelia(t, "sandbox", "ls", "b").stdout
	for _, want := range []string{"-rw-r-----", "put.bin", "drwxr-xr-x", "deep/", "-rwxr-xr-x", "run.sh", "link -> x"} {
		if !strings.Contains(ls, want) {
			t.Errorf("sandbox ls b has no %q:\n%s", want, ls)
		}
	}
	if js := h.mustAmelia(t, "sandbox", "ls", "--json", "b/deep").stdout; !strings.Contains(js, `"name": "x"`) || !strings.Contains(js, `"name": "y"`) {
		t.Errorf("sandbox ls --json b/deep:\n%s", js)
	}
	out := t.TempDir()
	h.mustAmelia(t, "sandbox", "cp", ":a", out)
	sameTree(t, src, filepath.Join(out, "a"))
	h.mustAmelia(t, "sandbox", "cp", ":b/deep/x", filepath.Join(out, "x2"))
	if b, _ := os.ReadFile(filepath.Join(out, "x2")); string(b) != "ex\n" {
		t.Errorf("x2 holds %q", b)
	}
	// A link in the sandbox that leads out of its root.
	h.mustAmelia(t, "sandbox", "exec", "--", "ln", "-s", "/etc", "escape")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing", []string{"cat", "nope.txt"}, 1, `cannot read "nope.txt": it does not exist; check the path`},
		{"dotdot", []string{"cp", src, ":../x"}, 1, `path "../x" is outside the allowed root`},
		{"symlink out", []string{"cat", "escape/passwd"}, 1, "leads outside the allowed root"},
		{"dir onto file", []string{"cp", src, ":b/put.bin"}, 1, `cannot copy a directory onto "b/put.bin": it is a file`},
		{"file onto dir", []string{"cp", filepath.Join(src, "x"), ":b/deep"}, 0, ""}, // into it, as docker cp
		{"both on the host", []string{"cp", src, out}, 2, "exactly one side must be in the sandbox"},
		{"host missing", []string{"cp", filepath.Join(out, "none"), ":"}, 1, "does not exist on this host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.amelia(t, append([]string{"sandbox"}, c.args...)...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			if r.code != c.code || c.want != "" && (!strings.Contains(last, c.want) || !strings.HasPrefix(last, "amelia: ")) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and a line with %q", r.code, r.stderr, c.code, c.want)
			}
		})
	}
	if r := h.mustAmelia(t, "sandbox", "cat", "b/put.bin"); r.stdout != "put\x00bytes\n" {
		t.Errorf("b/put.bin after the refusals: %q", r.stdout)
	}
}

func TestFilesOnLocal(t *testing.T) {
	checkFiles(t, newHost(t, llmtest.Options{}))
}

func TestFilesOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	checkFiles(t, h)
}

func TestFilesOnSSH(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{})
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
	checkFiles(t, h)
}

func TestFilesOnDaytona(t *testing.T) {
	cli := dockertest.Engine(t)
	f := daytonatest.Start(t, daytonatest.Options{Docker: cli})
	h := newHostWith(t, daytonaSandbox(t, f, "open"), "", llmtest.Options{})
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
	checkFiles(t, h)
}

func TestFilesOnKubernetes(t *testing.T) {
	c := k8stest.Start(t)
	h := newKubernetesHost(t, c, kubernetesSandbox(c, c.Namespace(t), "open", nil))
	checkFiles(t, h)
}

// A full disk in the sandbox (a small tmpfs) is one line that says so,
// and leaves no partial file behind.
func TestFilesFullDiskOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	sb := strings.Replace(dockerSandbox("open"), "docker: {", "docker: {tmpfs: {/workspace/small: 1m}, ", 1)
	h := newDockerHost(t, cli, sb)
	big := bytes.Repeat([]byte("full"), 1<<19) // 2 MiB
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stdin []byte
		args  []string
	}{
		{"put", big, []string{"sandbox", "put", "small/big"}},
		{"cp a tree", nil, []string{"sandbox", "cp", tree, ":small/"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.ameliaIn(t, c.stdin, c.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 1 || !strings.Contains(lines[len(lines)-1], "the sandbox's disk is full; free space in the sandbox") {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
		})
	}
	// Nothing half-written stays: the put's temporary file went.
	if ls := h.mustAmelia(t, "sandbox", "exec", "--", "ls", "-A", "small").stdout; strings.Contains(ls, ".tmp") || strings.Contains(ls, "big\n") && !strings.Contains(ls, "tree") {
		t.Errorf("small holds after the failures:\n%s", ls)
	}
}

// With --workflow, paths are the workflow's checkout's, and what is
// written there is the workflow's uid's, as its agent's files are.
func TestFilesOfAWorkflowOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("agent.txt", "by the agent\n")}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	if r := h.amelia(t, "run", "--keep-worktree", "--workflow", "wf", "Write agent.txt."); r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if r := h.mustAmelia(t, "sandbox", "cat", "--workflow", "wf", "agent.txt"); r.stdout != "by the agent\n" {
		t.Errorf("cat --workflow: %q", r.stdout)
	}
	if r := h.ameliaIn(t, []byte("by the host\n"), "sandbox", "put", "--workflow", "wf", "host.txt"); r.code != 0 {
		t.Fatalf("put --workflow: exit %d: %s", r.code, r.stderr)
	}
	var entries []struct {
		Name string `json:"name"`
		UID  uint32 `json:"uid"`
	}
	if err := json.Unmarshal([]byte(h.mustAmelia(t, "sandbox", "ls", "--json", "--workflow", "wf", ".").stdout), &entries); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, e := range entries {
		uids[e.Name] = strconv.Itoa(int(e.UID))
	}
	user := strings.TrimSpace(h.mustAmelia(t, "sandbox", "exec", "--", "id", "-u").stdout)
	if uids["agent.txt"] == "" || uids["host.txt"] != uids["agent.txt"] || uids["host.txt"] == user {
		t.Errorf("owners: %v, the sandbox's user %s; want host.txt the workflow's uid, as agent.txt", uids, user)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "cat", "--workflow", "wf", "../../.amelia-run.lock"}, "is outside the allowed root"},
		{[]string{"sandbox", "cat", "--workflow", "nope", "x"}, "workflow nope has no checkout in the sandbox"},
		{[]string{"sandbox", "ls", "--workflow", "wf"}, "give a PATH in the checkout"},
	} {
		if r := h.amelia(t, c.args...); r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("amelia %s: exit %d, stderr:\n%s\nwant %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}
