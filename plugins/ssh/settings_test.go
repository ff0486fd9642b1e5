package ssh

import (
	"encoding/json"
	"errors"
	"path/filepath"
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
		{name: "unknown key", in: `{"host":"h","hosts":"x"}`, err: `ssh settings: unknown field "hosts"`},
		{name: "wrong type", in: `{"host":"h","port":"22"}`, err: "ssh.port: want a number, not a string"},
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
