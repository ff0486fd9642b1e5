// Package ssh is the "ssh" sandbox provider: a machine amelia can log in
// to over SSH (a disposable VM, a build box, a cloud instance) holds the
// sandboxes, each a directory <root>/<name>/ with workspace/, home/, tmp/,
// bin/ and run/.
//
// One SSH connection per machine carries every command (more when the
// server's MaxSessions is reached), with verified host keys, keepalives
// and reconnection (package transport). Commands run as the login user
// through shexec, so cancelling one kills its process group and whatever
// it started. The machine's network is its own: the provider enforces
// allowlist and none only with ssh.enforce_egress: iptables.
package ssh

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// Name is the provider's name.
const Name = "ssh"

// markerFile identifies a directory as a sandbox; nothing is deleted
// without it.
const markerFile = ".amelia-sandbox"

// sandboxDirEnv is set in every command of a sandbox, last: Teardown finds
// the sandbox's processes by it, wherever they went.
const sandboxDirEnv = "AMELIA_SANDBOX_DIR"

// stoppedMarker, under the workspace, says the sandbox's watchdog stopped
// it: its processes ended, its directory stays; EnsureRunning removes it.
const stoppedMarker = sdk.LifetimeDir + "/" + sdk.LifetimeStopped

// healthTimeout bounds HealthCheck's command, inside sdk.HealthCheckTimeout.
const healthTimeout = 5 * time.Second

// Options configure the provider.
type Options struct {
	Version string
	Logger  *slog.Logger
	// OpenSSH is OpenSSH's ssh client, which moves bulk execs' bytes
	// faster than x/crypto/ssh (sshtransport.Conn.ExecBulk); New looks
	// for "ssh" on PATH when it is empty. None found: every exec goes
	// through x/crypto/ssh.
	OpenSSH string
}

// Provider is the SSH provider.
type Provider struct {
	opts Options

	mu      sync.Mutex
	remotes map[string]*remote
}

// remote is a machine the provider logged in to.
type remote struct {
	conn        *sshtransport.Conn
	refusedOnce sync.Once // logs that the server refuses forwarding

	homeMu sync.Mutex
	home   string // the login's $HOME there, once asked
}

// New returns the SSH provider; it connects on first use.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OpenSSH == "" {
		if bin, err := exec.LookPath("ssh"); err == nil {
			opts.OpenSSH = bin
		}
	}
	return &Provider{opts: opts, remotes: map[string]*remote{}}
}

func (p *Provider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:    Name,
		Version: p.opts.Version,
		Description: "sandboxes in directories of a machine reached over SSH; " +
			"network allowlist and none only with ssh.enforce_egress: iptables",
		Capabilities: sdk.Capabilities{
			// allowlist and none are refused by EnsureRunning unless the
			// profile has the machine enforce them.
			EgressModes: []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone},
			Isolated:    true,
			// A session's pty.
			TTY: true,
		},
	}, nil
}

// sandbox is a resolved sandbox: its machine and directory there.
type sandbox struct {
	name string
	set  Settings
	r    *remote
	dir  string
}

func (s sandbox) marker() string  { return s.dir + "/" + markerFile }
func (s sandbox) workdir() string { return s.dir + "/workspace" }

// remoteFor returns the connection the settings name, opening it (and
// reading the ssh config and known_hosts files) the first time: the
// settings decide everything else, for the life of the plugin.
func (p *Provider) remoteFor(set Settings) (*remote, error) {
	key, _ := json.Marshal(set)
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.remotes[string(key)]; ok {
		return r, nil
	}
	target, err := set.target(os.Getenv("SSH_AUTH_SOCK"))
	if err != nil {
		return nil, err
	}
	r := &remote{conn: sshtransport.New(target, sshtransport.Options{Logger: p.opts.Logger, OpenSSH: p.opts.OpenSSH})}
	p.remotes[string(key)] = r
	return r, nil
}

// resolve finds the sandbox a ref names.
func (p *Provider) resolve(ctx context.Context, ref sdk.SandboxRef) (sandbox, error) {
	set, err := decodeSettings(ref.Config)
	if err != nil {
		return sandbox{}, err
	}
	r, err := p.remoteFor(set)
	if err != nil {
		return sandbox{}, err
	}
	root, err := r.root(ctx, set.Root)
	if err != nil {
		return sandbox{}, err
	}
	return sandbox{name: ref.Name, set: set, r: r, dir: root + "/" + ref.Name}, nil
}

// root is the sandboxes' directory on the remote, ~ expanded there.
func (r *remote) root(ctx context.Context, root string) (string, error) {
	rest, ok := strings.CutPrefix(root, "~/")
	if !ok {
		return path.Clean(root), nil
	}
	r.homeMu.Lock()
	defer r.homeMu.Unlock()
	if r.home == "" {
		out, err := r.conn.Output(ctx, `printf '%s' "$HOME"`, nil)
		if err != nil {
			return "", fmt.Errorf("ssh %s: ask for the home directory: %w", r.conn.Target(), err)
		}
		if !strings.HasPrefix(out, "/") || strings.ContainsAny(out, "\n\x00") {
			return "", fmt.Errorf("ssh %s: the login's $HOME is %q, not an absolute path; set ssh.root to one", r.conn.Target(), out)
		}
		r.home = strings.TrimRight(out, "/")
	}
	return path.Clean(r.home + "/" + rest), nil
}

// marker is the content of a sandbox's marker file.
type marker struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created,omitzero"`
}

// ensureScript makes the sandbox's directories and its marker, unless the
// marker is there, and prints "created" when it made it, then the marker.
// The marker appears whole or not at all (written aside, then linked into
// place), so concurrent EnsureRunnings agree on one.
const ensureScript = `set -eu
d=$1
umask 077
mkdir -p -- "$d/workspace" "$d/home" "$d/tmp" "$d/bin" "$d/run"
rm -f -- "$d/workspace/$3"
if [ ! -e "$d/.amelia-sandbox" ]; then
	tmp=$(mktemp "$d/.amelia-sandbox.XXXXXX")
	printf '%s\n' "$2" > "$tmp"
	if ln -- "$tmp" "$d/.amelia-sandbox" 2>/dev/null; then echo created; fi
	rm -f -- "$tmp"
fi
cat -- "$d/.amelia-sandbox"`

func (p *Provider) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	sb, err := p.resolve(ctx, spec.SandboxRef)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if err := sb.set.enforces(spec.Network.Mode); err != nil {
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrUnsupported, "sandbox %s on %s: %v", sb.name, sb.r.conn.Target().Addr, err)
	}
	if spec.Network.Mode != sdk.NetworkOpen {
		if err := p.enforceEgress(ctx, sb); err != nil {
			return sdk.Sandbox{}, err
		}
	}
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	m, _ := json.Marshal(marker{ID: hex.EncodeToString(id), Labels: spec.Labels, Created: time.Now().UTC()})
	out, err := sb.r.conn.Output(ctx, "sh -c "+shexec.Quote(ensureScript)+" sh "+shexec.Quote(sb.dir)+" "+shexec.Quote(string(m))+" "+shexec.Quote(stoppedMarker), nil)
	if err != nil {
		return sdk.Sandbox{}, fmt.Errorf("create sandbox %s in %s on %s: %w", sb.name, sb.dir, sb.r.conn.Target(), err)
	}
	created := strings.HasPrefix(out, "created\n")
	var have marker
	if err := json.Unmarshal([]byte(strings.TrimPrefix(out, "created\n")), &have); err != nil || have.ID == "" {
		return sdk.Sandbox{}, fmt.Errorf("sandbox %s: %s on %s is damaged; remove %s by hand", sb.name, sb.marker(), sb.r.conn.Target(), sb.dir)
	}
	if created {
		p.opts.Logger.Info("created ssh sandbox", "sandbox", sb.name, "host", sb.r.conn.Target().String(), "dir", sb.dir)
	}
	ref := spec.SandboxRef
	ref.ID = have.ID
	return sdk.Sandbox{Ref: ref, Created: created, Workdir: sb.workdir(), Details: map[string]string{
		"host": sb.r.conn.Target().String(),
		"dir":  sb.dir,
		// The watchdog ends the processes tagged with sandboxDirEnv.
		sdk.DetailStop: sdk.StopProcesses,
	}, Worker: sdk.WorkerPlace{Dir: sb.dir + "/bin"}}, nil
}

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	sb, err := p.resolve(ctx, req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	switch login := sb.r.conn.Target().User; {
	case req.User == "root":
		// Even when the login is root: Info does not declare ExecAsRoot.
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the ssh provider does not run commands as root on request; it runs them as the login user %s", login)
	case req.User != "" && req.User != login:
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the ssh provider runs commands as the login user %s; it cannot run them as %q", login, req.User)
	}
	dir := req.Dir
	switch {
	case dir == "":
		dir = sb.workdir()
	case !path.IsAbs(dir):
		dir = path.Join(sb.workdir(), dir)
	}
	env := map[string]string{
		"HOME":           sb.dir + "/home",
		"TMPDIR":         sb.dir + "/tmp",
		"AMELIA_SANDBOX": sb.name,
	}
	for k, v := range req.Env {
		env[k] = v
	}
	env[sandboxDirEnv] = sb.dir
	cmd := shexec.Command{Dir: dir, Env: env, Tag: shexec.NewTag(), Require: sb.marker(), Argv: req.Argv}
	if req.TTY {
		// A terminal of the session's own (pty-req): sshd gives one to
		// any command.
		return sb.r.conn.ExecTTY(ctx, cmd, req.Size, eio, req.Grace())
	}
	exec := sb.r.conn.Exec
	if req.Traffic == sdk.TrafficBulk && len(req.Env) == 0 {
		// Through OpenSSH, where the command line is a local process's
		// argument: only without the caller's environment, which may
		// hold secrets.
		exec = sb.r.conn.ExecBulk
	}
	st, err := exec(ctx, cmd, eio, req.Grace())
	switch {
	case errors.Is(err, sshtransport.ErrNoSandbox):
		return st, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist on %s (no %s): start it with `amelia sandbox up`", sb.name, sb.r.conn.Target(), sb.marker())
	case errors.Is(err, sshtransport.ErrNoDir):
		return st, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", dir)
	}
	return st, err
}

// teardownScript kills every process of the sandbox (tagged with its
// directory), twice over for any started meanwhile, and removes the
// directory, making read-only trees (Go's module cache) writable first. A
// directory without a marker is not a sandbox and stays.
const teardownScript = `d=$1
if [ ! -e "$d/.amelia-sandbox" ]; then
	if [ -e "$d" ]; then echo "refusing to remove $d: it is not an amelia sandbox (no .amelia-sandbox)" >&2; exit 3; fi
	exit 0
fi
shift
"$@"; "$@"
rm -rf -- "$d" 2>/dev/null || { chmod -R u+w -- "$d"; rm -rf -- "$d"; }`

func (p *Provider) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	sb, err := p.resolve(ctx, ref)
	if err != nil {
		return err
	}
	kill := shexec.KillLine("KILL", 0, sandboxDirEnv+"="+sb.dir)
	_, err = sb.r.conn.Output(ctx, "sh -c "+shexec.Quote(teardownScript)+" sh "+shexec.Quote(sb.dir)+" "+kill, nil)
	if err != nil {
		if strings.Contains(err.Error(), "refusing to remove") {
			return sdk.Errorf(sdk.ErrConflict, "%v", err)
		}
		return fmt.Errorf("remove sandbox %s from %s: %w", sb.name, sb.r.conn.Target(), err)
	}
	p.opts.Logger.Info("removed ssh sandbox", "sandbox", sb.name, "host", sb.r.conn.Target().String(), "dir", sb.dir)
	return nil
}

func (p *Provider) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	sb, err := p.resolve(ctx, ref)
	if err != nil {
		return sdk.Health{}, err
	}
	out, err := sb.r.conn.Output(ctx, "if [ ! -e "+shexec.Quote(sb.marker())+" ]; then echo absent; elif [ -e "+shexec.Quote(sb.workdir()+"/"+stoppedMarker)+" ]; then printf 'stopped %s' \"$(head -c 64 "+shexec.Quote(sb.workdir()+"/"+stoppedMarker)+")\"; elif [ -d "+shexec.Quote(sb.workdir())+" ]; then echo ready; else echo broken; fi", nil)
	switch {
	case err == nil && strings.HasPrefix(out, "stopped "):
		return sdk.Health{State: sdk.HealthStopped, Message: "stopped by its watchdog at " + strings.TrimSpace(strings.TrimPrefix(out, "stopped ")) + "; its directory stays: " + sb.dir}, nil
	case err != nil:
		return sdk.Health{}, fmt.Errorf("check sandbox %s on %s: %w", sb.name, sb.r.conn.Target(), err)
	case out == "absent\n":
		return sdk.Health{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist on %s", sb.name, sb.r.conn.Target())
	case out == "broken\n":
		return sdk.Health{State: sdk.HealthUnhealthy, Message: "its workspace directory is missing: " + sb.workdir()}, nil
	}
	return sdk.Health{State: sdk.HealthReady, Message: sb.r.conn.Target().String() + ":" + sb.dir}, nil
}

// listScript prints, for each sandbox under the root, its name, whether
// its workspace exists, and its marker, tab-separated.
const listScript = `for m in "$1"/*/.amelia-sandbox; do
	[ -f "$m" ] || continue
	d=${m%/.amelia-sandbox}
	w=no; [ -d "$d/workspace" ] && w=yes
	[ -e "$d/workspace/$2" ] && w=stopped
	printf '%s\t%s\t%s\n' "${d##*/}" "$w" "$(tr -d '\n\t' < "$m")"
done`

func (p *Provider) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	set, err := decodeSettings(req.Config)
	if err != nil {
		return nil, err
	}
	r, err := p.remoteFor(set)
	if err != nil {
		return nil, err
	}
	root, err := r.root(ctx, set.Root)
	if err != nil {
		return nil, err
	}
	out, err := r.conn.Output(ctx, "sh -c "+shexec.Quote(listScript)+" sh "+shexec.Quote(root)+" "+shexec.Quote(stoppedMarker), nil)
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes in %s on %s: %w", root, r.conn.Target(), err)
	}
	var found []sdk.Listed
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || !sdk.ValidName(f[0]) {
			continue
		}
		var m marker
		if json.Unmarshal([]byte(f[2]), &m) != nil || !req.Matches(m.Labels) {
			continue
		}
		state := sdk.HealthReady
		switch f[1] {
		case "stopped":
			state = sdk.HealthStopped
		case "yes":
		default:
			state = sdk.HealthUnhealthy
		}
		found = append(found, sdk.Listed{Ref: sdk.SandboxRef{Name: f[0], ID: m.ID, Config: req.Config}, Labels: m.Labels, State: state, Created: m.Created})
	}
	return found, nil
}

// egressScript lets the login user's traffic out over loopback only: an
// owner-matched chain at the head of OUTPUT, for IPv4 and IPv6, accepting
// lo and dropping everything else. Loopback carries what the sandbox needs
// (the forwarded or tunnelled proxy). It adds only what is missing, so
// sandboxes of one login never open a gap for each other.
const egressScript = `set -eu
uid=$(id -u)
chain=AMELIA_EGRESS_$uid
for ipt in iptables ip6tables; do
	sudo -n "$ipt" -w -N "$chain" 2>/dev/null || true
	sudo -n "$ipt" -w -C "$chain" -o lo -j ACCEPT 2>/dev/null || sudo -n "$ipt" -w -A "$chain" -o lo -j ACCEPT
	sudo -n "$ipt" -w -C "$chain" -j DROP 2>/dev/null || sudo -n "$ipt" -w -A "$chain" -j DROP
	sudo -n "$ipt" -w -C OUTPUT -m owner --uid-owner "$uid" -j "$chain" 2>/dev/null ||
		sudo -n "$ipt" -w -I OUTPUT 1 -m owner --uid-owner "$uid" -j "$chain"
done`

// enforceEgress applies egressScript, after checking that the login may
// run iptables through sudo without a password.
func (p *Provider) enforceEgress(ctx context.Context, sb sandbox) error {
	if _, err := sb.r.conn.Output(ctx, "sudo -n iptables -w -L OUTPUT -n >/dev/null && sudo -n ip6tables -w -L OUTPUT -n >/dev/null", nil); err != nil {
		return sdk.Errorf(sdk.ErrUnsupported, "ssh.enforce_egress: iptables needs %s to run `sudo -n iptables` and `sudo -n ip6tables` without a password: %v", sb.r.conn.Target(), err)
	}
	if _, err := sb.r.conn.Output(ctx, "sh -c "+shexec.Quote(egressScript), nil); err != nil {
		return fmt.Errorf("ssh %s: apply the egress rules: %w", sb.r.conn.Target(), err)
	}
	return nil
}

// Forward listens on the remote's loopback (SSH remote port forwarding)
// and pipes each connection to req.Target on the host. With
// ssh.proxy_transport: exec-tunnel, or a server that refuses forwarding
// (AllowTcpForwarding no), it answers ErrUnsupported and the host tunnels
// over exec; the refusal is logged once per machine.
func (p *Provider) Forward(ctx context.Context, req sdk.ForwardRequest, listening func(addr string)) error {
	sb, err := p.resolve(ctx, req.Sandbox)
	if err != nil {
		return err
	}
	if sb.set.ProxyTransport == ExecTunnel {
		return sdk.Errorf(sdk.ErrUnsupported, "ssh.proxy_transport is exec-tunnel")
	}
	lis, err := sb.r.conn.Listen(ctx, "127.0.0.1:0")
	if errors.Is(err, sdk.ErrUnsupported) {
		sb.r.refusedOnce.Do(func() {
			p.opts.Logger.Info("the ssh server refuses port forwarding: the sandbox reaches the proxy through the exec tunnel", "host", sb.r.conn.Target().String(), "reason", err)
		})
		return err
	}
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { lis.Close() })
	defer stop()
	listening(lis.Addr().String())
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ssh %s: the forward stopped: %w", sb.r.conn.Target(), err)
		}
		conns.Go(func() { netpipe.Forward(ctx, c, req.Target) })
	}
}

// Close closes the connections; the SDK calls it when the plugin stops.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range p.remotes {
		r.conn.Close()
		delete(p.remotes, k)
	}
	return nil
}
