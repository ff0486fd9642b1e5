package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// Settings is a profile's `sandbox.ssh` block.
type Settings struct {
	// Host is a host name or address, or a Host alias of the ssh config.
	Host string `json:"host"`
	// Port, User and IdentityFiles override the ssh config's; defaults:
	// 22, the local user, ~/.ssh/id_{ed25519,ecdsa,rsa} when they exist.
	Port          int      `json:"port"`
	User          string   `json:"user"`
	IdentityFiles []string `json:"identity_files"`
	// KnownHosts is the known_hosts file (default ~/.ssh/known_hosts).
	KnownHosts string `json:"known_hosts"`
	// HostKeyPolicy is strict (default) or accept-new.
	HostKeyPolicy string `json:"host_key_policy"`
	// Jump is a ProxyJump host: [user@]host[:port], or an alias.
	Jump string `json:"jump"`
	// Root holds the sandboxes on the remote (default ~/.amelia/sandboxes,
	// ~ being the remote home).
	Root string `json:"root"`
	// ProxyTransport is how the sandbox reaches the host's proxy:
	// reverse-forward (default) or exec-tunnel.
	ProxyTransport string `json:"proxy_transport"`
	// EnforceEgress is "iptables" to enforce network allowlist and none
	// with owner-matched rules for the login user (sudo -n iptables).
	EnforceEgress string `json:"enforce_egress"`
	// SSHConfig is the ssh config file (default ~/.ssh/config).
	SSHConfig string `json:"ssh_config"`
}

// Proxy transports.
const (
	ReverseForward = "reverse-forward"
	ExecTunnel     = "exec-tunnel"
)

const defaultRoot = "~/.amelia/sandboxes"

var (
	hostRule = regexp.MustCompile(`^[A-Za-z0-9_.:\[\]%-]{1,253}$`)
	userRule = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)
)

func invalid(key, format string, args ...any) error {
	return sdk.InvalidSetting(Name, key, format, args...)
}

// ValidateSettings checks a profile's ssh block, and that it lets the
// provider enforce the network policy: allowlist and none need
// enforce_egress. It reads no ssh config and reaches no machine.
func (p *Provider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	s, err := decodeSettings(req.Config)
	if err == nil {
		err = s.enforces(req.Network.Mode)
	}
	return sdk.SettingsProblems(err)
}

// enforces refuses, at enforce_egress, a network mode these settings
// cannot enforce: all but open need the machine's iptables.
func (s Settings) enforces(mode sdk.NetworkMode) error {
	if mode == sdk.NetworkOpen || s.EnforceEgress == "iptables" {
		return nil
	}
	return invalid("enforce_egress", "network %q needs enforce_egress: iptables (and a login that may run `sudo -n iptables`) to take the machine's network away; use network open, or the docker provider", mode)
}

// decodeSettings reads a settings block; unknown keys are errors.
func decodeSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := sdk.DecodeSettings(raw, Name, &s); err != nil {
		return s, err
	}
	switch {
	case s.Host == "":
		return s, invalid("host", "required: the machine to run sandboxes on (a host name, an address, or a Host of ~/.ssh/config)")
	case !hostRule.MatchString(s.Host) || strings.HasPrefix(s.Host, "-"):
		return s, invalid("host", "%q is not a host name or address", s.Host)
	case s.Port < 0 || s.Port > 65535:
		return s, invalid("port", "%d is not a port", s.Port)
	case s.User != "" && !userRule.MatchString(s.User):
		return s, invalid("user", "%q is not a user name", s.User)
	}
	switch s.HostKeyPolicy {
	case "":
		s.HostKeyPolicy = string(sshtransport.Strict)
	case string(sshtransport.Strict), string(sshtransport.AcceptNew):
	default:
		return s, invalid("host_key_policy", "%q is not strict or accept-new (host keys are always checked)", s.HostKeyPolicy)
	}
	switch s.ProxyTransport {
	case "":
		s.ProxyTransport = ReverseForward
	case ReverseForward, ExecTunnel:
	default:
		return s, invalid("proxy_transport", "%q is not reverse-forward or exec-tunnel", s.ProxyTransport)
	}
	if s.EnforceEgress != "" && s.EnforceEgress != "iptables" {
		return s, invalid("enforce_egress", "%q is not iptables", s.EnforceEgress)
	}
	if s.Root == "" {
		s.Root = defaultRoot
	}
	if !strings.HasPrefix(s.Root, "/") && !strings.HasPrefix(s.Root, "~/") || strings.ContainsAny(s.Root, "\n\x00") || strings.Contains(s.Root, "/../") {
		return s, invalid("root", "%q must be an absolute path on the remote, or start with ~/ (the remote home)", s.Root)
	}
	return s, nil
}

// sshConfig is the parsed ssh config, or nil when there is none.
type sshConfig struct{ *ssh_config.Config }

func (c sshConfig) get(alias, key string) string {
	if c.Config == nil {
		return ""
	}
	v, _ := c.Get(alias, key)
	return v
}

func (c sshConfig) getAll(alias, key string) []string {
	if c.Config == nil {
		return nil
	}
	v, _ := c.GetAll(alias, key)
	return v
}

// loadSSHConfig reads the ssh config file; a missing one is empty.
func loadSSHConfig(path string) (sshConfig, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return sshConfig{}, nil
	}
	if err != nil {
		return sshConfig{}, sdk.Errorf(sdk.ErrInvalid, "ssh config %s: %v", path, err)
	}
	defer f.Close()
	cfg, err := ssh_config.Decode(f)
	if err != nil {
		return sshConfig{}, sdk.Errorf(sdk.ErrInvalid, "ssh config %s: %v", path, err)
	}
	return sshConfig{cfg}, nil
}

// target resolves the settings, with the ssh config's Host blocks, into
// the machine to log in to (and the jump host on the way).
func (s Settings) target(agentSocket string) (sshtransport.Target, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return sshtransport.Target{}, fmt.Errorf("ssh: find the home directory: %w", err)
	}
	expand := func(p string) string {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			return filepath.Join(home, rest)
		}
		return p
	}
	cfgPath := expand(s.SSHConfig)
	if cfgPath == "" {
		cfgPath = filepath.Join(home, ".ssh", "config")
	}
	cfg, err := loadSSHConfig(cfgPath)
	if err != nil {
		return sshtransport.Target{}, err
	}
	knownHosts := expand(s.KnownHosts)
	if knownHosts == "" {
		if f := strings.Fields(cfg.get(s.Host, "UserKnownHostsFile")); len(f) > 0 && f[0] != "/dev/null" {
			knownHosts = expand(f[0])
		} else {
			knownHosts = filepath.Join(home, ".ssh", "known_hosts")
		}
	}
	hostKeys, err := sshtransport.KnownHosts(knownHosts, sshtransport.HostKeyPolicy(s.HostKeyPolicy))
	if err != nil {
		return sshtransport.Target{}, err
	}
	local := ""
	if u, err := user.Current(); err == nil {
		local = u.Username
	}
	// one resolves a host (an alias or a name) with explicit overrides.
	one := func(alias, user string, port int, identities []string) (sshtransport.Target, error) {
		name := cfg.get(alias, "HostName")
		if name == "" {
			name = alias
		}
		if port == 0 {
			if p := cfg.get(alias, "Port"); p != "" {
				if port, err = strconv.Atoi(p); err != nil {
					return sshtransport.Target{}, sdk.Errorf(sdk.ErrInvalid, "ssh config %s: Port %q of %s is not a number", cfgPath, p, alias)
				}
			} else {
				port = 22
			}
		}
		if user == "" {
			if user = cfg.get(alias, "User"); user == "" {
				user = local
			}
		}
		auth := sshtransport.Auth{AgentSocket: agentSocket}
		switch {
		case len(identities) > 0:
			for _, f := range identities {
				auth.IdentityFiles = append(auth.IdentityFiles, expand(f))
			}
		default:
			// The config's and OpenSSH's default keys are tried when they
			// exist, as ssh does.
			auth.Optional = true
			for _, f := range cfg.getAll(alias, "IdentityFile") {
				auth.IdentityFiles = append(auth.IdentityFiles, expand(f))
			}
			for _, k := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				auth.IdentityFiles = append(auth.IdentityFiles, filepath.Join(home, ".ssh", k))
			}
		}
		return sshtransport.Target{Addr: net.JoinHostPort(name, strconv.Itoa(port)), User: user, Auth: auth, HostKeys: hostKeys}, nil
	}
	t, err := one(s.Host, s.User, s.Port, s.IdentityFiles)
	if err != nil {
		return t, err
	}
	jump := s.Jump
	if jump == "" {
		jump = cfg.get(s.Host, "ProxyJump")
	}
	if jump != "" && jump != "none" {
		if strings.Contains(jump, ",") {
			return t, invalid("jump", "%q: one jump host is supported, not a chain", jump)
		}
		juser, jhost, _ := strings.Cut(jump, "@")
		if jhost == "" {
			juser, jhost = "", jump
		}
		jport := 0
		if h, p, err := net.SplitHostPort(jhost); err == nil {
			if jport, err = strconv.Atoi(p); err != nil {
				return t, invalid("jump", "%q: the port is not a number", jump)
			}
			jhost = h
		}
		if !hostRule.MatchString(jhost) || juser != "" && !userRule.MatchString(juser) {
			return t, invalid("jump", "%q is not [user@]host[:port]", jump)
		}
		j, err := one(jhost, juser, jport, nil)
		if err != nil {
			return t, err
		}
		t.Jump = &j
	}
	return t, nil
}
