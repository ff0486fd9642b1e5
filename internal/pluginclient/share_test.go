package pluginclient_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Shared plugins, with the test binary as the plugin and as hosts in
// processes of their own.

const (
	// shareHostEnv makes the test binary a host that Shares the test
	// plugin in the directory it names, prints "pid N" (the plugin's) and
	// waits for its stdin to end.
	shareHostEnv = "AMELIA_SDK_TEST_SHARE_HOST"
	// shareExecEnv makes that host, instead of waiting, run a long exec
	// that writes its process's pid into the file it names.
	shareExecEnv = "AMELIA_SDK_TEST_SHARE_EXEC"
	// rawDialEnv makes the test binary connect to the socket it names
	// and say hello as a host would, then print what came of it: denied
	// (it could not connect), refused (closed without an answer) or
	// answered.
	rawDialEnv = "AMELIA_SDK_TEST_RAW_DIAL"
)

// shareCmd is the test plugin in mode, as every host of these tests
// starts it: the same command and environment, so the same plugin.
func shareCmd(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), testModeEnv + "=" + mode}
	return cmd
}

func shareOpts(dir string, idle time.Duration) pluginclient.ShareOptions {
	return pluginclient.ShareOptions{LaunchOptions: pluginclient.LaunchOptions{Name: "test"}, Dir: dir, Scope: "test", Idle: idle}
}

// shareDir is a directory for a test's shared plugins. When the test ends,
// every plugin that still runs there is stopped and waited for, and the
// directory goes.
func shareDir(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "sdksh-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "s")
	t.Cleanup(func() {
		for _, pid := range sharedPlugins(dir) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			waitFor(t, "a shared plugin to stop", func() (int, bool) { return 0, !alive(pid) })
		}
		os.RemoveAll(parent)
	})
	return dir
}

// sharedPlugins are the shared plugins running with sockets in dir.
func sharedPlugins(dir string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && bytes.Contains(env, []byte("\x00AMELIA_PROVIDER_SHARED="+dir+"/")) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// share connects to the shared test plugin in mode in dir; the
// connection closes when the test ends.
func share(t *testing.T, dir, mode string, opts pluginclient.ShareOptions) *pluginclient.Plugin {
	t.Helper()
	p, err := pluginclient.Share(shareCmd(mode), opts)
	if err != nil {
		t.Fatalf("share: %v", err)
	}
	t.Cleanup(p.Close)
	if !p.Shared() {
		t.Fatal("Share returned a plugin that is not shared")
	}
	return p
}

// echo runs echo in p and fails the test unless it answers.
func echo(t *testing.T, p *pluginclient.Plugin, what string) {
	t.Helper()
	var out strings.Builder
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"echo", what}}, sdk.ExecIO{Stdout: &out})
	if err != nil || st.Code != 0 || out.String() != what+"\n" {
		t.Fatalf("echo %s: %+v %v %q", what, st, err, out.String())
	}
}

// Two hosts share one plugin process, each with a data channel of its
// own: their execs at once each get their own bytes back, and one host
// leaving does not stop the plugin for the other.
func TestSharedPluginServesHostsSideBySide(t *testing.T) {
	dir := shareDir(t)
	a := share(t, dir, "", shareOpts(dir, 0))
	b := share(t, dir, "", shareOpts(dir, 0))
	if a.Pid() != b.Pid() || a.Pid() == 0 {
		t.Errorf("the hosts' plugins are processes %d and %d, want one", a.Pid(), b.Pid())
	}
	if got := sharedPlugins(dir); len(got) != 1 {
		t.Errorf("shared plugin processes: %v, want one", got)
	}
	if !a.DataChannel() || !b.DataChannel() {
		t.Errorf("data channels: %v, %v; want both", a.DataChannel(), b.DataChannel())
	}
	const execs, size = 4, 2 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*execs)
	for h, p := range []*pluginclient.Plugin{a, b} {
		for i := range execs {
			wg.Go(func() {
				in, want := randomInput(size, uint64(10*h+i))
				out, errOut := newHashWriter(), &strings.Builder{}
				argv := []string{"sh", "-c", fmt.Sprintf("cat; echo host %d exec %d >&2", h, i)}
				st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: argv}, sdk.ExecIO{Stdin: in, Stdout: out, Stderr: errOut})
				switch {
				case err != nil || st.Code != 0:
					errs <- fmt.Errorf("host %d exec %d: %+v %v", h, i, st, err)
				case out.n != size || out.sum() != want:
					errs <- fmt.Errorf("host %d exec %d: stdout is not its stdin (%d bytes)", h, i, out.n)
				case errOut.String() != fmt.Sprintf("host %d exec %d\n", h, i):
					errs <- fmt.Errorf("host %d exec %d: stderr %q", h, i, errOut.String())
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.Close()
	echo(t, a, "still served")
	if b.Exited() != true || a.Exited() {
		t.Errorf("Exited: closed host %v, open host %v; want true, false", b.Exited(), a.Exited())
	}
}

// Hosts share a plugin only when they start the same one (binary,
// arguments, environment) for the same scope.
func TestSharedPluginsKeepApart(t *testing.T) {
	dir := shareDir(t)
	other := filepath.Join(filepath.Dir(dir), "other-binary")
	if data, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(other, data, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	base := share(t, dir, "", shareOpts(dir, 0))
	for _, tc := range []struct {
		name string
		cmd  func() *exec.Cmd
		opts func(pluginclient.ShareOptions) pluginclient.ShareOptions
	}{
		{"another scope", func() *exec.Cmd { return shareCmd("") }, func(o pluginclient.ShareOptions) pluginclient.ShareOptions { o.Scope = "other"; return o }},
		{"another environment", func() *exec.Cmd { return shareCmd("settings") }, func(o pluginclient.ShareOptions) pluginclient.ShareOptions { return o }},
		{"another binary", func() *exec.Cmd { c := shareCmd(""); c.Path, c.Args[0] = other, other; return c }, func(o pluginclient.ShareOptions) pluginclient.ShareOptions { return o }},
		{"other arguments", func() *exec.Cmd { c := shareCmd(""); c.Args = append(c.Args, "-test.v"); return c }, func(o pluginclient.ShareOptions) pluginclient.ShareOptions { return o }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pluginclient.Share(tc.cmd(), tc.opts(shareOpts(dir, 0)))
			if err != nil {
				t.Fatalf("share: %v", err)
			}
			defer p.Close()
			if p.Pid() == base.Pid() {
				t.Errorf("it shares process %d with the base plugin", p.Pid())
			}
			echo(t, p, tc.name)
		})
	}
	if got := sharedPlugins(dir); len(got) != 5 {
		t.Errorf("shared plugin processes: %v, want 5", got)
	}
}

// A plugin with no host for its idle time stops by itself and removes its
// socket; the next host starts another.
func TestSharedPluginStopsWhenIdle(t *testing.T) {
	dir := shareDir(t)
	p, err := pluginclient.Share(shareCmd(""), shareOpts(dir, time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	echo(t, p, "before idle")
	if !alive(pid) {
		t.Fatal("the plugin stopped while its host was connected")
	}
	p.Close()
	waitFor(t, "the idle plugin to exit", func() (int, bool) { return 0, !alive(pid) })
	if socks, _ := filepath.Glob(filepath.Join(dir, "*.sock")); len(socks) != 0 {
		t.Errorf("the idle plugin left its socket: %v", socks)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("logs: %v, want one", logs)
	}
	if log, _ := os.ReadFile(logs[0]); !bytes.Contains(log, []byte("had no host for")) {
		t.Errorf("the plugin's log does not say why it stopped:\n%s", log)
	}
	q := share(t, dir, "", shareOpts(dir, time.Nanosecond))
	if q.Pid() == pid {
		t.Errorf("the next host got the stopped plugin's pid %d", pid)
	}
	echo(t, q, "after idle")
}

// A plugin killed under its hosts: their calls fail saying so, and the
// next host starts another in its place.
func TestSharedPluginKilledIsReplaced(t *testing.T) {
	dir := shareDir(t)
	p := share(t, dir, "", shareOpts(dir, 0))
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed plugin to exit", func() (int, bool) { return 0, !alive(pid) })
	_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"true"}}, sdk.ExecIO{})
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), `provider plugin "test" stopped unexpectedly`) {
		t.Errorf("exec on the killed plugin: %v, want it stopped unexpectedly", err)
	}
	if !p.Exited() {
		t.Error("Exited() is false after the plugin was killed")
	}
	q := share(t, dir, "", shareOpts(dir, 0))
	if q.Pid() == pid {
		t.Fatalf("the next host got the killed plugin's pid %d", pid)
	}
	echo(t, q, "replaced")
	if got := sharedPlugins(dir); len(got) != 1 {
		t.Errorf("shared plugin processes: %v, want one", got)
	}
}

// A shared plugin that panics: its hosts' errors say why, from its log.
func TestSharedPluginCrashIsExplained(t *testing.T) {
	dir := shareDir(t)
	p := share(t, dir, "crashy", shareOpts(dir, 0))
	_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"true"}}, sdk.ExecIO{Stdout: io.Discard})
	want := `provider plugin "test" stopped unexpectedly: panic: test provider exploded (shared plugin, pid `
	if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("err = %v, want %q... matching ErrUnavailable", err, want)
	}
}

// hostCommands are n hosts (runShareHost) to start, each a process of its
// own.
func hostCommands(dir string, n int, extraEnv ...string) []*exec.Cmd {
	hosts := make([]*exec.Cmd, n)
	for i := range hosts {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(append(os.Environ(), shareHostEnv+"="+dir), extraEnv...)
		cmd.Stderr = &sdkBuffer{}
		hosts[i] = cmd
	}
	return hosts
}

// sdkBuffer is a strings.Builder safe for a process's output.
type sdkBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *sdkBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *sdkBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runShareHost is a host of the tests above in a process of its own (see
// shareHostEnv and shareExecEnv).
func runShareHost(dir, pidfile string) int {
	p, err := pluginclient.Share(shareCmd(""), shareOpts(dir, 0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "share:", err)
		return 1
	}
	defer p.Close()
	fmt.Printf("pid %d\n", p.Pid())
	if pidfile != "" {
		_, err := p.Exec(context.Background(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "echo $$ > " + pidfile + "; exec sleep 600"}}, sdk.ExecIO{})
		fmt.Fprintln(os.Stderr, "exec ended:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// Hosts that start at once, none finding a plugin, start one between
// them.
func TestSharedPluginStartsOnceForHostsAtOnce(t *testing.T) {
	dir := shareDir(t)
	const n = 6
	type said struct {
		line string
		err  error
	}
	hosts := hostCommands(dir, n)
	stdins := make([]io.Closer, n)
	lines := make(chan said, n)
	for i, cmd := range hosts {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdins[i] = stdin
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			l, err := bufio.NewReader(out).ReadString('\n')
			lines <- said{strings.TrimSpace(l), err}
		}()
	}
	for _, cmd := range hosts {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i, cmd := range hosts {
			stdins[i].Close()
			_ = cmd.Wait()
		}
	})
	pids := map[string]int{}
	for range n {
		s := <-lines
		if s.err != nil {
			t.Fatalf("a host said nothing: %v", s.err)
		}
		pids[s.line]++
	}
	if len(pids) != 1 {
		t.Errorf("the hosts' plugins: %v, want one pid for all", pids)
	}
	if got := sharedPlugins(dir); len(got) != 1 {
		t.Errorf("shared plugin processes: %v, want one", got)
	}
	for i, cmd := range hosts {
		stdins[i].Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("host %d: %v: %s", i, err, cmd.Stderr)
		}
	}
}

// A host that dies takes its own execs with it, and only them: the plugin
// goes on serving the others.
func TestSharedPluginOutlivesAHostThatDies(t *testing.T) {
	dir := shareDir(t)
	b := share(t, dir, "", shareOpts(dir, 0))
	pidfile := filepath.Join(t.TempDir(), "pid")
	host := hostCommands(dir, 1, shareExecEnv+"="+pidfile)[0]
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	sleeper := waitFor(t, "the dying host's exec to start", func() (int, bool) {
		data, err := os.ReadFile(pidfile)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
		return pid, err == nil && perr == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(sleeper, syscall.SIGKILL) }) // in case the plugin did not
	if got := parentOf(t, sleeper); got != b.Pid() {
		t.Fatalf("the dying host's exec runs under %d, not the shared plugin %d", got, b.Pid())
	}
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	waitFor(t, "the dead host's exec to be killed", func() (int, bool) { return 0, !alive(sleeper) })
	echo(t, b, "still here")
	if !alive(b.Pid()) || b.Exited() {
		t.Error("the plugin stopped with a host that died")
	}
}

// rawDial is the other user of TestSharedPluginRefusesOtherUsers (see
// rawDialEnv).
func rawDial(sock string) int {
	conn, err := net.Dial("unix", sock)
	switch {
	case errors.Is(err, syscall.EACCES):
		fmt.Println("denied")
		return 0
	case err != nil:
		fmt.Println("error:", err)
		return 1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(conn, "amelia-provider-host %d\n", sdk.APIVersion); err != nil {
		fmt.Println("refused")
		return 0
	}
	answer, _ := io.ReadAll(conn)
	if len(answer) == 0 {
		fmt.Println("refused")
	} else {
		fmt.Printf("answered %q\n", answer)
	}
	return 0
}

// A process of another user cannot reach a shared plugin (its directory is
// its user's alone), and, should it reach the socket anyway, the plugin
// refuses it (SO_PEERCRED).
func TestSharedPluginRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as another user")
	}
	dir := shareDir(t)
	p := share(t, dir, "", shareOpts(dir, 0))
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	if len(socks) != 1 {
		t.Fatalf("sockets: %v", socks)
	}
	// The other user runs a copy of the test binary it can read.
	bin, err := os.MkdirTemp("", "sdkbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	data, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(filepath.Join(bin, "sdk.test"), data, 0o755)
	}
	if err != nil || os.Chmod(bin, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	dialAs := func() string {
		cmd := exec.Command(filepath.Join(bin, "sdk.test"))
		cmd.Env = []string{rawDialEnv + "=" + socks[0]}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the other user's process: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := dialAs(); got != "denied" {
		t.Errorf("another user connecting through the plugins' directory: %s, want denied", got)
	}
	// Opened up, as a careless chmod would (the test's directory above
	// it too).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(socks[0], 0o666); err != nil {
		t.Fatal(err)
	}
	got := dialAs()
	_ = os.Chmod(dir, 0o700)
	if got != "refused" {
		t.Errorf("another user connecting to the socket: %s, want refused", got)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if log, _ := os.ReadFile(logs[0]); !bytes.Contains(log, []byte("not as this plugin's user")) {
		t.Errorf("the plugin's log does not record the refusal:\n%s", log)
	}
	echo(t, p, "still served")
}

// Share refuses a directory another user could reach or plant sockets in.
func TestShareRefusesADirectoryNotPrivate(t *testing.T) {
	parent := t.TempDir()
	open := filepath.Join(parent, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(parent, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link, "relative/dir"} {
		p, err := pluginclient.Share(shareCmd(""), shareOpts(dir, 0))
		if err == nil {
			p.Close()
			t.Errorf("Share in %s: no error", dir)
			continue
		}
		if errors.Is(err, pluginclient.ErrNotShareable) || !strings.Contains(err.Error(), "shared plugins' directory") {
			t.Errorf("Share in %s: %v, want the directory refused", dir, err)
		}
	}
	if got := sharedPlugins(open); len(got) != 0 {
		t.Errorf("plugins started in a refused directory: %v", got)
	}
}

// A plugin of an SDK before sharing is not left running: Share says it
// cannot be shared, remembers that, and Launch serves it.
func TestUnshareablePluginIsLaunchedInstead(t *testing.T) {
	dir := shareDir(t)
	for i, want := range []string{"answered as a plugin of one host", "records"} {
		_, err := pluginclient.Share(shareCmd("noshare"), shareOpts(dir, 0))
		if !errors.Is(err, pluginclient.ErrNotShareable) || !strings.Contains(err.Error(), want) {
			t.Errorf("share %d: %v, want ErrNotShareable saying %q", i, err, want)
		}
		if got := sharedPlugins(dir); len(got) != 0 {
			t.Errorf("share %d left plugin processes: %v", i, got)
		}
	}
	p, err := pluginclient.Launch(shareCmd("noshare"), pluginclient.LaunchOptions{Name: "test"})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	defer p.Close()
	if p.Shared() {
		t.Error("Launch returned a shared plugin")
	}
	echo(t, p, "launched")
}

// A shared plugin's processes inherit none of its sockets (its listener,
// its hosts' connections and data channels) nor its variables.
func TestSharedPluginExecsHoldNoSocket(t *testing.T) {
	dir := shareDir(t)
	p := share(t, dir, "", shareOpts(dir, 0))
	share(t, dir, "", shareOpts(dir, 0)) // another host's channel too
	var out strings.Builder
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "ls -l /proc/$$/fd; env"}}, sdk.ExecIO{Stdout: &out})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	if strings.Contains(out.String(), "socket:") {
		t.Errorf("a process of the shared plugin holds a socket:\n%s", out.String())
	}
	if strings.Contains(out.String(), "AMELIA_PROVIDER_SHARED") || strings.Contains(out.String(), "AMELIA_PROVIDER_DATA") {
		t.Errorf("a process of the shared plugin sees its variables:\n%s", out.String())
	}
}
