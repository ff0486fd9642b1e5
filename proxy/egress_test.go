package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

// hostEcho answers every request with the Host it was sent for.
func hostEcho(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello from %s", r.Host)
}

type curlResult struct {
	code           int
	stdout, stderr string
}

// curl runs the real curl with no proxy settings from the environment.
func curl(t *testing.T, args ...string) curlResult {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed for the egress proxy tests and was not found: apt-get install curl")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-sS", "--max-time", "30"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := curlResult{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// proxyURL is the proxy URL a sandbox is given: the run token as the
// password.
func proxyURL(base, token string) string {
	u, _ := url.Parse(base)
	u.User = url.UserPassword("amelia", token)
	return u.String()
}

// dialRecorder stands in for DNS: it sends the names it knows to local
// servers and records every address it was asked for.
type dialRecorder struct {
	mu     sync.Mutex
	routes map[string]string
	asked  []string
}

func (d *dialRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, addr)
	to, ok := d.routes[addr]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s: no such host in this test", addr)
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

func (d *dialRecorder) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}

func TestEgressWithCurl(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(hostEcho))
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(hostEcho))
	t.Cleanup(tlsSrv.Close)
	plainAddr := strings.TrimPrefix(plain.URL, "http://")
	_, plainPort, _ := net.SplitHostPort(plainAddr)

	names := &dialRecorder{routes: map[string]string{
		"allowed.example:80":            plainAddr,
		"api.pkg.example:80":            plainAddr,
		"allowed.example:443":           strings.TrimPrefix(tlsSrv.URL, "https://"),
		"127.0.0.1:" + plainPort:        plainAddr,
		tlsSrv.Listener.Addr().String(): tlsSrv.Listener.Addr().String(),
	}}
	p := newProxy(t, proxy.Options{EgressDial: names.dial})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{
		OpenAI:       proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1", Key: realKey},
		AllowedHosts: []string{"allowed.example", "*.pkg.example", "127.0.0.1"},
		AuditDir:     auditDir,
	})
	px := proxyURL(p.URL, run.Token())

	t.Run("allowed", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"plain http to an allowed name", []string{"-x", px, "http://allowed.example/"}, "hello from allowed.example"},
			{"plain http to a wildcard subdomain", []string{"-x", px, "http://api.pkg.example/simple/"}, "hello from api.pkg.example"},
			{"plain http to a listed IP", []string{"-x", px, plain.URL + "/x"}, "hello from " + plainAddr},
			{"CONNECT to an allowed name", []string{"-k", "-x", px, "https://allowed.example/"}, "hello from allowed.example"},
			{"CONNECT to a listed IP", []string{"-k", "-x", px, tlsSrv.URL}, "hello from " + tlsSrv.Listener.Addr().String()},
			{"CONNECT for plain http (-p)", []string{"-p", "-x", px, "http://allowed.example/"}, "hello from allowed.example"},
			// The Host header cannot name another site than the URL's.
			{"spoofed Host header", []string{"-x", px, "-H", "Host: evil.example", "http://allowed.example/"}, "hello from allowed.example"},
		} {
			r := curl(t, tc.args...)
			if r.code != 0 || r.stdout != tc.want {
				t.Errorf("%s: curl exit %d, stdout %q, stderr %q; want %q", tc.name, r.code, r.stdout, r.stderr, tc.want)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		before := len(names.dialled())
		for _, tc := range []struct {
			name, url, want string
		}{
			{"a host not listed", "http://evil.example/", `evil.example is not in sandbox.allowed_hosts of profile dev`},
			{"an allowed name as a prefix", "http://allowed.example.evil.test/", "allowed.example.evil.test is not in sandbox.allowed_hosts"},
			{"a wildcard's own domain", "http://pkg.example/", "pkg.example is not in sandbox.allowed_hosts"},
			{"an IP not listed", "http://127.0.0.2:" + plainPort + "/", "127.0.0.2 is an IP address"},
			{"an IPv6 literal", "http://[::1]:" + plainPort + "/", "::1 is an IP address"},
		} {
			r := curl(t, "-x", px, "-w", "\n%{http_code}", tc.url)
			if !strings.HasSuffix(r.stdout, "\n403") || !strings.Contains(r.stdout, tc.want) {
				t.Errorf("%s: curl exit %d, stdout %q; want 403 naming %q", tc.name, r.code, r.stdout, tc.want)
			}
		}
		r := curl(t, "-k", "-x", px, "https://evil.example/")
		if r.code == 0 || !strings.Contains(r.stderr, "403") {
			t.Errorf("CONNECT to a host not listed: curl exit %d, stderr %q; want a refused tunnel (403)", r.code, r.stderr)
		}
		if got := names.dialled()[before:]; len(got) != 0 {
			t.Errorf("the proxy dialled refused hosts: %v", got)
		}
	})

	t.Run("token", func(t *testing.T) {
		for _, bad := range []string{p.URL, proxyURL(p.URL, "amr_wrong"), proxyURL(p.URL, realKey)} {
			r := curl(t, "-x", bad, "-w", "%{http_code}", "-o", "/dev/null", "http://allowed.example/")
			if r.stdout != "407" {
				t.Errorf("proxy URL without the run token: status %q, want 407", r.stdout)
			}
		}
	})

	recs := readAudit(t, run)
	var connects, refused int
	for _, rec := range recs {
		if rec.Route == "egress-connect" && rec.Status == 200 {
			connects++
			if rec.RequestBytes == 0 || rec.ResponseBytes == 0 {
				t.Errorf("CONNECT record without byte counts: %+v", rec)
			}
		}
		if rec.Status == 403 {
			refused++
			if rec.Upstream == "" || rec.Error == "" {
				t.Errorf("refusal record without host or reason: %+v", rec)
			}
		}
	}
	if connects != 3 || refused < 6 {
		t.Errorf("audit: %d CONNECT tunnels (want 3), %d refusals (want at least 6): %+v", connects, refused, recs)
	}
	assertNoSecret(t, auditDir, realKey, run.Token())
}

// With the real dialer, an allowed name that resolves to this host's own
// loopback is refused: an allowlist entry must not open the host's
// services to the sandbox.
func TestEgressRefusesNamesThatResolveToLoopback(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(hostEcho))
	t.Cleanup(plain.Close)
	_, port, _ := net.SplitHostPort(plain.Listener.Addr().String())
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"}, AllowedHosts: []string{"localhost", "127.0.0.1"}})
	px := proxyURL(p.URL, run.Token())

	r := curl(t, "-x", px, "-w", "\n%{http_code}", "http://localhost:"+port+"/")
	if !strings.HasSuffix(r.stdout, "\n403") || !strings.Contains(r.stdout, "resolves to") {
		t.Errorf("allowed name resolving to loopback: %q; want 403 saying what it resolves to", r.stdout)
	}
	// Listing the IP itself is an explicit choice, and works.
	if r := curl(t, "-x", px, plain.URL); r.stdout != "hello from "+plain.Listener.Addr().String() {
		t.Errorf("listed loopback IP: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestEgressWithNetworkNone(t *testing.T) {
	p := newProxy(t, proxy.Options{EgressDial: (&dialRecorder{}).dial})
	run := p.start(t, proxy.RunConfig{
		OpenAI:       proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Network:      sdk.NetworkNone,
		AllowedHosts: []string{"allowed.example"},
	})
	r := curl(t, "-x", proxyURL(p.URL, run.Token()), "-w", "\n%{http_code}", "http://allowed.example/")
	if !strings.HasSuffix(r.stdout, "\n403") || !strings.Contains(r.stdout, "sandbox.network: none") {
		t.Errorf("network none: %q; want 403 naming the policy", r.stdout)
	}
}
