// Package k8stest gives tests a real two-node Kubernetes cluster (package
// kubecluster): one per test binary, started by the first Start and
// stopped when the binary exits, with the Agent Sandbox controller and the
// project's base image on both nodes. NetworkPolicies are enforced on one
// node (PolicyNode: kube-router's network policy controller) and not on the
// other (UnenforcedNode), so tests see both kinds of cluster.
//
// A package whose tests use it must run them through Main:
//
//	func TestMain(m *testing.M) { os.Exit(k8stest.Main(m)) }
//
// The cluster runs under a supervisor process (the test binary run again
// by Main), which tears it down when the test binary exits, even when it
// is killed; what a killed supervisor leaves is swept by the next start.
//
// The cluster needs root, the binaries cache filled (make kube-binaries)
// and the base image in the Docker engine (make base-image). When it
// cannot be had, the test is skipped with the reason, unless
// AMELIA_REQUIRE_KUBERNETES is set (CI sets it), which makes it a failure.
package k8stest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/amelia-sandbox/amelia/internal/k8stest/kubecluster"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// RequireEnv makes a cluster that cannot be had a test failure when set.
const RequireEnv = "AMELIA_REQUIRE_KUBERNETES"

// superviseEnv, set on the test binary run again by Start, makes Main run
// the cluster instead of the tests.
const superviseEnv = "AMELIA_K8STEST_SUPERVISE"

// The test binary's cluster: one per process.
var (
	mainCalled bool
	once       sync.Once
	shared     *Cluster
	sharedErr  error
	super      *supervisor
)

// Main runs the tests (m.Run) and then stops the cluster, if one was
// started; it returns the exit code for os.Exit. Called in the supervisor
// process Start runs, it runs the cluster instead.
func Main(m *testing.M) int {
	if os.Getenv(superviseEnv) == "1" {
		return supervise()
	}
	mainCalled = true
	code := m.Run()
	if super != nil {
		if err := super.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "k8stest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Cluster is the test binary's running cluster.
type Cluster struct {
	info info
	cfg  *rest.Config
}

// info is what the supervisor says about the cluster it started.
type info struct {
	ID           string   `json:"id,omitempty"`
	Dir          string   `json:"dir,omitempty"`
	Kubeconfig   string   `json:"kubeconfig,omitempty"`
	Kubectl      string   `json:"kubectl,omitempty"`
	Nodes        []string `json:"nodes,omitempty"`
	PolicyNode   string   `json:"policyNode,omitempty"`
	Images       []string `json:"images,omitempty"`
	AgentSandbox bool     `json:"agentSandbox,omitempty"`
	Error        string   `json:"error,omitempty"`
}

// Start returns the test binary's cluster, starting it on first use
// (about half a minute). It skips or fails the test, as the package doc
// says, when there is none.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	if !mainCalled {
		tb.Fatal("k8stest.Start needs the package's TestMain to run the tests through k8stest.Main: func TestMain(m *testing.M) { os.Exit(k8stest.Main(m)) }")
	}
	once.Do(func() { shared, sharedErr = start() })
	if sharedErr != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("no Kubernetes test cluster, and %s is set: %v", RequireEnv, sharedErr)
		}
		tb.Skipf("SKIPPING: this test needs the Kubernetes test cluster: %v; set %s=1 to make that a failure", sharedErr, RequireEnv)
	}
	return shared
}

// Kubeconfig is the path of an admin kubeconfig file, usable by another
// process on the host: the apiserver's address is reachable from the
// host's network namespace, and its certificate verifies against the CA
// in the file.
func (c *Cluster) Kubeconfig() string { return c.info.Kubeconfig }

// RESTConfig is a copy of the admin's client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Client is a clientset with admin rights.
func (c *Cluster) Client(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		tb.Fatalf("kubernetes client: %v", err)
	}
	return cs
}

// Dynamic is a dynamic client with admin rights, for the Agent Sandbox
// objects.
func (c *Cluster) Dynamic(tb testing.TB) dynamic.Interface {
	tb.Helper()
	d, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		tb.Fatalf("kubernetes dynamic client: %v", err)
	}
	return d
}

// Image is an image on every node for sandbox pods (the project's base
// image); pods use it with imagePullPolicy IfNotPresent or Never, as the
// cluster reaches no registry.
func (c *Cluster) Image() string { return c.info.Images[0] }

// Nodes are the names of the cluster's two nodes.
func (c *Cluster) Nodes() []string { return append([]string(nil), c.info.Nodes...) }

// PolicyNode is the node on which NetworkPolicies are enforced
// (kube-router's network policy controller); on the other node they are
// not, as on a cluster whose network plugin ignores them.
func (c *Cluster) PolicyNode() string { return c.info.PolicyNode }

// UnenforcedNode is the node on which NetworkPolicies are not enforced.
func (c *Cluster) UnenforcedNode() string {
	for _, n := range c.info.Nodes {
		if n != c.info.PolicyNode {
			return n
		}
	}
	return ""
}

// AgentSandbox says whether the Agent Sandbox CRDs are installed and its
// controller runs with the extensions: Sandbox, SandboxTemplate,
// SandboxWarmPool and SandboxClaim (agents.x-k8s.io and
// extensions.agents.x-k8s.io, v1beta1) work.
func (c *Cluster) AgentSandbox() bool { return c.info.AgentSandbox }

// Kubectl is the path of a kubectl of the cluster's version.
func (c *Cluster) Kubectl() string { return c.info.Kubectl }

// nsUnsafe matches what a namespace name made from a test name may not
// hold: such runs become one dash.
var nsUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace creates a fresh namespace for the test and waits until its
// default ServiceAccount exists (pods need it); at cleanup it deletes the
// namespace, its pods at once, and waits until it is gone.
func (c *Cluster) Namespace(tb testing.TB) string {
	tb.Helper()
	cs := c.Client(tb)
	name := testObjectName(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"amelia.k8stest": "1"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create namespace %s: %v", name, err)
	}
	tb.Cleanup(func() { deleteNamespace(tb, cs, name) })
	err := poll(ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err != nil {
		tb.Fatalf("wait for the default ServiceAccount of namespace %s: %v", name, err)
	}
	return name
}

// testObjectName is a new name for a cluster object of the test: "t-",
// the test's name made safe (at most 40 characters), and 6 random hex
// digits.
func testObjectName(tb testing.TB) string {
	base := strings.Trim(nsUnsafe.ReplaceAllString(strings.ToLower(tb.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	var b [3]byte
	rand.Read(b[:])
	return "t-" + base + "-" + hex.EncodeToString(b[:])
}

// StorageClass makes a PersistentVolume of a storage class of its own on
// a directory of the host that uid 1000 can write (both nodes share the
// host's filesystem), removed when the test ends, and returns the class,
// for a claim of at most 1Gi (one claim: the PV binds once). The cluster
// has no provisioner, so the PV is there before the claim that binds it.
func (c *Cluster) StorageClass(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	class := testObjectName(tb)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: class, Labels: map[string]string{"amelia.k8stest": "1"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	pvs := c.Client(tb).CoreV1().PersistentVolumes()
	if _, err := pvs.Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create PersistentVolume %s: %v", class, err)
	}
	tb.Cleanup(func() {
		if err := pvs.Delete(context.Background(), class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("delete PersistentVolume %s: %v", class, err)
		}
	})
	return class
}

// deleteNamespace deletes the namespace's pods without grace, then the
// namespace, and waits until it is gone.
func deleteNamespace(tb testing.TB, cs kubernetes.Interface, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	zero := int64(0)
	if err := cs.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		tb.Errorf("delete the pods of namespace %s: %v", name, err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		tb.Errorf("delete namespace %s: %v", name, err)
		return
	}
	err := poll(ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("namespace %s still exists", name)
		}
		return err
	})
	if err != nil {
		tb.Errorf("wait for namespace %s to go: %v", name, err)
	}
}

// poll calls check every 100 ms until it returns nil or ctx ends.
func poll(ctx context.Context, check func(context.Context) error) error {
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start checks what the cluster needs, then runs the supervisor and waits
// for its cluster.
func start() (*Cluster, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("it runs on Linux only")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("it needs root (network namespaces, cgroups, mounts)")
	}
	root, err := kubecluster.CacheDir()
	if err != nil {
		return nil, err
	}
	if _, err := kubecluster.Cached(root); err != nil {
		return nil, err
	}
	for _, p := range []string{"/usr/bin/etcd", "/usr/bin/containerd", "/usr/lib/cni/bridge"} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s is missing: install etcd-server, containerd and containernetworking-plugins (.ci/run does)", p)
		}
	}
	for _, c := range []string{"ctr", "nsenter", "ip", "runc"} {
		if _, err := exec.LookPath(c); err != nil {
			return nil, fmt.Errorf("%s is not on PATH", c)
		}
	}
	s, err := startSupervisor()
	if err != nil {
		return nil, err
	}
	if s.info.Error != "" {
		<-s.done // it tore down what it had started
		return nil, fmt.Errorf("%s\n%s", s.info.Error, s.log.String())
	}
	super = s
	cfg, err := clientcmd.BuildConfigFromFlags("", s.info.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load the cluster's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return &Cluster{info: s.info, cfg: cfg}, nil
}

// supervisor is the process that runs the cluster.
type supervisor struct {
	cmd   *exec.Cmd
	stdin io.Closer
	info  info
	log   *tailBuffer
	done  chan struct{}
}

// startSupervisor runs this test binary again as the cluster's supervisor
// and reads what it says about the cluster. The supervisor ends the
// cluster when its stdin closes: when Main stops it, or when this process
// dies.
func startSupervisor() (*supervisor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &supervisor{log: &tailBuffer{max: 32 << 10}, done: make(chan struct{})}
	s.cmd = exec.Command(exe, "-test.run=^$")
	s.cmd.Env = append(os.Environ(), superviseEnv+"=1")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.Stderr = s.log
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.stdin = stdin
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the cluster's supervisor: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		<-s.done
		return nil, fmt.Errorf("the cluster's supervisor ended without a cluster (%v):\n%s", s.cmd.ProcessState, s.log.String())
	}
	if err := json.Unmarshal(line, &s.info); err != nil {
		s.stop()
		return nil, fmt.Errorf("the cluster's supervisor said %q: %w", line, err)
	}
	return s, nil
}

// stop ends the supervisor, which tears the cluster down, and waits for
// it.
func (s *supervisor) stop() error {
	s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(3 * time.Minute):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		return fmt.Errorf("the Kubernetes test cluster's supervisor did not stop within 3 minutes; killed it (the next start sweeps what it left):\n%s", s.log.String())
	}
	if !s.cmd.ProcessState.Success() {
		return fmt.Errorf("the Kubernetes test cluster's supervisor: %v:\n%s", s.cmd.ProcessState, s.log.String())
	}
	return nil
}

// supervise runs the cluster in this process: it says on stdout what the
// cluster is (or why there is none), then waits for stdin to close or a
// signal, and tears the cluster down.
func supervise() int {
	// The test binary may be gone when the supervisor writes: an error,
	// not a death by SIGPIPE halfway through the teardown.
	signal.Ignore(syscall.SIGPIPE)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	say := func(i info) {
		b, _ := json.Marshal(i)
		os.Stdout.Write(append(b, '\n'))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	root, err := kubecluster.CacheDir()
	if err != nil {
		say(info{Error: err.Error()})
		return 1
	}
	bins, err := kubecluster.Cached(root)
	if err != nil {
		say(info{Error: err.Error()})
		return 1
	}
	upCtx, upCancel := context.WithTimeout(ctx, 10*time.Minute)
	c, err := kubecluster.Up(upCtx, kubecluster.Options{Binaries: bins, Images: []string{image.TestBase}, ImageCache: root, Log: log})
	upCancel()
	if err != nil {
		say(info{Error: "start the Kubernetes test cluster: " + err.Error()})
		return 1
	}
	say(info{ID: c.ID, Dir: c.Dir, Kubeconfig: c.Kubeconfig, Kubectl: c.Kubectl, Nodes: c.Nodes, PolicyNode: kubecluster.PolicyNode, Images: c.Images, AgentSandbox: true})
	if err := c.WaitExit(ctx); err != nil {
		log.Error("the cluster broke", "err", err)
		<-ctx.Done()
	}
	if err := c.Down(); err != nil {
		log.Error("tear the cluster down", "err", err)
		return 1
	}
	return 0
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
