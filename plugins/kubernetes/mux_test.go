package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// inPod runs argv in the pod through pods/exec of its own, not through
// the provider (whose exec would start a mux of its own), and returns
// its stdout.
func inPod(ctx context.Context, t *testing.T, c *k8stest.Cluster, ns, pod string, argv ...string) (string, error) {
	t.Helper()
	req := c.Client(t).CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(c.RESTConfig(), "GET", req.URL().String())
	if err != nil {
		return "", fmt.Errorf("exec %q in pod %s/%s: %w", argv, ns, pod, err)
	}
	var out, errb bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb}); err != nil {
		return "", fmt.Errorf("exec %q in pod %s/%s: %w (stderr %q)", argv, ns, pod, err, errb.String())
	}
	return out.String(), nil
}

// podProcs lists the processes in the pod's container: their command
// lines by pid.
func podProcs(ctx context.Context, t *testing.T, c *k8stest.Cluster, ns, pod string) (map[int]string, error) {
	t.Helper()
	out, err := inPod(ctx, t, c, ns, pod, "ps", "-eo", "pid=,args=")
	if err != nil {
		return nil, err
	}
	procs := map[int]string{}
	for line := range strings.Lines(out) {
		pid, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.Atoi(pid)
		if err != nil {
			return nil, fmt.Errorf("ps in pod %s/%s: line %q", ns, pod, line)
		}
		procs[n] = strings.TrimSpace(args)
	}
	return procs, nil
}

// only returns the one pid of procs whose command line satisfies match,
// failing the test unless there is exactly one.
func only(t *testing.T, procs map[int]string, what string, match func(string) bool) int {
	t.Helper()
	var pids []int
	for pid, args := range procs {
		if match(args) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("%s: processes %v; want one, in %v", what, pids, procs)
	}
	return pids[0]
}

// lineWaiter closes seen once what was written to it holds a line.
type lineWaiter struct {
	once sync.Once
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("\n")) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Every command of a sandbox runs on one exec of `amelia-worker mux`.
// When the plugin holding it is killed (SIGKILL: no goodbye on the
// session), the stream breaks and the mux in the pod ends, having killed
// the command still running on it; a run the plugin detached through it
// (`amelia-worker detach`, as amelia starts an agent) goes on.
func TestKilledPluginEndsItsMux(t *testing.T) {
	c := cluster(t)
	cfg, ns := settings(t, c, map[string]any{"api": "pods"})
	pl, err := pluginclient.Launch(exec.Command(os.Args[0]), pluginclient.LaunchOptions{Name: "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	sb, err := pl.EnsureRunning(t.Context(), spec("killed", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatalf("EnsureRunning: %v", err)
	}
	t.Cleanup(func() {
		// The plugin is gone by then: this process removes the sandbox.
		if err := newProvider(t, nil).Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
	pod := sb.Details["pod"]

	// A detached run, started through the mux.
	const detachScript = `for w in "$1"/amelia-worker-*; do exec "$w" detach --dir "$2" -- sleep 86401; done; exit 127`
	var errb bytes.Buffer
	st, err := pl.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", detachScript, "detach", kubernetes.Home + "/.amelia/bin", kubernetes.Workdir + "/run"}},
		sdk.ExecIO{Stderr: &errb})
	if err != nil || st.Code != 0 {
		t.Fatalf("detach: %+v, %v: %s", st, err, errb.String())
	}
	// A command running on the mux when the plugin dies.
	started := &lineWaiter{seen: make(chan struct{})}
	running := make(chan error, 1)
	go func() {
		_, err := pl.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "echo started; exec sleep 86402"}}, sdk.ExecIO{Stdout: started})
		running <- err
	}()
	select {
	case <-started.seen:
	case err := <-running:
		t.Fatalf("the command ended before the plugin was killed: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs, err := podProcs(ctx, t, c, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	mux := only(t, procs, "the worker's mux", func(a string) bool { return strings.Contains(a, "/amelia-worker-") && strings.HasSuffix(a, " mux") })
	supervisor := only(t, procs, "the detached run's supervisor", func(a string) bool {
		return strings.Contains(a, "/amelia-worker-") && strings.Contains(a, " supervise --dir "+kubernetes.Workdir+"/run ")
	})
	detached := only(t, procs, "the detached command", func(a string) bool { return a == "sleep 86401" })
	command := only(t, procs, "the running command", func(a string) bool { return a == "sleep 86402" })

	killed := time.Now()
	if err := syscall.Kill(pl.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill the plugin: %v", err)
	}
	if err := <-running; err == nil {
		t.Errorf("the command running when the plugin was killed: no error")
	}
	for {
		procs, err = podProcs(ctx, t, c, ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		if procs[mux] == "" {
			t.Logf("the mux ended %v after its plugin was killed", time.Since(killed).Round(time.Millisecond))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the mux (pid %d) still runs in the pod after its plugin was killed: %v", mux, procs)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if a := procs[command]; a != "" {
		t.Errorf("the command that ran on the mux outlived it: pid %d %q", command, a)
	}
	for what, pid := range map[string]int{"the detached run's supervisor": supervisor, "the detached command": detached} {
		if procs[pid] == "" {
			t.Errorf("%s (pid %d) ended with the mux: %v", what, pid, procs)
		}
	}
}
