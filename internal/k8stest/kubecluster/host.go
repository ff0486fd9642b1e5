package kubecluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What the host holds for a cluster is named from its ID, so that two
// clusters never share a name and a sweep finds what a dead one left.
func netnsName(id string) string    { return "amelia-kube-" + id }
func cgroupName(id string) string   { return "amelia-kube-" + id }
func vethHostName(id string) string { return "akh" + id }
func vethNSName(id string) string   { return "akn" + id }

// validID is what newID makes: it becomes part of paths and device names.
func validID(id string) bool {
	if len(id) != 8 {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func newID() string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%08x", binary.BigEndian.Uint32(b[:]))
}

// run runs a command (argv, no shell), its combined output going into the
// error on failure.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cgroupHierarchies are the mount points of the cgroup v1 hierarchies,
// where the kubelet needs its cgroupRoot to exist, and of the v2 one (on a
// hybrid host runc makes the containers' cgroups there too).
func cgroupHierarchies() (v1, v2 []string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(s.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		switch fields[i+1] {
		case "cgroup":
			v1 = append(v1, unescapeMount(fields[4]))
		case "cgroup2":
			v2 = append(v2, unescapeMount(fields[4]))
		}
	}
	return v1, v2, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// makeCgroups creates the cluster's cgroup, and the given children of it,
// in every cgroup v1 hierarchy, giving the cpuset ones the CPUs and memory
// nodes of their parent (a fresh v1 cpuset has none).
func makeCgroups(id string, children ...string) error {
	hs, _, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	if len(hs) == 0 {
		return errors.New("no cgroup v1 hierarchy is mounted: this cluster helper supports cgroup v1 hosts only")
	}
	for _, h := range hs {
		top := filepath.Join(h, cgroupName(id))
		dirs := []string{top}
		for _, c := range children {
			dirs = append(dirs, filepath.Join(top, c))
		}
		for _, d := range dirs {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create cgroup %s: %w", d, err)
			}
			if _, err := os.Stat(filepath.Join(d, "cpuset.cpus")); err == nil {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
					if err != nil {
						return fmt.Errorf("read %s: %w", f, err)
					}
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return fmt.Errorf("set %s of %s: %w", f, d, err)
					}
				}
			}
		}
	}
	return nil
}

// pidsCgroup is the cluster's cgroup in the pids hierarchy, which holds
// every process of the cluster: the daemons are moved there as they start,
// and the kubelets' pods live under it.
func pidsCgroup(id string) string { return filepath.Join("/sys/fs/cgroup/pids", cgroupName(id)) }

// joinCgroup moves pid into the cluster's daemons cgroup in the pids
// hierarchy.
func joinCgroup(id string, pid int) error {
	p := filepath.Join(pidsCgroup(id), "daemons", "cgroup.procs")
	if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into %s: %w", pid, p, err)
	}
	return nil
}

// killCgroup kills every process in the cluster's pids cgroup tree until
// none is left: the daemons, the containerd shims they forked, and the
// pods' processes.
func killCgroup(ctx context.Context, id string) error {
	top := pidsCgroup(id)
	if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for {
		n := 0
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill the processes of cgroup %s: %d still there: %w", top, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeCgroups removes the cluster's cgroups, deepest first, in every
// hierarchy; a cgroup whose processes are still exiting is retried.
func removeCgroups(ctx context.Context, id string) error {
	v1, v2, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range append(v1, v2...) {
		top := filepath.Join(h, cgroupName(id))
		for {
			var dirs []string
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			var last error
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
					last = err
				}
			}
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("remove cgroup %s: %v", top, last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// mountsUnder are the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		if mp := unescapeMount(fields[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			ms = append(ms, mp)
		}
	}
	slices.SortFunc(ms, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(ms), s.Err()
}

// unmountUnder detaches every mount at or below dir: the containers'
// root filesystems and pod network namespaces containerd mounted under its
// state directory, and the kubelet's volumes.
func unmountUnder(dir string) error {
	for range 5 {
		ms, err := mountsUnder(dir)
		if err != nil {
			return fmt.Errorf("list mounts: %w", err)
		}
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	ms, _ := mountsUnder(dir)
	return fmt.Errorf("%d mounts under %s stay mounted, %s among them", len(ms), dir, ms[0])
}

// vethRange is where the clusters' veth subnets come from: the shared
// address space of RFC 6598, which hosts rarely route.
var vethRange = netip.MustParsePrefix("100.64.0.0/10")

// pickSubnet chooses a /30 in vethRange that no address or route of
// the host overlaps: the host's end of the veth takes its first address,
// the cluster's namespace its second.
func pickSubnet(ctx context.Context) (netip.Prefix, error) {
	out, err := exec.CommandContext(ctx, "ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list the host's routes: %w", err)
	}
	var used []netip.Prefix
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if (dst == "local" || dst == "broadcast" || dst == "unreachable" || dst == "blackhole") && len(f) > 1 {
			dst = f[1]
		}
		if p, err := netip.ParsePrefix(dst); err == nil {
			used = append(used, p)
		} else if a, err := netip.ParseAddr(dst); err == nil {
			used = append(used, netip.PrefixFrom(a, 32))
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			used = append(used, p.Masked())
		}
	}
	for range 1000 {
		var b [4]byte
		rand.Read(b[:])
		// The second octet of 100.64.0.0/10 is 64..127.
		a := netip.AddrFrom4([4]byte{100, 64 | b[0]&63, b[1], b[2] &^ 3})
		p := netip.PrefixFrom(a, 30)
		if !slices.ContainsFunc(used, func(u netip.Prefix) bool { return u.Overlaps(p) && u.Bits() > 0 }) {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("found no free /30 in %v for the cluster's veth", vethRange)
}

// makeNetwork creates the cluster's network namespace, with loopback up
// and a veth pair: hostIP on the host's end, nsIP on the namespace's.
func makeNetwork(ctx context.Context, id string, subnet netip.Prefix) (hostIP, nsIP netip.Addr, err error) {
	ns, hostDev, nsDev := netnsName(id), vethHostName(id), vethNSName(id)
	hostIP = subnet.Addr().Next()
	nsIP = hostIP.Next()
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "add", hostDev, "type", "veth", "peer", "name", nsDev, "netns", ns},
		{"addr", "add", netip.PrefixFrom(hostIP, 30).String(), "dev", hostDev},
		{"link", "set", hostDev, "up"},
		{"-n", ns, "addr", "add", netip.PrefixFrom(nsIP, 30).String(), "dev", nsDev},
		{"-n", ns, "link", "set", nsDev, "up"},
	}
	for _, s := range steps {
		if err := run(ctx, "ip", s...); err != nil {
			return hostIP, nsIP, fmt.Errorf("make the cluster's network: %w", err)
		}
	}
	return hostIP, nsIP, nil
}

// removeNetwork deletes the veth and the namespace; what is gone already
// is no error.
func removeNetwork(ctx context.Context, id string) error {
	if _, err := net.InterfaceByName(vethHostName(id)); err == nil {
		if err := run(ctx, "ip", "link", "del", vethHostName(id)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", netnsName(id))); err == nil {
		return run(ctx, "ip", "netns", "del", netnsName(id))
	}
	return nil
}

// dialInNetns dials addr from inside the network namespace at nsPath: the
// socket is made on a thread switched into the namespace, which is
// switched back before the thread is released.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("enter network namespace %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		// A thread that cannot go back stays locked, so the runtime ends it
		// with this goroutine rather than reusing it in the wrong namespace.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
