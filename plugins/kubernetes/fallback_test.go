package kubernetes_test

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
)

// upgrade is an exec request the proxy saw: how it asked to upgrade, the
// command it was for, and the answer (the proxy's own refusal, or the API
// server's).
type upgrade struct {
	protocol string // "websocket", "spdy", or the Upgrade header as given ("" for none)
	command  string
	status   int
}

// oldProxy is a reverse proxy on loopback in front of the test cluster's
// API server that does not speak pods/exec's WebSocket protocol, as an
// API server or kubelet before Kubernetes 1.30 (which does not know
// v5.channel.k8s.io and refuses the handshake with 403 Forbidden, in
// golang.org/x/net/websocket) or a proxy that does not pass WebSocket
// upgrades does. Everything else, SPDY upgrades included, it passes on.
type oldProxy struct {
	kubeconfig string // a kubeconfig that reaches the cluster through the proxy

	mu   sync.Mutex
	seen []upgrade // the exec requests, in order
}

func (p *oldProxy) record(u upgrade) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, u)
}

func (p *oldProxy) upgrades() []upgrade {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// startOldProxy starts the proxy, with a certificate of its own (which
// its kubeconfig trusts) and the admin's token passed on to the API
// server, whose certificate it verifies against the cluster's CA.
func startOldProxy(t *testing.T, apiserver *rest.Config) *oldProxy {
	t.Helper()
	if apiserver.BearerToken == "" {
		t.Fatal("the test cluster's kubeconfig has no token for the proxy to pass on")
	}
	target, err := url.Parse(apiserver.Host)
	if err != nil {
		t.Fatalf("the API server's address %q: %v", apiserver.Host, err)
	}
	tlsCfg, err := rest.TLSConfigFor(apiserver)
	if err != nil {
		t.Fatalf("TLS configuration for the API server: %v", err)
	}
	upstream := &http.Transport{TLSClientConfig: tlsCfg}
	t.Cleanup(upstream.CloseIdleConnections)
	p := &oldProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: upstream,
		// Upgraded streams (SPDY's 101 Switching Protocols) are
		// hijacked and copied both ways by ReverseProxy itself.
		ModifyResponse: func(resp *http.Response) error {
			if isExec(resp.Request) {
				p.record(upgrade{protocol: upgradeOf(resp.Request), command: execCommand(resp.Request), status: resp.StatusCode})
			}
			return nil
		},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isExec(r) && upgradeOf(r) == "websocket" {
			p.record(upgrade{protocol: "websocket", command: execCommand(r), status: http.StatusForbidden})
			w.WriteHeader(http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)

	kc := clientcmdapi.NewConfig()
	kc.Clusters["old"] = &clientcmdapi.Cluster{
		Server:                   srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: apiserver.BearerToken}
	kc.Contexts["old"] = &clientcmdapi.Context{Cluster: "old", AuthInfo: "admin"}
	kc.CurrentContext = "old"
	p.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.kubeconfig); err != nil {
		t.Fatalf("write the proxy's kubeconfig: %v", err)
	}
	return p
}

// isExec says whether r is for a pod's exec subresource.
func isExec(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/") && strings.HasSuffix(r.URL.Path, "/exec")
}

// upgradeOf is the protocol r asks to upgrade to: "websocket", "spdy"
// (SPDY/3.1), or the header as it is.
func upgradeOf(r *http.Request) string {
	u := strings.ToLower(r.Header.Get("Upgrade"))
	switch {
	case u == "websocket":
		return "websocket"
	case strings.HasPrefix(u, "spdy/"):
		return "spdy"
	}
	return u
}

// execCommand is the command an exec request runs, its words joined.
func execCommand(r *http.Request) string {
	return strings.Join(r.URL.Query()["command"], " ")
}

// Where the API server (or a proxy in front of it) refuses pods/exec's
// WebSocket protocol, every exec falls back to SPDY: the sandbox starts,
// the worker is installed (a script reading stdin to its end), and
// commands on the worker's mux get their stdin, stdout, stderr and exit
// code. The proxy saw each exec try WebSocket first, be refused, and
// then upgrade to SPDY (101 from the API server); nothing else.
func TestExecFallsBackToSPDY(t *testing.T) {
	c := cluster(t)
	cfg, _ := settings(t, c, map[string]any{"api": "pods"})
	proxy := startOldProxy(t, c.RESTConfig())
	t.Setenv("KUBECONFIG", proxy.kubeconfig)
	var l logs
	p := newProvider(t, &l)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("provider log:\n%s", l.String())
		}
	})
	sb := up(t, p, spec("spdy", cfg, sdk.NetworkOpen))

	for i, in := range []string{"first line\nsecond line\n", ""} {
		var out, errb bytes.Buffer
		st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "cat; echo to stderr >&2; exit 7"}},
			sdk.ExecIO{Stdin: strings.NewReader(in), Stdout: &out, Stderr: &errb})
		if err != nil || st.Code != 7 || out.String() != in || errb.String() != "to stderr\n" {
			t.Errorf("exec %d over SPDY: %+v, %v; stdout %q, stderr %q; want exit 7, stdout %q, stderr %q", i, st, err, out.String(), errb.String(), in, "to stderr\n")
		}
	}

	seen := proxy.upgrades()
	byCommand := map[string][]upgrade{}
	var commands []string
	for _, u := range seen {
		if _, ok := byCommand[u.command]; !ok {
			commands = append(commands, u.command)
		}
		byCommand[u.command] = append(byCommand[u.command], u)
	}
	var mux, install bool
	for _, cmd := range commands {
		us := byCommand[cmd]
		for i, u := range us {
			want := upgrade{protocol: "websocket", command: cmd, status: http.StatusForbidden}
			if i%2 == 1 {
				want = upgrade{protocol: "spdy", command: cmd, status: http.StatusSwitchingProtocols}
			}
			if u != want {
				t.Errorf("exec of %q, request %d: %+v; want %+v (each exec a refused WebSocket, then SPDY)", cmd, i, u, want)
			}
		}
		if len(us)%2 != 0 {
			t.Errorf("exec of %q: a WebSocket refused without an SPDY upgrade after it: %+v", cmd, us)
		}
		mux = mux || strings.HasSuffix(cmd, " mux")
		install = install || strings.Contains(cmd, envelope.InstallScript)
	}
	if !mux || !install {
		t.Errorf("the proxy saw no exec of the worker's mux (%v) or of its install (%v): %s", mux, install, describeUpgrades(seen))
	}
	t.Logf("exec requests through the proxy: %s", describeUpgrades(seen))
}

// describeUpgrades lists what the proxy saw, one line each.
func describeUpgrades(us []upgrade) string {
	var b strings.Builder
	for _, u := range us {
		cmd := u.command
		if len(cmd) > 60 {
			cmd = cmd[:60] + "…"
		}
		fmt.Fprintf(&b, "\n  %s %d %q", u.protocol, u.status, cmd)
	}
	return b.String()
}
