//go:build unix

package sdktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// reference is the smallest provider that keeps the whole contract, for
// the kit's self-tests: a sandbox is a directory under the settings' root,
// and commands run in it as processes of this machine, through
// sdk/toolkit/hostproc, as the user running the test. It declares network open
// only, no TTY, no root and no resource limits.
type reference struct {
	me string // the user commands run as
	// cred, when set, is who commands run as instead (a broken variant
	// uses it).
	cred *syscall.Credential

	mu      sync.Mutex
	running map[string]map[*hostproc.Process]bool // sandbox directory → its execs
}

func newReference(t *testing.T) *reference {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	r := &reference{me: u.Username, running: map[string]map[*hostproc.Process]bool{}}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// referenceSettings is the reference provider's settings block.
type referenceSettings struct {
	Root string `json:"root"`
	// Dirs names the sandbox's directories: a nested block, where the
	// kit's Settings group puts an unknown key too.
	Dirs struct {
		// Work is the working directory, inside the sandbox's.
		Work string `json:"work"`
	} `json:"dirs"`
}

func settingsFor(root string) json.RawMessage {
	s := referenceSettings{Root: root}
	s.Dirs.Work = "work"
	b, _ := json.Marshal(s)
	return b
}

// referenceMarker is a sandbox's marker file: it exists while the sandbox
// does, and holds its labels.
type referenceMarker struct {
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"created"`
}

const markerName = ".reference-sandbox"

// settings reads and checks a settings block.
func (r *reference) settings(config json.RawMessage) (referenceSettings, error) {
	var s referenceSettings
	if err := sdk.DecodeSettings(config, "reference", &s); err != nil {
		return s, err
	}
	if !filepath.IsAbs(s.Root) {
		return s, sdk.InvalidSetting("reference", "root", "must be an absolute directory, got %q", s.Root)
	}
	if s.Dirs.Work == "" {
		s.Dirs.Work = "work"
	}
	if !filepath.IsLocal(s.Dirs.Work) {
		return s, sdk.InvalidSetting("reference", "dirs.work", "%q is not a directory inside the sandbox's", s.Dirs.Work)
	}
	return s, nil
}

// ValidateSettings checks a settings block; network open, the only mode
// it enforces, needs no settings.
func (r *reference) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	_, err := r.settings(req.Config)
	return sdk.SettingsProblems(err)
}

// paths are the directory of the sandbox ref names and its working
// directory, from one reading of its settings.
func (r *reference) paths(ref sdk.SandboxRef) (dir, work string, err error) {
	s, err := r.settings(ref.Config)
	if err != nil {
		return "", "", err
	}
	dir = filepath.Join(s.Root, ref.Name)
	return dir, filepath.Join(dir, s.Dirs.Work), nil
}

// existing is paths of a sandbox that exists, or ErrNotFound.
func (r *reference) existing(ref sdk.SandboxRef) (dir, work string, err error) {
	dir, work, err = r.paths(ref)
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(dir, markerName)); err != nil {
		return "", "", sdk.Errorf(sdk.ErrNotFound, "sandbox %q does not exist", ref.Name)
	}
	return dir, work, nil
}

func (r *reference) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:         "reference",
		Version:      "test",
		Description:  "the conformance kit's reference: directories and host processes, no isolation",
		Capabilities: sdk.Capabilities{EgressModes: []sdk.NetworkMode{sdk.NetworkOpen}},
	}, nil
}

func (r *reference) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if spec.Network.Mode != sdk.NetworkOpen {
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrUnsupported, "the reference provider cannot enforce network %q", spec.Network.Mode)
	}
	dir, work, err := r.paths(spec.SandboxRef)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return sdk.Sandbox{}, fmt.Errorf("create sandbox %q: %w", spec.Name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, markerName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	created := err == nil
	switch {
	case created:
		err = json.NewEncoder(f).Encode(referenceMarker{Labels: spec.Labels, Created: time.Now()})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	case errors.Is(err, fs.ErrExist):
		err = nil
	}
	if err != nil {
		return sdk.Sandbox{}, fmt.Errorf("create sandbox %q: %w", spec.Name, err)
	}
	return sdk.Sandbox{Ref: spec.SandboxRef, Created: created, Workdir: work}, nil
}

func (r *reference) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the reference provider does not allocate terminals")
	}
	switch req.User {
	case "":
	case "root":
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the reference provider does not run commands as root")
	case r.me:
	default:
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the reference provider runs commands as %s, not %q", r.me, req.User)
	}
	dir, work, err := r.existing(req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	switch {
	case filepath.IsAbs(req.Dir):
		cmd.Dir = req.Dir
	default:
		cmd.Dir = filepath.Join(work, req.Dir)
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, sandboxTag(dir)}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if r.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	}
	proc, err := hostproc.Start(cmd, eio)
	if err != nil {
		return hostproc.StartFailed(cmd, err, eio.Stderr)
	}
	r.track(dir, proc, true)
	defer r.track(dir, proc, false)
	return proc.Wait(ctx, req.Grace())
}

// sandboxTag is in the environment of every exec in the sandbox at dir.
func sandboxTag(dir string) string { return "SDKTEST_REFERENCE_SANDBOX=" + dir }

func (r *reference) track(dir string, proc *hostproc.Process, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[dir] == nil {
		r.running[dir] = map[*hostproc.Process]bool{}
	}
	if on {
		r.running[dir][proc] = true
	} else {
		delete(r.running[dir], proc)
	}
}

// kill SIGKILLs the execs of the sandbox in dir, or of every sandbox.
func (r *reference) kill(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for d, procs := range r.running {
		if dir == "" || d == dir {
			for p := range procs {
				p.Kill()
			}
		}
	}
}

func (r *reference) Teardown(_ context.Context, ref sdk.SandboxRef) error {
	dir, _, err := r.paths(ref)
	if err != nil {
		return err
	}
	r.kill(dir)
	hostproc.KillTagged(sandboxTag(dir)) // what escaped the execs' groups
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox %q: %w", ref.Name, err)
	}
	return nil
}

func (r *reference) HealthCheck(_ context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	if _, _, err := r.existing(ref); err != nil {
		return sdk.Health{}, err
	}
	return sdk.Health{State: sdk.HealthReady}, nil
}

func (r *reference) List(_ context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	s, err := r.settings(req.Config)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.Root)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes in %s: %w", s.Root, err)
	}
	var out []sdk.Listed
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(s.Root, e.Name(), markerName))
		var m referenceMarker
		if err != nil || json.Unmarshal(b, &m) != nil || !req.Matches(m.Labels) {
			continue
		}
		out = append(out, sdk.Listed{
			Ref:     sdk.SandboxRef{Name: e.Name(), Config: req.Config},
			Labels:  m.Labels,
			State:   sdk.HealthReady,
			Created: m.Created,
		})
	}
	return out, nil
}

// Forward listens on this machine's loopback, which is the sandbox's, and
// pipes each connection to the target until ctx ends.
func (r *reference) Forward(ctx context.Context, req sdk.ForwardRequest, listening func(addr string)) error {
	if _, _, err := r.existing(req.Sandbox); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = lis.Close() })
	defer stop()
	listening(lis.Addr().String())
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward: %w", err)
		}
		wg.Go(func() { _ = netpipe.Forward(ctx, c, req.Target) })
	}
}

// Close kills every exec still running.
func (r *reference) Close() error {
	r.kill("")
	return nil
}
