// Package kubecluster builds and runs a real Kubernetes cluster on this
// machine for tests and for people: kube-apiserver, kube-scheduler,
// kube-controller-manager and kubectl built from k8s.io/kubernetes on the Go
// module proxy, Debian's etcd, two nodes (a containerd and a kubelet each),
// and the Agent Sandbox controller with its CRDs.
//
// Everything runs as root inside a network namespace of the cluster's own,
// which a veth pair joins to the host: the apiserver listens on the
// namespace's end, so processes on the host reach it with the admin
// kubeconfig, verifying its certificate against the cluster's own CA. All
// names on the host (namespace, veth, cgroups, directory) carry the
// cluster's random ID, so clusters can run side by side; a cluster whose
// owner died is swept by the next Up.
package kubecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/amelia-sandbox/amelia/internal/gobuildcache"
)

// RunRootEnv names the directory the clusters' state directories go in.
const RunRootEnv = "AMELIA_KUBE_RUN"

// RunRoot is where clusters keep their state: $AMELIA_KUBE_RUN, else
// amelia-kube in the temporary directory. Up sweeps what dead clusters
// left there.
func RunRoot() string {
	if d := os.Getenv(RunRootEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "amelia-kube")
}

// Options say what cluster to start.
type Options struct {
	// Binaries are what Build made.
	Binaries Binaries
	// RunRoot holds the cluster's directory (RunRoot() when empty).
	RunRoot string
	// Images are Docker images (by reference) loaded onto every node, from
	// the local Docker engine.
	Images []string
	// ImageCache keeps the images' exported archives between clusters;
	// none when empty.
	ImageCache string
	// Log receives progress; none when nil.
	Log *slog.Logger
}

// Cluster is a running cluster, or what is left of one after Down.
type Cluster struct {
	ID string
	// Dir is the cluster's state directory.
	Dir string
	// Kubeconfig is an admin kubeconfig file, usable from the host.
	Kubeconfig string
	// Server is the apiserver's URL.
	Server string
	// Nodes are the node names.
	Nodes []string
	// Kubectl is the kubectl binary of the cluster's version.
	Kubectl string
	// Images are the node images' references, as pods name them.
	Images []string

	log   *slog.Logger
	procs []*proc
	lock  *os.File
	mu    sync.Mutex
	down  bool
	exits chan *proc
}

// proc is a process of the cluster.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

const (
	apiPort        = 6443
	controllerPort = 18081
	serviceCIDR    = "10.96.0.0/24"
	serviceIP      = "10.96.0.1"
)

// Up starts a cluster and waits until its two nodes are Ready and the
// Agent Sandbox controller answers. On failure what was started is torn
// down. Down stops it; if the process dies first, the next Up of any
// process with the same RunRoot sweeps what it left.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the Kubernetes test cluster needs root (network namespaces, cgroups, mounts)")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root := o.RunRoot
	if root == "" {
		root = RunRoot()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	if err := Sweep(ctx, root, log); err != nil {
		log.Warn("sweeping clusters of dead owners", "err", err)
	}
	c = &Cluster{log: log, exits: make(chan *proc, 32)}
	// The root lock covers making the directory and taking its owner lock
	// (so a sweep never takes a new cluster for a dead one) and picking the
	// subnet (so two clusters never pick the same).
	unlock, err := gobuildcache.Lock(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return nil, err
	}
	c.ID = newID()
	c.Dir = filepath.Join(root, c.ID)
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		unlock()
		return nil, fmt.Errorf("create the cluster's directory: %w", err)
	}
	if c.lock, err = ownerLock(c.Dir); err != nil {
		unlock()
		os.RemoveAll(c.Dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Down()
			c = nil
		}
	}()
	start := time.Now()
	subnet, err := pickSubnet(ctx)
	if err != nil {
		unlock()
		return c, err
	}
	_, nsIP, err := makeNetwork(ctx, c.ID, subnet)
	unlock()
	if err != nil {
		return c, err
	}
	if err := makeCgroups(c.ID, "daemons", "node1", "node2"); err != nil {
		return c, err
	}

	// Keys, tokens, kubeconfigs.
	dir := c.Dir
	p, err := makePKI(filepath.Join(dir, "pki"), []net.IP{net.IP(nsIP.AsSlice()), net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return c, fmt.Errorf("make the cluster's certificates: %w", err)
	}
	c.Server = fmt.Sprintf("https://%s", net.JoinHostPort(nsIP.String(), fmt.Sprint(apiPort)))
	c.Nodes = []string{"127.0.0.1", "127.0.0.2"}
	adminTok := token()
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n", adminTok)
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig(c.Server, p.caCert, "admin", adminTok), 0o600); err != nil {
		return c, err
	}
	for i, n := range c.Nodes {
		tok := token()
		tokens += fmt.Sprintf("%s,system:node:%s,node%d,system:nodes\n", tok, n, i+1)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("node%d.kubeconfig", i+1)), kubeconfig(c.Server, p.caCert, "system:node:"+n, tok), 0o600); err != nil {
			return c, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pki", "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return c, err
	}
	c.Kubectl = o.Binaries.Bin("kubectl")

	// etcd and the apiserver, the containerds meanwhile.
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return c, err
	}
	if err := c.start("etcd", "/usr/bin/etcd", "--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380", "--listen-metrics-urls=http://127.0.0.1:2381"); err != nil {
		return c, err
	}
	for i := range c.Nodes {
		cfg, err := writeContainerdConfig(dir, i+1)
		if err != nil {
			return c, err
		}
		if err := c.start(fmt.Sprintf("containerd-%d", i+1), "/usr/bin/containerd", "--config", cfg); err != nil {
			return c, err
		}
	}
	imgCtx, imgCancel := context.WithCancel(ctx)
	images := make(chan error, 1)
	go func() { images <- c.loadImages(imgCtx, o) }()
	defer func() {
		if images != nil { // Up failed before it waited for them
			imgCancel()
			<-images
		}
	}()
	if err := c.waitHTTP(ctx, "etcd", "http://127.0.0.1:2379/health"); err != nil {
		return c, err
	}
	if err := c.start("kube-apiserver", o.Binaries.Bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0", fmt.Sprintf("--secure-port=%d", apiPort),
		"--advertise-address="+nsIP.String(), "--tls-cert-file="+p.certFile, "--tls-private-key-file="+p.keyFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPubFile, "--service-account-signing-key-file="+p.saKeyFile,
		"--token-auth-file="+filepath.Join(dir, "pki", "tokens.csv"), "--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range="+serviceCIDR, "--endpoint-reconciler-type=none", "--profiling=false",
		"--kubelet-preferred-address-types=Hostname,InternalIP"); err != nil {
		return c, err
	}
	cs, err := c.clientset()
	if err != nil {
		return c, err
	}
	if err := c.waitAPI(ctx, cs); err != nil {
		return c, err
	}
	log.Info("apiserver ready", "after", time.Since(start).Round(100*time.Millisecond))

	admin := "--kubeconfig=" + c.Kubeconfig
	if err := c.start("kube-scheduler", o.Binaries.Bin("kube-scheduler"), admin, "--leader-elect=false", "--bind-address=127.0.0.1"); err != nil {
		return c, err
	}
	if err := c.start("kube-controller-manager", o.Binaries.Bin("kube-controller-manager"), admin, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--service-account-private-key-file="+p.saKeyFile, "--root-ca-file="+p.caFile,
		"--use-service-account-credentials=false"); err != nil {
		return c, err
	}
	err = <-images
	images = nil
	imgCancel()
	if err != nil {
		return c, err
	}
	for i, n := range c.Nodes {
		cfg, err := writeKubeletConfig(dir, c.ID, i+1, n)
		if err != nil {
			return c, err
		}
		if err := c.startKubelet(ctx, i+1, o.Binaries.Bin("kubelet"), "--config="+cfg,
			fmt.Sprintf("--kubeconfig=%s/node%d.kubeconfig", dir, i+1), fmt.Sprintf("--root-dir=%s/node%d/kubelet", dir, i+1),
			"--hostname-override="+n); err != nil {
			return c, err
		}
	}
	if err := c.startAgentSandbox(ctx, o.Binaries, cs); err != nil {
		return c, err
	}
	if err := c.waitNodes(ctx, cs); err != nil {
		return c, err
	}
	if err := c.waitHTTP(ctx, "agent-sandbox-controller", fmt.Sprintf("http://127.0.0.1:%d/readyz", controllerPort)); err != nil {
		return c, err
	}
	if err := c.startPolicyController(ctx, o.Binaries); err != nil {
		return c, err
	}
	log.Info("cluster ready", "id", c.ID, "after", time.Since(start).Round(100*time.Millisecond))
	return c, nil
}

// ownerLock takes the cluster directory's owner lock, held for the
// cluster's life: a directory whose lock can be taken has no live owner.
func ownerLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "owner.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create the cluster's owner lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// start starts a process of the cluster inside its network namespace, in
// a process group of its own, killed if this process dies, with its output
// in logs/NAME.log, and moves it into the cluster's cgroup.
func (c *Cluster) start(name, bin string, args ...string) error {
	logPath := filepath.Join(c.Dir, "logs", name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + filepath.Join("/run/netns", netnsName(c.ID)), "--", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		c.mu.Lock()
		down := c.down
		c.mu.Unlock()
		if !down {
			c.log.Error("a process of the cluster exited", "name", name, "err", p.err, "log", logPath)
			select {
			case c.exits <- p:
			default:
			}
		}
	}()
	if err := joinCgroup(c.ID, cmd.Process.Pid); err != nil {
		return err
	}
	return nil
}

// Every kubelet serves its device-plugin registry on the same socket,
// whatever its --root-dir: at start it removes the files in the socket's
// directory and then listens, so two kubelets starting together (the two
// nodes of a cluster, or clusters of tests running side by side) can both
// remove and then both listen, and the second fails "address already in
// use" and exits.
const (
	devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
	kubeletStartLock   = "/var/lib/kubelet/amelia-kubelet-start.lock"
)

// startKubelet starts node n's kubelet alone on this machine: under a
// machine-wide lock, from removing the shared device-plugin socket until
// the new kubelet has made it again (or exited). A running kubelet whose
// socket a later one replaces goes on; nothing here uses device plugins.
func (c *Cluster) startKubelet(ctx context.Context, n int, bin string, args ...string) error {
	if err := os.MkdirAll(filepath.Dir(kubeletStartLock), 0o755); err != nil {
		return err
	}
	unlock, err := gobuildcache.Lock(ctx, kubeletStartLock)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(devicePluginSocket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the device-plugin socket a kubelet left: %w", err)
	}
	name := fmt.Sprintf("kubelet-%d", n)
	if err := c.start(name, bin, args...); err != nil {
		return err
	}
	return c.poll(ctx, name+"'s device-plugin socket", 3*time.Minute, func(context.Context) error {
		_, err := os.Stat(devicePluginSocket)
		return err
	})
}

// exited returns an error naming a process of the cluster that exited,
// with the end of its log, or nil.
func (c *Cluster) exited() error {
	select {
	case p := <-c.exits:
		c.exits <- p // later waits see it too
		return fmt.Errorf("%s exited (%v); the end of its log %s:\n%s", p.name, p.err, p.log, tail(p.log, 3000))
	default:
		return nil
	}
}

// tail is the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// poll calls check until it returns nil, a process of the cluster exits,
// or ctx ends; what names the wait in the error.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if e := c.exited(); e != nil {
			return fmt.Errorf("wait for %s: %w", what, e)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitHTTP waits until url, inside the cluster's namespace, answers 200.
func (c *Cluster) waitHTTP(ctx context.Context, what, url string) error {
	ns := filepath.Join("/run/netns", netnsName(c.ID))
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, ns, network, addr)
		},
		DisableKeepAlives: true,
	}, Timeout: 5 * time.Second}
	return c.poll(ctx, what, 3*time.Minute, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, res.Status)
		}
		return nil
	})
}

// RESTConfig is the admin's client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load the cluster's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

func (c *Cluster) clientset() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// waitAPI waits until the apiserver, reached from the host through the
// veth and verified against the CA, says it is ready.
func (c *Cluster) waitAPI(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, "kube-apiserver /readyz", 3*time.Minute, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// waitNodes waits until both nodes are Ready.
func (c *Cluster) waitNodes(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, "two Ready nodes", 3*time.Minute, func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready != len(c.Nodes) {
			return fmt.Errorf("%d of %d nodes Ready", ready, len(c.Nodes))
		}
		return nil
	})
}

// Down stops the cluster and removes everything it made on the host. It
// can be called more than once.
func (c *Cluster) Down() error {
	c.mu.Lock()
	c.down = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	for _, p := range c.procs {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	err := teardown(ctx, c.ID, c.Dir)
	for _, p := range c.procs {
		<-p.done
	}
	c.procs = nil
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
	c.log.Info("cluster down", "id", c.ID, "took", time.Since(start).Round(100*time.Millisecond), "err", err)
	return err
}

// teardown removes what cluster id made: its processes, mounts, container
// log links, network, cgroups and directory.
func teardown(ctx context.Context, id, dir string) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(killCgroup(ctx, id))
	add(unmountUnder(dir))
	removeLogLinks(dir)
	removeShimSockets(dir)
	add(removeNetwork(ctx, id))
	add(removeCgroups(ctx, id))
	if ms, err := mountsUnder(dir); err == nil && len(ms) == 0 {
		add(os.RemoveAll(dir))
	} else {
		add(fmt.Errorf("not removing %s: mounts remain under it", dir))
	}
	return errors.Join(errs...)
}

// removeLogLinks removes the kubelets' links in /var/log/containers (a
// fixed place) to logs under dir.
func removeLogLinks(dir string) {
	ents, _ := os.ReadDir("/var/log/containers")
	for _, e := range ents {
		p := filepath.Join("/var/log/containers", e.Name())
		if to, err := os.Readlink(p); err == nil && strings.HasPrefix(to, dir+"/") {
			os.Remove(p)
		}
	}
}

// shimSockets is where containerd's runc shims put their sockets, whatever
// containerd's own state directory.
const shimSockets = "/run/containerd/s/"

// removeShimSockets removes the sockets of the cluster's containerd shims,
// which the shims (killed, not stopped) leave in shimSockets: each task's
// state directory names its shim's in a file "address".
func removeShimSockets(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "node*", "containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		p := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
		if filepath.Dir(p)+"/" != shimSockets {
			continue
		}
		if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSocket != 0 {
			os.Remove(p)
		}
	}
}

// Sweep tears down the clusters under root whose owners died (their owner
// lock can be taken), leaving live ones alone.
func Sweep(ctx context.Context, root string, log *slog.Logger) error {
	unlock, err := gobuildcache.Lock(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, "owner.lock"), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			// Made but never locked (its maker died at once), or half removed.
		} else if err != nil {
			errs = append(errs, err)
			continue
		} else if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue // alive
		}
		log.Info("sweeping a cluster whose owner died", "id", e.Name(), "dir", dir)
		errs = append(errs, teardown(ctx, e.Name(), dir))
		if f != nil {
			f.Close()
		}
	}
	return errors.Join(errs...)
}

// writeFile writes b to path, making its directory.
func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// writeContainerdConfig writes node n's containerd and CNI configuration
// and returns the containerd config's path. Each node has its own bridge
// and pod subnet in the cluster's namespace.
func writeContainerdConfig(dir string, n int) (string, error) {
	base := filepath.Join(dir, fmt.Sprintf("node%d", n))
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "amelia-node%d",
  "plugins": [{
    "type": "bridge", "bridge": "cni%d", "isGateway": false, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.%d.0/24"}]], "dataDir": %q}
  }]
}
`, n, n, n, filepath.Join(base, "cni", "ipam"))
	if err := writeFile(filepath.Join(base, "cni", "net.d", "10-amelia.conflist"), []byte(cni)); err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  disable_tcp_service = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.%[7]d"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[9]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[8]q
`, filepath.Join(base, "containerd", "root"), filepath.Join(base, "containerd", "state"), containerdSocket(dir, n),
		containerdSocket(dir, n)+".ttrpc", filepath.Join(base, "containerd", "opt"), PauseRef, n, filepath.Join(base, "cni", "net.d"),
		filepath.Join(base, "containerd", "runc"))
	path := filepath.Join(base, "containerd.toml")
	return path, writeFile(path, []byte(cfg))
}

func containerdSocket(dir string, n int) string {
	return filepath.Join(dir, fmt.Sprintf("node%d", n), "containerd", "containerd.sock")
}

// writeKubeletConfig writes node n's kubelet configuration and returns
// its path. The node listens on its own loopback address, and its pods'
// cgroups go under the cluster's cgroup.
func writeKubeletConfig(dir, id string, n int, addr string) (string, error) {
	base := filepath.Join(dir, fmt.Sprintf("node%d", n))
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[1]s
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /%[2]s/node%[3]d
containerRuntimeEndpoint: unix://%[4]s
failSwapOn: false
failCgroupV1: false
podLogsDir: %[5]s
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
clusterDomain: cluster.local
`, addr, cgroupName(id), n, containerdSocket(dir, n), filepath.Join(base, "pod-logs"))
	path := filepath.Join(base, "kubelet.yaml")
	return path, writeFile(path, []byte(cfg))
}

// loadImages imports the pause image and the Docker images into every
// node's containerd, once its socket answers.
func (c *Cluster) loadImages(ctx context.Context, o Options) error {
	archives := []string{o.Binaries.PauseImage}
	for _, ref := range o.Images {
		a, name, err := exportImage(ctx, ref, o.ImageCache, filepath.Join(c.Dir, "images"))
		if err != nil {
			return err
		}
		archives = append(archives, a)
		c.Images = append(c.Images, name)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i := range c.Nodes {
		wg.Go(func() {
			sock := containerdSocket(c.Dir, i+1)
			errs[i] = c.poll(ctx, fmt.Sprintf("containerd of node %d", i+1), 2*time.Minute, func(ctx context.Context) error {
				return run(ctx, "ctr", "--address", sock, "version")
			})
			for _, a := range archives {
				if errs[i] != nil {
					return
				}
				errs[i] = run(ctx, "ctr", "--address", sock, "-n", "k8s.io", "images", "import", a)
			}
			if errs[i] == nil {
				errs[i] = c.checkImage(ctx, sock, PauseRef)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkImage fails unless the node's containerd has ref.
func (c *Cluster) checkImage(ctx context.Context, sock, ref string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		return fmt.Errorf("list the node's images: %w", err)
	}
	for _, l := range bytes.Split(out, []byte("\n")) {
		if string(l) == ref {
			return nil
		}
	}
	return fmt.Errorf("the node's containerd lacks %s after the import; it has: %s", ref, out)
}

// WaitExit returns when a process of the cluster exits unexpectedly, with
// why, or when ctx ends.
func (c *Cluster) WaitExit(ctx context.Context) error {
	select {
	case p := <-c.exits:
		c.exits <- p
		return c.exited()
	case <-ctx.Done():
		return nil
	}
}
