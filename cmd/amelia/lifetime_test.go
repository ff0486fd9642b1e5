package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// End-to-end tests of sandbox.idle_timeout and sandbox.max_lifetime: the
// sandbox's watchdog stops it with no host process running, never while
// an agent runs, and kept work survives the stop for amelia results.

// testIdle is the profiles' idle_timeout here: short, yet longer than the
// pause between two of a run's commands on a loaded machine.
const testIdle = 6 * time.Second

// withLifetime adds idle_timeout and max_lifetime to a sandbox block
// (YAML flow style).
func withLifetime(block, idle, maxLife string) string {
	return strings.Replace(block, "{", "{idle_timeout: "+idle+", max_lifetime: "+maxLife+", ", 1)
}

// lifetimeCase is a provider under test: a host whose e2e profile has
// the given lifetime and whose LLM plays turns, and how to tell, from the
// provider's side alone (no amelia running), that its sandbox stopped
// and kept its files.
type lifetimeCase struct {
	name string
	// idle is the case's idle_timeout: testIdle unless its commands take
	// longer to come.
	idle time.Duration
	host func(t *testing.T, idle, maxLife string, turns ...llmtest.Turn) (h *host, stopped func() bool)
}

func lifetimeCases() []lifetimeCase {
	return []lifetimeCase{
		{name: "docker", idle: testIdle, host: func(t *testing.T, idle, maxLife string, turns ...llmtest.Turn) (*host, func() bool) {
			cli := dockertest.Engine(t)
			h := newDockerHost(t, cli, withLifetime(dockerSandbox("open"), idle, maxLife), turns...)
			name := "amelia-sandbox-" + h.sandboxName(t, "e2e")
			return h, func() bool {
				// Stopped, not removed: the container and its volume stay.
				res, err := cli.ContainerInspect(t.Context(), name, client.ContainerInspectOptions{})
				if err != nil {
					t.Fatalf("the stopped sandbox's container: %v", err)
				}
				return res.Container.State.Status == "exited"
			}
		}},
		{name: "ssh", idle: testIdle, host: func(t *testing.T, idle, maxLife string, turns ...llmtest.Turn) (*host, func() bool) {
			srv := sshtest.Start(t, sshtest.Options{})
			root := t.TempDir()
			h := newHostWith(t, withLifetime(sshSandbox(t, srv, root), idle, maxLife), root, llmtest.Options{}, turns...)
			t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
			dir := filepath.Join(root, h.sandboxName(t, "e2e"))
			return h, func() bool {
				_, err := os.Stat(filepath.Join(dir, "workspace", lifetime.Dir, lifetime.StoppedFile))
				return err == nil && len(sandboxProcesses(dir)) == 0
			}
		}},
		// Longer than testIdle: each of a run's commands is an exec
		// through the API server, on a loaded machine.
		{name: "kubernetes", idle: 15 * time.Second, host: func(t *testing.T, idle, maxLife string, turns ...llmtest.Turn) (*host, func() bool) {
			c := k8stest.Start(t)
			ns := c.Namespace(t)
			h := newKubernetesHost(t, c, withLifetime(kubernetesWithVolume(t, c, ns), idle, maxLife), turns...)
			return h, podEnded(t, c, ns)
		}},
	}
}

// kubernetesWithVolume is the e2e profile's sandbox block on the
// cluster, in namespace ns, with its workspace on a claim of a class of
// the test's: the kind of kubernetes sandbox that stops by itself.
func kubernetesWithVolume(t *testing.T, c *k8stest.Cluster, ns string) string {
	return kubernetesSandbox(c, ns, "open", map[string]any{"api": "agent-sandbox",
		"workspace_volume": map[string]any{"size": "1Gi", "storage_class": c.StorageClass(t)}})
}

// podEnded says, from the cluster's side, whether the one pod of the
// sandbox in ns ended (the watchdog's stop); the claim with the workspace
// must still be there.
func podEnded(t *testing.T, c *k8stest.Cluster, ns string) func() bool {
	client := c.Client(t)
	return func() bool {
		list, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"})
		if err != nil {
			t.Fatalf("the sandbox's pods: %v", err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("the sandbox has %d pods, want its one", len(list.Items))
		}
		if ph := list.Items[0].Status.Phase; ph != corev1.PodSucceeded && ph != corev1.PodFailed {
			return false
		}
		claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(claims.Items) != 1 {
			t.Fatalf("the stopped sandbox's claims: %v, %v; want its workspace's", claims, err)
		}
		return true
	}
}

// sandboxProcesses are the processes of this machine tagged with an ssh
// sandbox's directory.
func sandboxProcesses(dir string) []string {
	var out []string
	m, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range m {
		env, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for kv := range strings.SplitSeq(string(env), "\x00") {
			if kv == "AMELIA_SANDBOX_DIR="+dir {
				out = append(out, filepath.Base(filepath.Dir(f)))
			}
		}
	}
	return out
}

// e2eRow is what sandbox ls --json says of the e2e profile's sandbox.
type e2eRow struct {
	Profile        string            `json:"profile"`
	State          string            `json:"state"`
	Lifetime       *lifetime.Status  `json:"lifetime"`
	WorkflowStates map[string]string `json:"workflow_states"`
}

func lsE2E(t *testing.T, h *host) e2eRow {
	t.Helper()
	r := h.amelia(t, "sandbox", "ls", "--json")
	var rows []e2eRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("sandbox ls --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	for _, row := range rows {
		if row.Profile == "e2e" {
			return row
		}
	}
	t.Fatalf("sandbox ls --json shows no e2e sandbox:\n%s", r.stdout)
	return e2eRow{}
}

// lsLifetime is the e2e sandbox's state and its watchdog's status.
func lsLifetime(t *testing.T, h *host) (string, *lifetime.Status) {
	t.Helper()
	row := lsE2E(t, h)
	return row.State, row.Lifetime
}

// An idle sandbox stops by itself with no host process running, keeping
// the kept work of an interrupted run, which amelia results brings back;
// a sandbox whose agent runs, its host dead, is not stopped past the idle
// timeout; sandbox ls, asked all along, is no activity.
func TestIdleSandboxStopsKeepingWork(t *testing.T) {
	for _, c := range lifetimeCases() {
		t.Run(c.name, func(t *testing.T) {
			kept, busy := newGate(t), newGate(t)
			h, stopped := c.host(t, c.idle.String(), "off", gatedTurns(busy)...)

			// Kept work: a run interrupted while its agent waits.
			r := h.startUntil(t, kept.path, "run", "--json", "--model", "scripted:"+gatedScript(t, kept), "--workflow", "kept", "keep this")
			if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(t, "Ctrl-C"); code != 130 {
				t.Fatalf("exit %d after Ctrl-C, want 130; stderr: %s", code, r.stderr.String())
			}

			// An agent whose host died runs on, well past the idle timeout.
			h.orphan(t, busy, "busy")
			died := time.Now()
			sharedtest.Stop(t, h.tmp)
			waitUntil(t, func() bool {
				state, lt := lsLifetime(t, h)
				if state != "ready" || lt == nil {
					t.Fatalf("with its agent running the sandbox is %s (lifetime %+v)", state, lt)
				}
				return lt.Busy && lt.LastActivity.After(died.Add(c.idle+time.Second))
			}, "the agent to run past the idle timeout")
			if stopped() {
				t.Fatal("the sandbox stopped while its agent ran")
			}
			after, _ := h.attach(t, busy, h.repo, "busy")
			h.deliveredDespite(t, "busy", after)

			// Now idle, with no host process at all, sandbox ls asking
			// all along (through the shared plugin it starts again): it
			// stops by itself.
			sharedtest.Stop(t, h.tmp)
			waitUntil(t, func() bool { lsE2E(t, h); return stopped() }, "the idle sandbox to stop, sandbox ls asking all along")
			if state, _ := lsLifetime(t, h); state != "stopped" {
				t.Errorf("sandbox ls says the stopped sandbox is %s", state)
			}
			res := h.amelia(t, "results", "kept")
			if res.code != 0 || !strings.Contains(res.stdout, "branch amelia/kept") {
				t.Fatalf("amelia results after the stop: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
			}
			if got := h.git(t, "show", "amelia/kept:before.txt"); got != "before the fault" {
				t.Errorf("before.txt on the brought-back branch: %q", got)
			}
			state, lt := lsLifetime(t, h)
			if state != "ready" || lt == nil || lt.Watchdog != "running" || lt.Decided == nil || lt.Decided.Reason != lifetime.ReasonIdle {
				t.Fatalf("after amelia results the sandbox is %s with lifetime %+v; want it running again, its stop on record as idle", state, lt)
			}
			if d := lt.Decided; d.At.Sub(d.Idle) < c.idle {
				t.Errorf("stopped at %v, idle since %v: sooner than the idle timeout", d.At, d.Idle)
			}
		})
	}
}

// Past max_lifetime a sandbox whose agent runs goes on until the agent
// ends and its host has brought the work back, then stops, however
// recent its activity; idle_timeout is off.
func TestMaxLifetimeStopsAfterTheWork(t *testing.T) {
	const life = 8 * time.Second
	for _, c := range lifetimeCases() {
		t.Run(c.name, func(t *testing.T) {
			busy := newGate(t)
			h, stopped := c.host(t, "off", life.String(), gatedTurns(busy)...)
			h.orphan(t, busy, "busy")
			sharedtest.Stop(t, h.tmp)
			waitUntil(t, func() bool {
				state, lt := lsLifetime(t, h)
				if state != "ready" || lt == nil || lt.Reason != lifetime.ReasonLifetime {
					t.Fatalf("with its agent running the sandbox is %s (lifetime %+v)", state, lt)
				}
				return lt.Busy && lt.LastActivity.After(lt.StopsAt.Add(time.Second))
			}, "the agent to run past the lifetime")
			if stopped() {
				t.Fatal("the sandbox stopped while its agent ran")
			}
			// The host that brings the work back is held up (SIGSTOP)
			// from the agent's last words on: the sandbox, past its
			// lifetime, waits for it, however long the pause.
			after, _ := h.attachPausing(t, busy, h.repo, "busy", func() {
				waitUntil(t, func() bool { return lsE2E(t, h).WorkflowStates["busy"] != "running" }, "the agent to end")
				ended := time.Now()
				waitUntil(t, func() bool {
					state, lt := lsLifetime(t, h)
					if state != "ready" || lt == nil {
						t.Fatalf("with its host about to bring the work back the sandbox is %s (lifetime %+v)", state, lt)
					}
					return lt.Busy && lt.LastActivity.After(ended.Add(life/4+time.Second))
				}, "the watchdog to find the sandbox busy past the quiet spell after the agent's end")
			})
			h.deliveredDespite(t, "busy", after)
			sharedtest.Stop(t, h.tmp)
			waitUntil(t, stopped, "the sandbox past its lifetime to stop")
			if r := h.amelia(t, "sandbox", "up"); r.code != 0 {
				t.Fatalf("sandbox up: exit %d: %s", r.code, r.stderr)
			}
			if _, lt := lsLifetime(t, h); lt == nil || lt.Decided == nil || lt.Decided.Reason != lifetime.ReasonLifetime {
				t.Errorf("the stop is on record as %+v, want lifetime", lt)
			}
		})
	}
}

// On Daytona, its auto-stop, set from idle_timeout, stops the idle
// sandbox (the fake's minute lasts 5 s: idle_timeout 1m is 5 s there)
// with no host process running; it is stopped, not deleted, and amelia
// results starts it and brings the interrupted run's kept work back.
func TestIdleDaytonaStopsKeepingWork(t *testing.T) {
	cli := dockertest.Engine(t)
	f := daytonatest.Start(t, daytonatest.Options{Docker: cli, Minute: 5 * time.Second})
	kept := newGate(t)
	h := newHostWith(t, withLifetime(daytonaSandbox(t, f, "open"), "1m", "off"), "", llmtest.Options{})
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })

	r := h.startUntil(t, kept.path, "run", "--json", "--model", "scripted:"+gatedScript(t, kept), "--workflow", "kept", "keep this")
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, "Ctrl-C"); code != 130 {
		t.Fatalf("exit %d after Ctrl-C, want 130; stderr: %s", code, r.stderr.String())
	}
	sandboxes := f.Sandboxes()
	if len(sandboxes) != 1 || sandboxes[0].AutoStopInterval == nil || *sandboxes[0].AutoStopInterval != 1 {
		t.Fatalf("sandboxes %+v, want one with autoStopInterval 1 (idle_timeout 1m)", sandboxes)
	}
	sharedtest.Stop(t, h.tmp)
	waitUntil(t, func() bool {
		sbs := f.Sandboxes()
		return len(sbs) == 1 && sbs[0].State == api.StateStopped
	}, "Daytona's auto-stop")
	if state, _ := lsLifetime(t, h); state != "stopped" {
		t.Errorf("sandbox ls says the stopped sandbox is %s", state)
	}
	res := h.amelia(t, "results", "kept")
	if res.code != 0 || !strings.Contains(res.stdout, "branch amelia/kept") {
		t.Fatalf("amelia results after the auto-stop: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if got := h.git(t, "show", "amelia/kept:before.txt"); got != "before the fault" {
		t.Errorf("before.txt on the brought-back branch: %q", got)
	}
}

// On kubernetes, a sandbox whose workspace is an emptyDir is never
// stopped (a pod that ended has lost it): it gets no watchdog, and sandbox
// ls says why in STOPS.
func TestKubernetesEmptyDirNeverStops(t *testing.T) {
	c := k8stest.Start(t)
	h := newKubernetesHost(t, c, withLifetime(kubernetesSandbox(c, c.Namespace(t), "open", map[string]any{"api": "pods"}), "1s", "off"))
	if r := h.amelia(t, "sandbox", "up"); r.code != 0 {
		t.Fatalf("sandbox up: exit %d: %s", r.code, r.stderr)
	}
	if state, lt := lsLifetime(t, h); state != "ready" || lt != nil {
		t.Errorf("sandbox ls: %s with lifetime %+v; want ready, no watchdog", state, lt)
	}
	ls := h.amelia(t, "sandbox", "ls")
	if ls.code != 0 || !strings.Contains(ls.stdout, "never: the workspace is not on a volume (kubernetes.workspace_volume)") {
		t.Errorf("sandbox ls: exit %d; want STOPS to say why it never stops\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
}
