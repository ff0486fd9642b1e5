package docker_test

import (
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// parentScript prints the pid and the command line of the command's
// parent; an exec's own command has none in the container (pid 0).
const parentScript = `printf '%s ' "$PPID"; tr '\0' ' ' </proc/$PPID/cmdline 2>/dev/null || echo outside`

// The sandbox user's commands run on one session, the worker's mux: two
// commands have the same parent, the image's worker; a command as another
// user is an exec of its own, which the worker (without capabilities)
// could not run, and so is one with input to stream, unless its input is
// interactive, or one whose output is bulk. When the session's worker
// dies, the next command starts a new one.
func TestCommandsShareASession(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))

	first := run(t, p, sb.Ref, "", "sh", "-c", parentScript)
	second := run(t, p, sb.Ref, "", "sh", "-c", parentScript)
	want := image.WorkerPath + " mux "
	if !strings.HasSuffix(first, want) || first != second {
		t.Fatalf("two commands' parents: %q and %q, want the same %q", first, second, want)
	}
	if got := run(t, p, sb.Ref, "root", "sh", "-c", parentScript); strings.Contains(got, "amelia-worker") {
		t.Errorf("a command as root ran under the worker: %q", got)
	}
	var out strings.Builder
	if st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "cat >/dev/null; " + parentScript}},
		sdk.ExecIO{Stdin: strings.NewReader("input"), Stdout: &out}); err != nil || st.Code != 0 || strings.Contains(out.String(), "amelia-worker") {
		t.Errorf("a command with input: %+v %v, its parent %q, want an exec of its own", st, err, out.String())
	}
	// Output said to be bulk gets an exec of its own too.
	out.Reset()
	if st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", parentScript}, Traffic: sdk.TrafficBulk},
		sdk.ExecIO{Stdout: &out}); err != nil || st.Code != 0 || out.Len() == 0 || strings.Contains(out.String(), "amelia-worker") {
		t.Errorf("a bulk command: %+v %v, its parent %q, want an exec of its own", st, err, out.String())
	}
	// Input that is a conversation (another session's frames) rides the
	// session: its parent is the worker, and the input gets there.
	out.Reset()
	if st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "cat; " + parentScript}, Traffic: sdk.TrafficMessages},
		sdk.ExecIO{Stdin: strings.NewReader("input "), Stdout: &out}); err != nil || st.Code != 0 || out.String() != "input "+first {
		t.Errorf("an interactive command: %+v %v, wrote %q, want %q (its input, then the session's worker as its parent)", st, err, out.String(), "input "+first)
	}
	if got := run(t, p, sb.Ref, "", "id", "-un"); got != "amelia\n" {
		t.Errorf("a command on the session runs as %q, want amelia", got)
	}

	// Root in the sandbox holds no CAP_KILL: the engine kills it as its
	// user, from an exec of the test's own.
	pid, _, _ := strings.Cut(first, " ")
	x, err := cli.ExecCreate(t.Context(), sb.Ref.ID, client.ExecCreateOptions{User: "amelia", Cmd: []string{"kill", "-KILL", pid}})
	if err == nil {
		_, err = cli.ExecStart(t.Context(), x.ID, client.ExecStartOptions{Detach: true})
	}
	if err != nil {
		t.Fatalf("kill the session's worker: %v", err)
	}
	waitGone(t, p, sb.Ref, pid)
	third := run(t, p, sb.Ref, "", "sh", "-c", parentScript)
	if !strings.HasSuffix(third, want) || third == first {
		t.Errorf("after its worker was killed, a command's parent is %q, want a new %q", third, want)
	}
}

// A container whose image has no worker gets an exec per command, as
// before sessions.
func TestNoWorkerNoSession(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	base := volumeImage(t, cli, p)
	tag := strings.Replace(base, "amelia-dockertest-volume:", "amelia-dockertest-noworker:", 1)
	dockertest.BuildImage(t, cli, tag, "FROM "+base+"\nUSER root\nRUN rm "+image.WorkerPath+"\nUSER amelia\n")
	sb := up(t, p, spec(t, dockertest.Settings(map[string]any{"image": tag}), sdk.NetworkOpen))
	for range 2 {
		if got := run(t, p, sb.Ref, "", "sh", "-c", parentScript); strings.Contains(got, "amelia-worker") {
			t.Errorf("a command ran under a worker the image does not have: %q", got)
		}
	}
}

// waitGone waits until process pid is gone from the sandbox (a zombie
// counts as gone), watching /proc from an exec as root.
func waitGone(t *testing.T, p *docker.Provider, ref sdk.SandboxRef, pid string) {
	t.Helper()
	script := `while [ -d "/proc/$1" ] && [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]; do sleep 0.05; done`
	run(t, p, ref, "root", "sh", "-c", script, "sh", pid)
}
