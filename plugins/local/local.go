//go:build unix

// Package local is the "local" sandbox provider (alias "none"): it runs
// commands as subprocesses of the host in a scratch directory per sandbox.
// It isolates nothing — commands run as the current user, with the user's
// files and network — and says so in its Info. It exists so that Amelia runs
// on a machine without Docker, and as the fast path for testing the layers
// above the provider contract.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
)

// Name is the provider's name; Alias is the other name profiles may use.
const (
	Name  = "local"
	Alias = "none"
)

// markerFile identifies a directory as a local sandbox; Teardown deletes
// nothing without it.
const markerFile = ".amelia-sandbox"

// sandboxIDEnv is set in every process of a sandbox, so Teardown can find
// processes that outlived their exec.
const sandboxIDEnv = "AMELIA_SANDBOX_ID"

// hostEnvKeys are the only host variables a sandbox process inherits; the
// host's secrets (API keys, tokens) stay out.
var hostEnvKeys = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME"}

// Options configure the provider.
type Options struct {
	// Version is reported by Info.
	Version string
	// DefaultRoot holds the sandboxes when a profile sets no local.root.
	DefaultRoot string
	// HostEnv is the host's environment (os.Environ()); only hostEnvKeys
	// are passed on.
	HostEnv []string
	Logger  *slog.Logger
}

// Provider is the local provider.
type Provider struct {
	opts    Options
	baseEnv []string
	user    string

	mu      sync.Mutex
	running map[*hostproc.Process]string // live execs → sandbox dir
}

// New returns the local provider.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Provider{opts: opts, running: map[*hostproc.Process]string{}}
	for _, kv := range opts.HostEnv {
		k, _, _ := strings.Cut(kv, "=")
		for _, want := range hostEnvKeys {
			if k == want {
				p.baseEnv = append(p.baseEnv, kv)
			}
		}
	}
	if u, err := user.Current(); err == nil {
		p.user = u.Username
	}
	return p
}

// settings is the profile's `local:` block.
type settings struct {
	// Root is the directory holding the sandboxes.
	Root string `json:"root"`
}

// marker is the content of markerFile: the sandbox's id, and the labels
// and time it was created with (absent in markers of older versions).
type marker struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created,omitzero"`
}

// sandbox is a resolved local sandbox: where it lives.
type sandbox struct {
	name string
	dir  string
}

func (s sandbox) workdir() string { return filepath.Join(s.dir, "workspace") }
func (s sandbox) home() string    { return filepath.Join(s.dir, "home") }
func (s sandbox) tmp() string     { return filepath.Join(s.dir, "tmp") }
func (s sandbox) marker() string  { return filepath.Join(s.dir, markerFile) }

func (p *Provider) resolve(ref sdk.SandboxRef) (sandbox, error) {
	root, err := p.root(ref.Config)
	if err != nil {
		return sandbox{}, err
	}
	return sandbox{name: ref.Name, dir: filepath.Join(root, ref.Name)}, nil
}

// root is the directory holding the sandboxes of a profile's settings.
func (p *Provider) root(config json.RawMessage) (string, error) {
	var set settings
	if err := sdk.DecodeSettings(config, Name, &set); err != nil {
		return "", err
	}
	root := set.Root
	if root == "" {
		root = p.opts.DefaultRoot
	}
	if root == "" || !filepath.IsAbs(root) {
		return "", sdk.InvalidSetting(Name, "root", "must be an absolute directory, got %q", root)
	}
	return root, nil
}

// ValidateSettings checks a profile's local block. The network policy
// needs no settings: local enforces open, and only open, which Info says.
func (p *Provider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	_, err := p.root(req.Config)
	return sdk.SettingsProblems(err)
}

// readMarker returns the sandbox's id, or ErrNotFound.
func (s sandbox) readMarker() (marker, error) {
	b, err := os.ReadFile(s.marker())
	if errors.Is(err, fs.ErrNotExist) {
		return marker{}, sdk.Errorf(sdk.ErrNotFound, "local sandbox %q does not exist (no %s)", s.name, s.marker())
	}
	if err != nil {
		return marker{}, fmt.Errorf("read local sandbox %q: %w", s.name, err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return marker{}, fmt.Errorf("local sandbox %q: %s is damaged; remove %s by hand", s.name, s.marker(), s.dir)
	}
	return m, nil
}

func (p *Provider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:        Name,
		Version:     p.opts.Version,
		Description: "runs commands as host subprocesses in a scratch directory; isolates nothing",
		Capabilities: sdk.Capabilities{
			EgressModes: []sdk.NetworkMode{sdk.NetworkOpen},
			Isolated:    false,
		},
	}, nil
}

func (p *Provider) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if spec.Network.Mode != sdk.NetworkOpen {
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrUnsupported,
			"the local provider cannot enforce network %q: its commands use this machine's network; use a provider such as docker for %q", spec.Network.Mode, spec.Network.Mode)
	}
	sb, err := p.resolve(spec.SandboxRef)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	for _, d := range []string{sb.workdir(), sb.home(), sb.tmp()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return sdk.Sandbox{}, fmt.Errorf("create local sandbox %q: %w", sb.name, err)
		}
	}
	created, err := sb.createMarker(spec.Labels)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	m, err := sb.readMarker()
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if created {
		p.opts.Logger.Info("created local sandbox", "sandbox", sb.name, "dir", sb.dir)
	}
	ref := spec.SandboxRef
	ref.ID = m.ID
	return sdk.Sandbox{Ref: ref, Created: created, Workdir: sb.workdir(), Details: map[string]string{"dir": sb.dir}}, nil
}

// createMarker writes the marker unless it exists; it reports whether it did.
// The marker appears whole or not at all (written aside, then hard-linked
// into place, which fails if it exists), so a concurrent EnsureRunning never
// reads a half-written one.
func (s sandbox) createMarker(labels map[string]string) (bool, error) {
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	b, _ := json.Marshal(marker{ID: hex.EncodeToString(id), Labels: labels, Created: time.Now().UTC()})
	f, err := os.CreateTemp(s.dir, markerFile+".*")
	if err != nil {
		return false, fmt.Errorf("create local sandbox %q: %w", s.name, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(f.Name(), s.marker())
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create local sandbox %q: %w", s.name, err)
	}
	return true, nil
}

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the local provider does not allocate terminals")
	}
	switch {
	case req.User == "root":
		// Even when the current user is root: Info does not declare
		// ExecAsRoot, so root is never asked for and never given.
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the local provider does not run commands as root")
	case req.User != "" && req.User != p.user:
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the local provider runs commands as the current user %q; it cannot run them as %q", p.user, req.User)
	}
	sb, err := p.resolve(req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	m, err := sb.readMarker()
	if err != nil {
		return sdk.ExitStatus{}, err
	}

	env := append([]string(nil), p.baseEnv...)
	env = append(env, "HOME="+sb.home(), "TMPDIR="+sb.tmp(), "AMELIA_SANDBOX="+sb.name)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, sandboxIDEnv+"="+m.ID) // last, so it cannot be overridden

	dir := req.Dir
	switch {
	case dir == "":
		dir = sb.workdir()
	case !filepath.IsAbs(dir):
		dir = filepath.Join(sb.workdir(), dir)
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	if path, ok := req.Env["PATH"]; ok && !strings.Contains(req.Argv[0], "/") {
		cmd = exec.Command(lookPath(req.Argv[0], path), req.Argv[1:]...)
		cmd.Args[0] = req.Argv[0]
	}
	cmd.Env = env
	cmd.Dir = dir

	proc, err := hostproc.Start(cmd, eio)
	if err != nil {
		return hostproc.StartFailed(cmd, err, eio.Stderr)
	}
	p.track(proc, sb.dir)
	defer p.untrack(proc)
	return proc.Wait(ctx, req.Grace())
}

// lookPath finds name in the exec's own PATH rather than the plugin's; a
// name it cannot find is returned as-is so Start reports it as not found.
func lookPath(name, path string) string {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		c := filepath.Join(dir, name)
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return c
		}
	}
	return name
}

func (p *Provider) track(proc *hostproc.Process, dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[proc] = dir
}

func (p *Provider) untrack(proc *hostproc.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, proc)
}

// killRunning SIGKILLs the execs running in dir ("" for all sandboxes).
func (p *Provider) killRunning(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for proc, d := range p.running {
		if dir == "" || d == dir {
			proc.Kill()
		}
	}
}

func (p *Provider) Teardown(_ context.Context, ref sdk.SandboxRef) error {
	sb, err := p.resolve(ref)
	if err != nil {
		return err
	}
	m, err := sb.readMarker()
	if errors.Is(err, sdk.ErrNotFound) {
		if _, statErr := os.Stat(sb.dir); statErr == nil {
			return sdk.Errorf(sdk.ErrConflict, "refusing to delete %s: it is not a local sandbox (no %s)", sb.dir, markerFile)
		}
		return nil
	}
	if err != nil {
		return err
	}
	p.killRunning(sb.dir)
	hostproc.KillTagged(sandboxIDEnv + "=" + m.ID)
	if err := removeAll(sb.dir); err != nil {
		return fmt.Errorf("remove local sandbox %q: %w", sb.name, err)
	}
	p.opts.Logger.Info("removed local sandbox", "sandbox", sb.name, "dir", sb.dir)
	return nil
}

// removeAll removes dir even when the work left read-only directories in it
// (Go's module cache does that).
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

func (p *Provider) HealthCheck(_ context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	sb, err := p.resolve(ref)
	if err != nil {
		return sdk.Health{}, err
	}
	if _, err := sb.readMarker(); err != nil {
		return sdk.Health{}, err
	}
	if fi, err := os.Stat(sb.workdir()); err != nil || !fi.IsDir() {
		return sdk.Health{State: sdk.HealthUnhealthy, Message: "workspace directory is missing: " + sb.workdir()}, nil
	}
	return sdk.Health{State: sdk.HealthReady, Message: sb.dir}, nil
}

// List lists the sandboxes under the settings' root whose markers carry
// every label asked for. A local sandbox that exists is ready, unless its
// workspace directory is gone.
func (p *Provider) List(_ context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	root, err := p.root(req.Config)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list local sandboxes in %s: %w", root, err)
	}
	var out []sdk.Listed
	for _, e := range entries {
		if !e.IsDir() || !sdk.ValidName(e.Name()) {
			continue
		}
		sb := sandbox{name: e.Name(), dir: filepath.Join(root, e.Name())}
		m, err := sb.readMarker()
		if err != nil || !req.Matches(m.Labels) {
			continue // not a sandbox, or not one asked for
		}
		state := sdk.HealthReady
		if fi, err := os.Stat(sb.workdir()); err != nil || !fi.IsDir() {
			state = sdk.HealthUnhealthy
		}
		out = append(out, sdk.Listed{
			Ref:     sdk.SandboxRef{Name: sb.name, ID: m.ID, Config: req.Config},
			Labels:  m.Labels,
			State:   state,
			Created: m.Created,
		})
	}
	return out, nil
}

// Close kills every exec still running; the SDK calls it when the plugin
// stops.
func (p *Provider) Close() error {
	p.killRunning("")
	return nil
}
