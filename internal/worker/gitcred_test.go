package worker_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// credProxy stands in for the host proxy's /git/credentials route: it
// answers forge.test with a token and refuses every other host.
type credProxy struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
}

func newCredProxy(t *testing.T) *credProxy {
	p := &credProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/git/credentials" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+runToken {
			http.Error(w, "missing or wrong run token", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.requests = append(p.requests, string(body))
		p.mu.Unlock()
		if !strings.Contains(string(body), "host=forge.test\n") {
			http.Error(w, "host not allowed for this run", http.StatusForbidden)
			return
		}
		io.WriteString(w, "protocol=https\nhost=forge.test\nusername=x-access-token\npassword=ghs_secret\n")
	}))
	t.Cleanup(p.Close)
	return p
}

// got is the credential requests the proxy received.
func (p *credProxy) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

func TestGitCredentialHelper(t *testing.T) {
	proxy := newCredProxy(t)
	env := []string{"AMELIA_PROXY_URL=" + proxy.URL, "AMELIA_PROXY_TOKEN=" + runToken}

	r := runWorker(t, env, strings.NewReader("protocol=https\nhost=forge.test\npath=org/repo.git\n\n"), "git-credential", "get")
	if r.code != 0 {
		t.Fatalf("get: exit %d: %s", r.code, r.stderr)
	}
	if want := "protocol=https\nhost=forge.test\nusername=x-access-token\npassword=ghs_secret\n"; string(r.stdout) != want {
		t.Errorf("get answered %q, want %q", r.stdout, want)
	}
	if got := proxy.got()[0]; got != "protocol=https\nhost=forge.test\npath=org/repo.git\n" {
		t.Errorf("the proxy got %q", got)
	}

	r = runWorker(t, env, strings.NewReader("protocol=https\nhost=evil.example\n\n"), "git-credential", "get")
	if r.code != 1 || len(r.stdout) != 0 {
		t.Errorf("refused host: exit %d, stdout %q; want 1 and nothing", r.code, r.stdout)
	}
	contains(t, "stderr", string(r.stderr), "refused credentials for evil.example: 403")

	for _, op := range []string{"store", "erase"} {
		r = runWorker(t, env, strings.NewReader("protocol=https\nhost=forge.test\npassword=p\n\n"), "git-credential", op)
		if r.code != 0 || len(r.stdout) != 0 {
			t.Errorf("%s: exit %d, stdout %q; want 0 and nothing", op, r.code, r.stdout)
		}
	}
	if n := len(proxy.got()); n != 2 {
		t.Errorf("the proxy got %d requests, want 2 (store and erase stay local)", n)
	}

	r = runWorker(t, nil, strings.NewReader("host=forge.test\n\n"), "git-credential", "get")
	if r.code != 1 || !bytes.Contains(r.stderr, []byte("AMELIA_PROXY_URL")) {
		t.Errorf("outside a sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Real git, configured as the image configures it, gets its credentials from
// the proxy through the helper.
func TestGitUsesTheHelper(t *testing.T) {
	proxy := newCredProxy(t)
	cmd := exec.Command("git", "-c", "credential.helper=", "-c", "credential.helper="+workerBin+" git-credential",
		"credential", "fill")
	cmd.Env = append(os.Environ(), "AMELIA_PROXY_URL="+proxy.URL, "AMELIA_PROXY_TOKEN="+runToken,
		"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	cmd.Stdin = strings.NewReader("url=https://forge.test/org/repo.git\n\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git credential fill: %v\n%s", err, out)
	}
	contains(t, "git credential fill", string(out), "password=ghs_secret")
	contains(t, "git credential fill", string(out), "username=x-access-token")
}

func TestVersion(t *testing.T) {
	r := runWorker(t, nil, nil, "version")
	if r.code != 0 || !strings.HasPrefix(string(r.stdout), "amelia-worker ") || !strings.HasSuffix(string(r.stdout), " protocol 1\n") {
		t.Errorf("version: exit %d, %q", r.code, r.stdout)
	}
}
