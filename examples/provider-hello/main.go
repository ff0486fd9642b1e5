// Command amelia-provider-hello is an example third-party sandbox provider
// for Amelia. It imports nothing of Amelia's but the provider contract
// (plugins/sdk, and sdk/sdktest in its test), and shows the whole extension
// story: build it as amelia-provider-hello, put it on
// $AMELIA_PLUGIN_PATH, and `amelia plugin ls` lists it; profiles can then say
// `sandbox: {provider: hello}`.
//
// Its sandboxes are directories, and commands run as host processes in them:
// like Amelia's local provider it isolates nothing. A real provider would
// start a VM or a container in EnsureRunning and exec into it.
//
// Its exec is os/exec and a process group of the command's own; a provider
// may instead use the SDK's optional toolkit, whose sdk/toolkit/hostproc
// does the same with more care (output spliced, descendants that escape
// the group cut off).
//
// It fails closed, as every provider must: it declares network open only,
// no TTY and no root, and refuses each of them, and an exec asking for any
// user (it runs commands as its own), with sdk.ErrUnsupported;
// sdk.DecodeSettings refuses a settings key it does not know, and
// ValidateSettings reports it to `amelia config validate` before anything
// starts. The conformance kit (main_test.go) checks all of it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func main() {
	sdk.Serve(&hello{defaultRoot: filepath.Join(os.TempDir(), "amelia-hello")})
}

type hello struct {
	defaultRoot string
}

// settings is the profile's `hello:` block.
type settings struct {
	Root string `json:"root"`
}

// settings reads and checks a profile's hello block.
func (h *hello) settings(config json.RawMessage) (settings, error) {
	s := settings{Root: h.defaultRoot}
	if err := sdk.DecodeSettings(config, "hello", &s); err != nil {
		return s, err
	}
	if !filepath.IsAbs(s.Root) {
		return s, sdk.InvalidSetting("hello", "root", "must be an absolute directory, got %q", s.Root)
	}
	return s, nil
}

// dir is where the sandbox named by ref lives.
func (h *hello) dir(ref sdk.SandboxRef) (string, error) {
	s, err := h.settings(ref.Config)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.Root, ref.Name), nil
}

// ValidateSettings lets `amelia config validate` check a profile's hello
// block (every problem, at its key) before anything starts. Network open,
// the only mode hello declares, needs no settings.
func (h *hello) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	_, err := h.settings(req.Config)
	return sdk.SettingsProblems(err)
}

func (h *hello) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:         "hello",
		Version:      "0.1.0",
		Description:  "example third-party provider: a directory per sandbox, no isolation",
		Capabilities: sdk.Capabilities{EgressModes: []sdk.NetworkMode{sdk.NetworkOpen}},
	}, nil
}

func (h *hello) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if spec.Network.Mode != sdk.NetworkOpen {
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrUnsupported, "hello cannot enforce network %q", spec.Network.Mode)
	}
	dir, err := h.dir(spec.SandboxRef)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return sdk.Sandbox{}, err
	}
	// Mkdir, not a look then a create: of several processes ensuring the
	// sandbox at once, exactly one makes it; the others reuse it.
	err = os.Mkdir(dir, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return sdk.Sandbox{}, err
	}
	return sdk.Sandbox{Ref: spec.SandboxRef, Created: err == nil, Workdir: dir}, nil
}

func (h *hello) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "hello does not allocate terminals")
	}
	if req.User != "" {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "hello runs commands as the plugin's own user; it cannot run them as %q", req.User)
	}
	dir, err := h.dir(req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	if _, err := os.Stat(dir); err != nil {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrNotFound, "hello sandbox %q does not exist", req.Sandbox.Name)
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Dir = req.Dir
	if !filepath.IsAbs(cmd.Dir) {
		cmd.Dir = filepath.Join(dir, req.Dir)
	}
	if fi, err := os.Stat(cmd.Dir); err != nil || !fi.IsDir() {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", req.Dir)
	}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return run(ctx, cmd, eio, req.Grace())
}

// run runs cmd with eio's streams as the leader of a process group of its
// own, so that a cancel reaches everything it started: when ctx ends, the
// group gets SIGTERM, then SIGKILL after grace. It returns once the
// process has exited and its output has all been written to eio.
func run(ctx context.Context, cmd *exec.Cmd, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output: os/exec copies it until the last process holding the pipe
	// closes it (an sdk.PipeWriter, the host's own pipe, takes it from
	// ours in the kernel). Input: fed by a goroutine of ours, which Wait
	// does not wait for, since the host's stdin may outlast the process.
	cmd.Stdout, cmd.Stderr = eio.Stdout, eio.Stderr
	var stdin *os.File
	switch in := eio.Stdin.(type) {
	case nil:
	case *sdk.PipeReader:
		cmd.Stdin = in.File() // the host's own pipe, read by the process itself
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return sdk.ExitStatus{}, fmt.Errorf("stdin pipe: %w", err)
		}
		defer r.Close()
		cmd.Stdin, stdin = r, w
	}
	if err := cmd.Start(); err != nil {
		if stdin != nil {
			stdin.Close()
		}
		return startFailed(cmd, err, eio.Stderr)
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, eio.Stdin)
			stdin.Close()
		}()
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	err := cmd.Wait()
	close(exited)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return sdk.ExitStatus{}, fmt.Errorf("wait for %s: %w", cmd.Path, err)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return sdk.ExitStatus{Code: 128 + int(ws.Signal()), Signal: signalNames[ws.Signal()]}, nil
	}
	return sdk.ExitStatus{Code: cmd.ProcessState.ExitCode()}, nil
}

// startFailed is the result of a command that could not start: one that
// cannot be found or run ends as in a shell, with exit code 127 or 126
// and a message on stderr.
func startFailed(cmd *exec.Cmd, err error, stderr io.Writer) (sdk.ExitStatus, error) {
	st := sdk.ExitStatus{Code: 127}
	reason := "command not found"
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, fs.ErrPermission):
		st.Code, reason = 126, "permission denied"
	default:
		return sdk.ExitStatus{}, err
	}
	if stderr != nil {
		fmt.Fprintf(stderr, "%s: %s\n", cmd.Args[0], reason)
	}
	return st, nil
}

// signalNames are the names, without "SIG", of the signals that commonly
// end a process; the exit status of one killed by another has its code
// (128+N) alone.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGABRT: "ABRT",
	syscall.SIGKILL: "KILL", syscall.SIGSEGV: "SEGV", syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM",
	syscall.SIGTERM: "TERM", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2",
}

func (h *hello) Teardown(_ context.Context, ref sdk.SandboxRef) error {
	dir, err := h.dir(ref)
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func (h *hello) HealthCheck(_ context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	dir, err := h.dir(ref)
	if err != nil {
		return sdk.Health{}, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return sdk.Health{}, sdk.Errorf(sdk.ErrNotFound, "hello sandbox %q does not exist", ref.Name)
	}
	return sdk.Health{State: sdk.HealthReady}, nil
}
