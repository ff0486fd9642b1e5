package main_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// Side-by-side benchmarks of amelia sandbox cp: a 1 GiB file and a
// 20,000-file tree, each way, against docker cp on docker, scp /
// tar | ssh on ssh, the Daytona SDK's toolbox file transfers on Daytona
// (the fake) and kubectl cp on Kubernetes, in the same sandbox. Each
// round removes what the last one copied first (not timed). Figures:
// docs/performance.md.

const (
	benchFileSize  = 1 << 30
	benchTreeFiles = 20_000
	benchTreeDirs  = 200
	benchTreeFile  = 4 << 10
)

// benchData makes, once per benchmark, the 1 GiB file (incompressible
// blocks) and the tree of benchTreeFiles files, and returns their paths
// and the tree's byte count.
func benchData(b *testing.B) (file, tree string, treeBytes int64) {
	b.Helper()
	dir := b.TempDir()
	file = filepath.Join(dir, "big.bin")
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{1})
	block := make([]byte, 1<<20)
	for range benchFileSize / len(block) {
		rng.Read(block)
		if _, err := f.Write(block); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	tree = filepath.Join(dir, "tree")
	body := make([]byte, benchTreeFile)
	for i := range benchTreeFiles {
		d := filepath.Join(tree, fmt.Sprintf("d%03d", i%benchTreeDirs))
		if i < benchTreeDirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		rng.Read(body)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return file, tree, benchTreeFiles * benchTreeFile
}

// copyCase is one direction of one payload: ours and the baseline's
// copy for round i, and what to remove before each.
type copyCase struct {
	name       string
	bytes      int64
	ours, base func(i int) error
	clean      func()
}

// cmdStep is a copy done by a command: it fails with the command's
// stderr.
func cmdStep(cmd func(i int) *exec.Cmd) func(int) error {
	return func(i int) error {
		c := cmd(i)
		var errb bytes.Buffer // kubectl says some of its errors on stdout
		c.Stdout, c.Stderr = &errb, &errb
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(c.Args, " "), err, errb.String())
		}
		return nil
	}
}

// runCopyCases times each case's ours and base once per round of b.Loop
// and reports their throughputs and ratio as benchtest.Throughput does.
func runCopyCases(b *testing.B, baseName string, cases []copyCase) {
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var ours, base time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				c.clean()
				b.StartTimer()
				ours += timeStep(b, c.ours, i)
				b.StopTimer()
				c.clean()
				b.StartTimer()
				base += timeStep(b, c.base, i)
				i++
			}
			benchtest.Throughput(b, c.bytes, ours, base, "amelia", baseName)
		})
	}
}

func timeStep(b *testing.B, step func(int) error, i int) time.Duration {
	b.Helper()
	start := time.Now()
	if err := step(i); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// mustShell runs a shell command on this host.
func mustShell(b *testing.B, script string) {
	b.Helper()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// copyBench is a sandbox's side of a copy benchmark: the data on the
// host and, for the copies out, in the sandbox's src/ (put there once,
// untimed), and the host directory copies out go to.
type copyBench struct {
	h                   *host
	workdir, file, tree string
	out                 string
	treeBytes           int64
	// fresh: copies in go to new names each round (ours0.bin, ours0...),
	// as what the baseline wrote may not be removable; else into the
	// workdir under the data's names, removed between rounds.
	fresh bool
}

// newCopyBench makes the data and puts it in the sandbox's src/.
func newCopyBench(b *testing.B, h *host) *copyBench {
	b.Helper()
	cb := &copyBench{h: h, workdir: strings.TrimSpace(h.mustAmelia(b, "sandbox", "exec", "--", "pwd").stdout), out: b.TempDir()}
	cb.file, cb.tree, cb.treeBytes = benchData(b)
	h.mustAmelia(b, "sandbox", "exec", "--", "mkdir", "-p", "src")
	h.mustAmelia(b, "sandbox", "cp", cb.file, ":src/")
	h.mustAmelia(b, "sandbox", "cp", cb.tree, ":src/")
	return cb
}

// run runs the four cases, amelia sandbox cp against the baseline's
// copies: the file in and out, the tree in and out.
func (cb *copyBench) run(b *testing.B, baseName string, fileIn, fileOut, treeIn, treeOut func(i int) error) {
	into := func(i int, name string) string {
		if cb.fresh {
			return fmt.Sprintf(":ours%d%s", i, path.Ext(name))
		}
		return ":"
	}
	cleanIn := func() {
		if !cb.fresh {
			cb.h.mustAmelia(b, "sandbox", "exec", "--", "sh", "-c", "rm -rf big.bin tree")
		}
	}
	cleanOut := func() { mustShell(b, "rm -rf "+cb.out+"/*") }
	cp := func(src func(i int) string, dst func(i int) string) func(int) error {
		return cmdStep(func(i int) *exec.Cmd { return cb.h.command("sandbox", "cp", src(i), dst(i)) })
	}
	is := func(s string) func(int) string { return func(int) string { return s } }
	runCopyCases(b, baseName, []copyCase{
		{"1GiB-in", benchFileSize, cp(is(cb.file), func(i int) string { return into(i, cb.file) }), fileIn, cleanIn},
		{"1GiB-out", benchFileSize, cp(is(":src/big.bin"), is(cb.out)), fileOut, cleanOut},
		{"20k-files-in", cb.treeBytes, cp(is(cb.tree), func(i int) string { return into(i, cb.tree) }), treeIn, cleanIn},
		{"20k-files-out", cb.treeBytes, cp(is(":src/tree"), is(cb.out)), treeOut, cleanOut},
	})
}

func BenchmarkFilesOnDocker(b *testing.B) {
	cli := dockertest.Engine(b)
	h := newHostWith(b, dockerSandbox("open"), "", llmtest.Options{})
	label := "amelia.config=" + h.configPath()
	dockertest.RemoveContainers(b, cli, label)
	h.mustAmelia(b, "sandbox", "up")
	list, err := cli.ContainerList(b.Context(), client.ContainerListOptions{Filters: make(client.Filters).Add("label", label)})
	if err != nil || len(list.Items) != 1 {
		b.Fatalf("find the sandbox's container: %v", err)
	}
	ctr := list.Items[0].ID
	cb := newCopyBench(b, h)
	// docker cp writes as root, which nothing in the sandbox may remove
	// (its root has no capabilities): each round copies in to new names.
	cb.fresh = true
	docker := func(args ...string) func(int) error {
		return cmdStep(func(int) *exec.Cmd { return exec.Command("docker", args...) })
	}
	cb.run(b, "docker-cp",
		func(i int) error { return docker("cp", cb.file, fmt.Sprintf("%s:/workspace/base%d.bin", ctr, i))(i) },
		docker("cp", ctr+":/workspace/src/big.bin", cb.out),
		func(i int) error { return docker("cp", cb.tree, fmt.Sprintf("%s:/workspace/base%d", ctr, i))(i) },
		docker("cp", ctr+":/workspace/src/tree", cb.out))
}

func BenchmarkFilesOnSSH(b *testing.B) {
	srv := sshtest.Start(b, sshtest.Options{})
	root := b.TempDir()
	h := newHostWith(b, sshSandbox(b, srv, root), root, llmtest.Options{})
	b.Cleanup(func() { h.amelia(b, "sandbox", "down") })
	cb := newCopyBench(b, h)
	sshOpts := []string{"-i", srv.ClientKey, "-o", "UserKnownHostsFile=" + srv.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-c", "aes128-gcm@openssh.com"}
	scp := func(args ...string) func(int) error {
		return cmdStep(func(int) *exec.Cmd {
			return exec.Command("scp", append(append(append([]string{"-O"}, sshOpts...), "-P", strconv.Itoa(srv.Port)), args...)...) // the test sshd has no sftp subsystem
		})
	}
	shell := func(script string) func(int) error {
		return cmdStep(func(int) *exec.Cmd { return exec.Command("sh", "-c", script) })
	}
	sshCmd := "ssh " + strings.Join(sshOpts, " ") + " -p " + strconv.Itoa(srv.Port) + " " + srv.User + "@" + srv.Host
	remote := srv.User + "@" + srv.Host + ":"
	cb.run(b, "openssh",
		scp(cb.file, remote+cb.workdir+"/"),
		scp(remote+cb.workdir+"/src/big.bin", cb.out+"/"),
		shell("tar -C "+filepath.Dir(cb.tree)+" -cf - tree | "+sshCmd+" tar -C "+cb.workdir+" -xf -"),
		shell(sshCmd+" tar -C "+cb.workdir+"/src -cf - tree | tar -C "+cb.out+" -xf -"))
}

// treeTransfers pairs each file of the tree at local with its path
// under remote.
func treeTransfers(b *testing.B, local, remote string) []daytonatest.Transfer {
	b.Helper()
	var out []daytonatest.Transfer
	err := filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		out = append(out, daytonatest.Transfer{Local: p, Remote: path.Join(remote, filepath.ToSlash(rel))})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// On Daytona (the fake, its sandboxes containers of the real engine),
// the baseline is what Daytona's SDKs do: one toolbox bulk-upload or
// bulk-download request with every file (daytonatest.ToolboxFiles).
func BenchmarkFilesOnDaytona(b *testing.B) {
	cli := dockertest.Engine(b)
	f := daytonatest.Start(b, daytonatest.Options{Docker: cli})
	h := newHostWith(b, daytonaSandbox(b, f, "open"), "", llmtest.Options{})
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	b.Cleanup(func() { h.amelia(b, "sandbox", "down") })
	h.mustAmelia(b, "sandbox", "up")
	boxes := f.Sandboxes()
	if len(boxes) != 1 {
		b.Fatalf("the fake has %d sandboxes; want the one amelia made", len(boxes))
	}
	toolbox := f.Toolbox(boxes[0].ID)
	cb := newCopyBench(b, h)
	treeIn := treeTransfers(b, cb.tree, cb.workdir+"/tree")
	treeOut := treeTransfers(b, cb.tree, cb.workdir+"/src/tree")
	for i := range treeOut { // the same names, brought out under out
		rel, _ := filepath.Rel(cb.tree, treeOut[i].Local)
		treeOut[i].Local = filepath.Join(cb.out, "tree", rel)
	}
	ctx := b.Context()
	cb.run(b, "daytona-sdk",
		func(int) error {
			return toolbox.Upload(ctx, []daytonatest.Transfer{{Local: cb.file, Remote: cb.workdir + "/big.bin"}})
		},
		func(int) error {
			return toolbox.Download(ctx, []daytonatest.Transfer{{Local: filepath.Join(cb.out, "big.bin"), Remote: cb.workdir + "/src/big.bin"}})
		},
		func(int) error { return toolbox.Upload(ctx, treeIn) },
		func(int) error { return toolbox.Download(ctx, treeOut) })
}

// On Kubernetes (the real test cluster), the baseline is kubectl cp
// (of the cluster's version) to and from the sandbox's pod; out, with
// --retries, kubectl's own answer to a stream cut short ("unexpected
// EOF" on the tree, seen at load 12), which resumes the tar where it
// broke.
func BenchmarkFilesOnKubernetes(b *testing.B) {
	c := k8stest.Start(b)
	ns := c.Namespace(b)
	h := newHostWith(b, kubernetesSandbox(c, ns, "open", nil), "", llmtest.Options{})
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	b.Cleanup(func() { h.amelia(b, "sandbox", "down") })
	h.mustAmelia(b, "sandbox", "up")
	pods, err := c.Client(b).CoreV1().Pods(ns).List(b.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"})
	if err != nil || len(pods.Items) != 1 {
		b.Fatalf("the sandbox's pod: %v, %v", pods, err)
	}
	pod := pods.Items[0].Name
	cb := newCopyBench(b, h)
	kubectl := func(args ...string) func(int) error {
		return cmdStep(func(int) *exec.Cmd {
			return exec.CommandContext(b.Context(), c.Kubectl(), append([]string{"--kubeconfig", c.Kubeconfig(), "--namespace", ns, "cp", "-c", "sandbox"}, args...)...)
		})
	}
	inPod := ns + "/" + pod + ":" + cb.workdir
	cb.run(b, "kubectl-cp",
		kubectl(cb.file, inPod+"/big.bin"),
		kubectl("--retries=3", inPod+"/src/big.bin", filepath.Join(cb.out, "big.bin")),
		kubectl(cb.tree, inPod+"/tree"),
		kubectl("--retries=3", inPod+"/src/tree", filepath.Join(cb.out, "tree")))
}
