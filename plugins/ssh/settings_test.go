package ssh

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestDecodeSettings(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     Settings
		err      string
	}{
		{name: "defaults", in: `{"host":"build-1.example"}`, want: Settings{Host: "build-1.example", HostKeyPolicy: "strict", Root: "~/.amelia/sandboxes", ProxyTransport: "reverse-forward"}},
		{name: "everything", in: `{"host":"192.0.2.5","port":2222,"user":"amelia","identity_files":["~/.ssh/id"],"known_hosts":"/k","host_key_policy":"accept-new","jump":"bastion","root":"/srv/sandboxes","proxy_transport":"exec-tunnel","enforce_egress":"iptables"}`,
			want: Settings{Host: "192.0.2.5", Port: 2222, User: "amelia", IdentityFiles: []string{"~/.ssh/id"}, KnownHosts: "/k", HostKeyPolicy: "accept-new", Jump: "bastion", Root: "/srv/sandboxes", ProxyTransport: "exec-tunnel", EnforceEgress: "iptables"}},
		{name: "no host", in: `{}`, err: "ssh.host: required: the machine to run sandboxes on (a host name, an address, or a Host of ~/.ssh/config)"},
		{name: "option as host", in: `{"host":"-oProxyCommand=x"}`, err: `ssh.host: "-oProxyCommand=x" is not a host name or address`},
		{name: "unknown key", in: `{"host":"h","hosts":"x"}`, err: `ssh.hosts: unknown key, did you mean host? (known: host, port, user, identity_files, known_hosts, host_key_policy, jump, root, proxy_transport, enforce_egress, ssh_config)`},
		{name: "wrong type", in: `{"host":"h","port":"22"}`, err: "ssh.port: want a whole number, not a string"},
		{name: "bad port", in: `{"host":"h","port":70000}`, err: "ssh.port: 70000 is not a port"},
		{name: "bad user", in: `{"host":"h","user":"a b"}`, err: `ssh.user: "a b" is not a user name`},
		{name: "no host key checks", in: `{"host":"h","host_key_policy":"no"}`, err: `ssh.host_key_policy: "no" is not strict or accept-new (host keys are always checked)`},
		{name: "bad transport", in: `{"host":"h","proxy_transport":"socks"}`, err: `ssh.proxy_transport: "socks" is not reverse-forward or exec-tunnel`},
		{name: "bad egress", in: `{"host":"h","enforce_egress":"nft"}`, err: `ssh.enforce_egress: "nft" is not iptables`},
		{name: "relative root", in: `{"host":"h","root":"sandboxes"}`, err: `ssh.root: "sandboxes" must be an absolute path on the remote, or start with ~/ (the remote home)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeSettings(json.RawMessage(tt.in))
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, sdk.ErrInvalid) {
					t.Errorf("error %v, want %q (invalid)", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Errorf("settings\n got %s\nwant %s", gj, wj)
			}
		})
	}
}

// The example config's ssh block is one the provider accepts.
func TestExampleConfigSettings(t *testing.T) {
	cfg, err := config.Load(config.Options{
		Path:      filepath.Join("..", "..", "configs", "example.yaml"),
		LookupEnv: func(k string) (string, bool) { return map[string]string{"HOME": "/home/u"}[k], k == "HOME" },
		HomeDir:   "/home/u",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Profiles["ssh"]
	if p == nil || p.Sandbox.Provider != Name {
		t.Fatalf("the example has no ssh profile")
	}
	b, _ := json.Marshal(p.Sandbox.ProviderSettings())
	if _, err := decodeSettings(b); err != nil {
		t.Fatalf("the example's ssh settings: %v", err)
	}
}

// ValidateSettings answers the block's problems at their keys, and a
// network policy the settings cannot enforce at enforce_egress, as
// EnsureRunning refuses it.
func TestValidateSettings(t *testing.T) {
	p := New(Options{})
	needs := sdk.Problem{Key: "enforce_egress", Message: "network \"none\" needs enforce_egress: iptables (and a login that may run `sudo -n iptables`) to take the machine's network away; use network open, or the docker provider"}
	for _, tc := range []struct {
		in   string
		mode sdk.NetworkMode
		want []sdk.Problem
	}{
		{in: `{"host":"h"}`, mode: sdk.NetworkOpen},
		{in: `{"host":"h","enforce_egress":"iptables"}`, mode: sdk.NetworkNone},
		{in: `{"host":"h"}`, mode: sdk.NetworkNone, want: []sdk.Problem{needs}},
		{in: `{"hots":"h"}`, mode: sdk.NetworkNone, want: []sdk.Problem{{Key: "hots", Message: "unknown key, did you mean host? (known: host, port, user, identity_files, known_hosts, host_key_policy, jump, root, proxy_transport, enforce_egress, ssh_config)"}}},
		{in: `{}`, mode: sdk.NetworkOpen, want: []sdk.Problem{{Key: "host", Message: "required: the machine to run sandboxes on (a host name, an address, or a Host of ~/.ssh/config)"}}},
	} {
		got, err := p.ValidateSettings(t.Context(), sdk.ValidateRequest{Config: json.RawMessage(tc.in), Network: sdk.NetworkPolicy{Mode: tc.mode}})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s, network %s: %q, %v; want %q", tc.in, tc.mode, got, err, tc.want)
		}
	}
}
