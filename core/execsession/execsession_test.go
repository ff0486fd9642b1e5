package execsession_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/execsession"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// workerDir holds the worker TestMain built, under the name the docker
// provider puts into its image.
var workerDir string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerDir = dir
		_, err = testbin.BuildSandboxWorker(dir)
		return err
	}))
}

// runUser is a run's uid, as the workspace gives it (workspace.RunUser).
const runUser = "60100:60100"

// dockerSandbox starts a container of the docker provider for the test
// alone, removed when it ends, and returns the Execer into it.
func dockerSandbox(t *testing.T) sandboxexec.Execer {
	t.Helper()
	cli := dockertest.Engine(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	label := hex.EncodeToString(b)
	dockertest.RemoveContainers(t, cli, "amelia.execsession-test="+label)
	p := docker.New(docker.Options{Version: "test", WorkerDirs: []string{workerDir}})
	t.Cleanup(func() { p.Close() })
	sb, err := p.EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "t-execsession-" + label, Config: dockertest.Settings(nil)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkNone},
		Labels:     map[string]string{"amelia.execsession-test": label},
	})
	if err != nil {
		t.Fatalf("start a docker sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("remove the docker sandbox: %v", err)
		}
	})
	return sandboxexec.Bind(p, sb.Ref)
}

// run runs script (args as $1...) as user and returns its trimmed stdout;
// it fails the test unless the script exits 0.
func run(t *testing.T, ex sandboxexec.Execer, user, script string, args ...string) string {
	t.Helper()
	var out, stderr strings.Builder
	st, err := ex.Exec(t.Context(), sdk.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...), User: user},
		sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	if err != nil || st.Code != 0 {
		t.Fatalf("as %q: %q: %+v, %v: %s", user, script, st, err, stderr.String())
	}
	return strings.TrimSpace(out.String())
}

// parent prints the uid, the parent's pid and the parent's command line
// of the command; an exec's own command has no parent in the container.
const parent = `printf '%s %s ' "$(id -u)" "$PPID"; tr '\0' ' ' </proc/$PPID/cmdline 2>/dev/null || echo outside`

// A run user's commands share one session, the worker's mux as that uid;
// the agent's uid can signal it but not read its environment or streams;
// a killed session is started again; End ends it, and the uid's later
// commands are execs of their own.
func TestRunUserSession(t *testing.T) {
	direct := dockerSandbox(t)
	s := execsession.New(direct, image.WorkerPath, nil)
	t.Cleanup(func() { s.Close(context.Background()) })

	first := run(t, s, runUser, parent)
	second := run(t, s, runUser, parent)
	want := image.WorkerPath + " mux"
	if !strings.HasPrefix(first, "60100 ") || !strings.HasSuffix(first, want) || first != second {
		t.Fatalf("two commands as the run user: %q and %q, want uid 60100 under the same %q", first, second, want)
	}
	pid := strings.Fields(first)[1]

	// Another process of the uid (the agent's) cannot look into it.
	if got := run(t, direct, runUser, `cat /proc/$1/environ >/dev/null 2>&1 && echo read; ls /proc/$1/fd/ >/dev/null 2>&1 && echo listed; true`, pid); got != "" {
		t.Errorf("a process of the run's uid got into the session's worker: %q", got)
	}

	// Killed by the uid's agent, the session is started again.
	run(t, direct, runUser, `kill -KILL "$1"; while [ -d "/proc/$1" ]; do sleep 0.05; done`, pid)
	third := run(t, s, runUser, parent)
	if !strings.HasSuffix(third, want) || third == first {
		t.Errorf("after its worker was killed, a command as the run user: %q, want a new %q", third, want)
	}

	if err := s.End(t.Context(), runUser); err != nil {
		t.Fatal(err)
	}
	newPid := strings.Fields(third)[1]
	if got := run(t, direct, "root", `[ -d "/proc/$1" ] && tr '\0' ' ' </proc/$1/cmdline; true`, newPid); got != "" {
		t.Errorf("after End, the session's worker is still there: %q", got)
	}
	if got := run(t, s, runUser, parent); strings.Contains(got, "amelia-worker") {
		t.Errorf("after End, a command as the run user ran on a session: %q", got)
	}
	// The sandbox's user's commands never went through a session of ours.
	if got := run(t, s, "", "id -un"); got != "amelia" {
		t.Errorf("a command as the sandbox's user ran as %q", got)
	}
}

// The worker's typed requests run as the user asked for, on its session
// (the sandbox's user's nested in the provider's own) or, once End ended
// it, in an exec of their own; a bulky one, with its input, goes in an
// exec of its own too.
func TestSteps(t *testing.T) {
	direct := dockerSandbox(t)
	s := execsession.New(direct, image.WorkerPath, nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	owner := func(root string) string {
		return run(t, direct, "root", `stat -c %u "$1/.amelia-repo.lock"`, root)
	}
	step := func(user string, r workstep.Request, stdin string) {
		t.Helper()
		var stderr strings.Builder
		eio := sdk.ExecIO{Stderr: &stderr}
		if stdin != "" {
			eio.Stdin = strings.NewReader(stdin)
		}
		if st, err := s.Step(t.Context(), user, r, eio); err != nil || st.Code != 0 {
			t.Fatalf("step %s as %q: %+v %v: %s", r.Step(), user, st, err, stderr.String())
		}
	}
	sandboxUID := run(t, direct, "", "id -u")
	for _, tc := range []struct{ user, root, uid string }{{runUser, "/tmp/steps-uid", "60100"}, {"", "/workspace/steps", sandboxUID}} {
		step(tc.user, workstep.Refs{Root: tc.root, Repo: tc.root + "/repo"}, "")
		if got := owner(tc.root); got != tc.uid {
			t.Errorf("a step as %q made the lock as uid %s, want %s", tc.user, got, tc.uid)
		}
	}
	// The sandbox's user's session rides the provider's own session (an
	// interactive exec), not an exec of the engine's: its worker's parent
	// is the provider's session worker.
	const nested = `ps -eo pid=,ppid=,args= | awk '$3 ~ /amelia-worker$/ && $4 == "mux" { mux[$1] = 1; up[$1] = $2 }
END { for (p in mux) if (up[p] in mux) n++; print n + 0 }'`
	if got := run(t, direct, "root", nested); got != "1" {
		t.Errorf("%s sessions of the worker under another, want 1: the sandbox's user's under the provider's", got)
	}
	if err := s.End(t.Context(), runUser); err != nil {
		t.Fatal(err)
	}
	step(runUser, workstep.Refs{Root: "/tmp/steps-after-end", Repo: "/tmp/steps-after-end/repo"}, "")
	if got := owner("/tmp/steps-after-end"); got != "60100" {
		t.Errorf("after End, a step as the run user made the lock as uid %s", got)
	}
	// A bundle of one commit, made in the sandbox, received from stdin.
	var bundle strings.Builder
	if st, err := direct.Exec(t.Context(), sdk.ExecRequest{Argv: []string{"sh", "-c", `set -e
d=$(mktemp -d); cd "$d"; git init -q -b main; git -c user.name=a -c user.email=a@a commit -q --allow-empty -m one
git bundle create -q - main`}}, sdk.ExecIO{Stdout: &bundle}); err != nil || st.Code != 0 {
		t.Fatalf("make a bundle: %+v %v", st, err)
	}
	head := strings.TrimSpace(strings.Split(strings.SplitN(bundle.String(), "\n", 2)[1], " ")[0])
	step("", workstep.Receive{Root: "/workspace/steps", Repo: "/workspace/steps/repo", Bundle: true, Refs: []workstep.RefTip{{Name: "refs/heads/main", Oid: head}}}, bundle.String())
	if got := run(t, direct, "", `git -C /workspace/steps/repo rev-parse main`); got != head {
		t.Errorf("after the bulky step, main is %q, want %s", got, head)
	}
}
