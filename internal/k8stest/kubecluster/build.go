package kubecluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/amelia-sandbox/amelia/internal/gobuildcache"
)

// The versions the cluster is built from: Kubernetes from its module on the
// Go module proxy (the tag's zip lacks staging/, so its go.mod is pointed at
// the published staging modules), and the Agent Sandbox controller.
//
// kube-router is the network plugin part that enforces NetworkPolicies on
// one node. v2.1.0 is the only version the module proxy serves; it runs
// only inside the cluster's own network namespace, with its BGP router and
// service proxy off, so its reported flaws (in those) do not reach the host.
const (
	KubernetesVersion   = "v1.34.4"
	AgentSandboxVersion = "v0.5.6"
	KubeRouterVersion   = "v2.1.0"

	kubernetesModule   = "k8s.io/kubernetes"
	agentSandboxModule = "sigs.k8s.io/agent-sandbox"
	kubeRouterModule   = "github.com/cloudnativelabs/kube-router/v2"
)

// kubeCommands are the Kubernetes binaries built into bin/.
var kubeCommands = []string{"kube-apiserver", "kubelet", "kube-scheduler", "kube-controller-manager", "kubectl"}

// CacheEnv names the directory the built binaries are cached in.
const CacheEnv = "AMELIA_KUBE_CACHE"

// CacheDir is where built binaries are cached: $AMELIA_KUBE_CACHE, else
// amelia/kubernetes under the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache).
func CacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory for the Kubernetes binaries (set %s): %w", CacheEnv, err)
	}
	return filepath.Join(d, "amelia", "kubernetes"), nil
}

// Binaries are the paths of a cached build.
type Binaries struct {
	// Kube is the directory of kube-apiserver, kubelet, kube-scheduler,
	// kube-controller-manager and kubectl.
	Kube string
	// Controller is the agent-sandbox-controller binary.
	Controller string
	// CRDs is the directory of the Agent Sandbox CRDs (*.yaml).
	CRDs string
	// PauseImage is an OCI archive of the pods' sandbox (pause) image.
	PauseImage string
	// Router is the kube-router binary, whose network policy controller
	// enforces NetworkPolicies on the first node.
	Router string
}

// Bin returns the path of the named Kubernetes binary.
func (b Binaries) Bin(name string) string { return filepath.Join(b.Kube, name) }

// cacheEntries are the cache directories, under the cache root, of one
// build.
type cacheEntries struct{ kube, sandbox, pause, router string }

func entries(root string) cacheEntries {
	return cacheEntries{
		kube:    filepath.Join(root, KubernetesVersion),
		sandbox: filepath.Join(root, "agent-sandbox-"+AgentSandboxVersion),
		pause:   filepath.Join(root, "pause-"+pauseKey()),
		router:  filepath.Join(root, "kube-router-"+KubeRouterVersion),
	}
}

func (e cacheEntries) all() []string { return []string{e.kube, e.sandbox, e.pause, e.router} }

func binaries(root string) Binaries {
	e := entries(root)
	return Binaries{
		Kube:       filepath.Join(e.kube, "bin"),
		Controller: filepath.Join(e.sandbox, "bin", "agent-sandbox-controller"),
		CRDs:       filepath.Join(e.sandbox, "crds"),
		PauseImage: filepath.Join(e.pause, "pause.oci.tar"),
		Router:     filepath.Join(e.router, "bin", "kube-router"),
	}
}

// Cached returns the binaries cached under root, or an error saying how to
// build them when they are not all there.
func Cached(root string) (Binaries, error) {
	for _, d := range entries(root).all() {
		if _, err := os.Stat(d); err != nil {
			return Binaries{}, fmt.Errorf("the Kubernetes test cluster's binaries are not built in %s (%s missing): run make kube-binaries (about 20 minutes the first time)", root, filepath.Base(d))
		}
	}
	return binaries(root), nil
}

// Build fills the cache under root with what Cached needs, building only
// what is missing; what is cached already takes no time (see package
// gobuildcache: concurrent callers build once, and a build cut short
// leaves nothing that counts as built).
func Build(ctx context.Context, root string, log *slog.Logger) (Binaries, error) {
	if b, err := Cached(root); err == nil {
		return b, nil
	}
	e := entries(root)
	if err := gobuildcache.Fill(ctx, root, log, []gobuildcache.Entry{
		{Dir: e.kube, What: "Kubernetes " + KubernetesVersion + " (" + strings.Join(kubeCommands, ", ") + ")", Build: buildKube},
		{Dir: e.sandbox, What: "agent-sandbox-controller " + AgentSandboxVersion + " and its CRDs", Build: buildAgentSandbox},
		{Dir: e.pause, What: "the pause image", Build: buildPause},
		{Dir: e.router, What: "kube-router " + KubeRouterVersion, Build: buildKubeRouter},
	}); err != nil {
		return Binaries{}, err
	}
	return Cached(root)
}

// moduleSource downloads module@version from the module proxy and copies
// its source into dst, writable.
func moduleSource(ctx context.Context, module, version, dst string) error {
	out, err := gobuildcache.Go(ctx, os.TempDir(), []string{"GOFLAGS=-mod=mod", "GOWORK=off"}, "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return err
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return fmt.Errorf("read go mod download's answer: %w", err)
	}
	if m.Error != "" || m.Dir == "" {
		return fmt.Errorf("download %s@%s: %s", module, version, m.Error)
	}
	return copyTree(m.Dir, dst)
}

// copyTree copies the regular files and directories of src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, to)
		}
		return nil
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// stagingReplace matches go.mod's replace lines that point a staging
// module at the tree's staging/ directory, which the module zip lacks.
var stagingReplace = regexp.MustCompile(`(?m)^(\s*)(k8s\.io/[a-z-]+) => \./staging/src/k8s\.io/[a-z-]+$`)

// sampleReplace matches the replace lines of the sample modules, which are
// not published and which no binary needs.
var sampleReplace = regexp.MustCompile(`(?m)^.*k8s\.io/sample-(cli-plugin|controller) =>.*\n`)

// buildKube builds the Kubernetes binaries into tmp/bin.
func buildKube(ctx context.Context, tmp string) error {
	src := filepath.Join(tmp, "src")
	if err := moduleSource(ctx, kubernetesModule, KubernetesVersion, src); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	os.Remove(filepath.Join(src, "go.work"))
	os.Remove(filepath.Join(src, "go.work.sum"))
	gomod := filepath.Join(src, "go.mod")
	b, err := os.ReadFile(gomod)
	if err != nil {
		return err
	}
	staging := "v0" + strings.TrimPrefix(KubernetesVersion, "v1") // v1.34.4 → v0.34.4
	b = sampleReplace.ReplaceAll(b, nil)
	b = stagingReplace.ReplaceAll(b, []byte("${1}${2} => ${2} "+staging))
	if err := os.WriteFile(gomod, b, 0o644); err != nil {
		return err
	}
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := "-s -w -X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
		" -X k8s.io/component-base/version.gitMajor=" + major + " -X k8s.io/component-base/version.gitMinor=" + minor
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(tmp, "bin") + "/"}
	for _, c := range kubeCommands {
		args = append(args, "./cmd/"+c)
	}
	// -trimpath keeps the temporary directory out of the build cache's keys,
	// so a rebuild reuses the compiled packages.
	_, err = gobuildcache.Go(ctx, src, []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"}, args...)
	return err
}

// buildAgentSandbox builds the controller into tmp/bin and copies the CRDs
// into tmp/crds.
func buildAgentSandbox(ctx context.Context, tmp string) error {
	src := filepath.Join(tmp, "src")
	if err := moduleSource(ctx, agentSandboxModule, AgentSandboxVersion, src); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if _, err := gobuildcache.Go(ctx, src, []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"},
		"build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(tmp, "bin")+"/", "./cmd/agent-sandbox-controller"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "crds"), 0o755); err != nil {
		return err
	}
	crds, err := filepath.Glob(filepath.Join(src, "k8s", "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no CRDs in k8s/crds of %s@%s", agentSandboxModule, AgentSandboxVersion)
	}
	for _, c := range crds {
		if err := copyFile(c, filepath.Join(tmp, "crds", filepath.Base(c))); err != nil {
			return err
		}
	}
	return nil
}

// buildKubeRouter builds kube-router into tmp/bin.
func buildKubeRouter(ctx context.Context, tmp string) error {
	src := filepath.Join(tmp, "src")
	if err := moduleSource(ctx, kubeRouterModule, KubeRouterVersion, src); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	_, err := gobuildcache.Go(ctx, src, []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"},
		"build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(tmp, "bin")+"/", "./cmd/kube-router")
	return err
}

// pauseSource is the pods' sandbox process: it waits for a signal to end,
// reaping the children that come to it meanwhile (it is PID 1 of a pod
// that shares its process namespace).
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 8)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range c {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// PauseRef is the pause image's name, which containerd's CRI is
// configured to use for pod sandboxes.
const PauseRef = "registry.k8s.io/pause:3.10"

// pauseKey names the pause image's cache entry by what makes it.
func pauseKey() string {
	h := sha256.Sum256([]byte(pauseSource + runtime.Version() + runtime.GOARCH))
	return hex.EncodeToString(h[:6])
}

// buildPause builds the pause binary statically and writes an OCI image
// archive of it, named PauseRef, to tmp/pause.oci.tar.
func buildPause(ctx context.Context, tmp string) error {
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(src, "pause")
	if _, err := gobuildcache.Go(ctx, src, []string{"GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "."); err != nil {
		return err
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	return writeOCIImage(filepath.Join(tmp, "pause.oci.tar"), PauseRef, "/pause", exe)
}

// writeOCIImage writes an OCI image archive (what `ctr images import`
// reads) of one layer holding exe at entrypoint, named ref.
func writeOCIImage(path, ref, entrypoint string, exe []byte) error {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	lw.Write(exe)
	if err := lw.Close(); err != nil {
		return err
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) desc {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return desc{MediaType: mediaType, Digest: d, Size: len(b)}
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{entrypoint}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        add("application/vnd.oci.image.config.v1+json", config),
		"layers":        []desc{layerDesc},
	})
	m := add("application/vnd.oci.image.manifest.v1+json", manifest)
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	m.Annotations = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []desc{m}})

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	file := func(name string, b []byte) {
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		}
		if err == nil {
			_, err = tw.Write(b)
		}
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir})
		}
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for d, b := range blobs {
		file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
