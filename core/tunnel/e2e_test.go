package tunnel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
)

// The host's secrets, in the host's environment as a user would have them.
// Only the scripted LLM server may see llmKey; gitToken reaches only git's
// credential helper, on request, for the run's repository host.
const (
	llmKey   = "sk-e2e-upstream-key-9b1d4c"
	gitToken = "ghs_e2e-git-token-77aa31"
)

// e2e is the whole path of a run's traffic: clients inside a local sandbox
// (behind the real plugin) → 127.0.0.1:PORT in the sandbox → the tunnel exec
// → the proxy on host loopback → the scripted LLM server, the egress target
// or the git credential answer.
type e2e struct {
	sb      *sandbox
	up      *llmtest.Server
	run     *proxy.Run
	tun     *tunnel.Host
	env     map[string]string // what amelia run gives the worker
	dialled chan string       // egress dials, by address
}

func newE2E(t *testing.T, turns ...llmtest.Turn) *e2e {
	t.Setenv("AMELIA_E2E_LLM_KEY", llmKey)
	t.Setenv("AMELIA_E2E_GIT_TOKEN", gitToken)
	e := &e2e{up: llmtest.New(t, turns...), dialled: make(chan string, 16)}

	// The only egress destination: "allowed.example:80" is this server.
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	}))
	t.Cleanup(allowed.Close)

	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	yaml := `
profiles:
  dev:
    llm:
      base_url: ` + e.up.URL() + `/v1
      api_key_env: AMELIA_E2E_LLM_KEY
    git: {token_env: AMELIA_E2E_GIT_TOKEN}
    sandbox:
      provider: local
      network: allowlist
      allowed_hosts: [allowed.example]
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.Options{Path: path, HomeDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Profile("dev")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := proxy.ProfileRun(p, os.LookupEnv, "e2e-1", []string{"https://git.example/team/repo.git"}, filepath.Join(dir, "audit"))
	if err != nil {
		t.Fatal(err)
	}

	srv, addr := serveProxy(t, proxy.Options{
		Logger: testLogger(t, nil),
		EgressDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			e.dialled <- addr
			if addr != "allowed.example:80" {
				return nil, fmt.Errorf("the test dials only allowed.example:80, not %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, allowed.Listener.Addr().String())
		},
	})
	if e.run, err = srv.Start(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.run.Close() })

	// The plugin inherits this process's environment, keys included, as it
	// would on a user's machine.
	e.sb = newSandbox(t)
	e.tun = open(t, e.sb, tunnel.HostOptions{Target: addr})
	e.env = map[string]string{
		"AMELIA_PROXY_URL":   "http://" + e.tun.Addr(),
		"AMELIA_PROXY_TOKEN": e.run.Token(),
		"GORACE":             workerEnv["GORACE"],
	}
	return e
}

// serveProxy serves a proxy on host loopback until the test ends and
// returns it with its address.
func serveProxy(t testing.TB, opts proxy.Options) (*proxy.Server, string) {
	t.Helper()
	srv := proxy.New(opts)
	addr, err := srv.ListenAndServe("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("proxy Close: %v", err)
		}
	})
	return srv, addr
}

// inside runs argv in the sandbox with the worker's environment.
func (e *e2e) inside(t *testing.T, stdin io.Reader, argv ...string) result {
	t.Helper()
	return e.sb.Run(t, e.env, stdin, argv...)
}

// curl runs curl in the sandbox; -w appends the status code on its own line.
func (e *e2e) curl(t *testing.T, args ...string) (status, body string) {
	t.Helper()
	r := e.inside(t, nil, append([]string{"curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}"}, args...)...)
	if r.Status.Code != 0 {
		t.Fatalf("curl %q in the sandbox: %v", args, r)
	}
	i := strings.LastIndex(r.Stdout, "\n")
	return r.Stdout[i+1:], r.Stdout[:i]
}

const chatBody = `{"model":"test-model","messages":[{"role":"user","content":"hi"}]%s}`

// Issue 4's end-to-end case: every client a sandbox has reaches what it needs
// through the tunnel, and the key is seen only by the LLM server.
func TestProxyThroughTunnel(t *testing.T) {
	e := newE2E(t,
		llmtest.Turn{Text: "plain answer through the tunnel", Usage: &llmtest.Usage{PromptTokens: 9, CompletionTokens: 5}},
		llmtest.Turn{Text: "streamed answer through the tunnel"},
		llmtest.Turn{Text: "generated inside the sandbox", Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 4}},
	)
	api := e.env["AMELIA_PROXY_URL"]
	bearer := "Authorization: Bearer " + e.run.Token()

	t.Run("the sandbox's environment holds no secret", func(t *testing.T) {
		r := e.inside(t, nil, "env")
		if r.Status.Code != 0 || !strings.Contains(r.Stdout, "AMELIA_PROXY_TOKEN=") {
			t.Fatalf("env in the sandbox: %v", r)
		}
		if strings.Contains(r.Stdout, llmKey) || strings.Contains(r.Stdout, gitToken) {
			t.Error("a host secret is in the sandbox's environment")
		}
	})

	t.Run("curl without the run token", func(t *testing.T) {
		status, body := e.curl(t, "-d", fmt.Sprintf(chatBody, ""), api+"/v1/chat/completions")
		if status != "401" || strings.Contains(body, "answer") {
			t.Errorf("without a token: %s %s, want 401", status, body)
		}
	})

	t.Run("curl chat completions", func(t *testing.T) {
		status, body := e.curl(t, "-H", bearer, "-H", "Content-Type: application/json", "-d", fmt.Sprintf(chatBody, ""), api+"/v1/chat/completions")
		if status != "200" || !strings.Contains(body, "plain answer through the tunnel") {
			t.Errorf("chat completions: %s %s", status, body)
		}
	})

	t.Run("curl streaming", func(t *testing.T) {
		status, body := e.curl(t, "-N", "-H", bearer, "-d", fmt.Sprintf(chatBody, `,"stream":true`), api+"/v1/chat/completions")
		if status != "200" || strings.Count(body, "data: ") < 3 || !strings.Contains(body, "data: [DONE]") {
			t.Errorf("streamed chat completions: %s %s", status, body)
		}
	})

	t.Run("amelia-worker generate (go-openai)", func(t *testing.T) {
		if r := e.inside(t, strings.NewReader("Say something."), "sh", "-c", "cat > prompt.txt"); r.Status.Code != 0 {
			t.Fatalf("write the prompt: %v", r)
		}
		r := e.inside(t, nil, workerBin, "generate", "--prompt-file", "prompt.txt", "--model", "test-model")
		if r.Status.Code != 0 || !strings.Contains(r.Stdout, "generated inside the sandbox") {
			t.Errorf("generate: %v", r)
		}
	})

	t.Run("git credentials: the run token for the proxy, none for a forge", func(t *testing.T) {
		r := e.inside(t, strings.NewReader("protocol=http\nhost="+e.tun.Addr()+"\npath=git/git.example/team/repo.git\n\n"), workerBin, "git-credential", "get")
		if r.Status.Code != 0 || !strings.Contains(r.Stdout, "password="+e.run.Token()+"\n") || strings.Contains(r.Stdout, gitToken) {
			t.Errorf("git-credential get for the proxy's git route: %v", r)
		}
		for _, host := range []string{"git.example", "github.com"} {
			r = e.inside(t, strings.NewReader("protocol=https\nhost="+host+"\npath=team/repo.git\n\n"), workerBin, "git-credential", "get")
			if r.Status.Code == 0 || strings.Contains(r.Stdout+r.Stderr, gitToken) || !strings.Contains(r.Stderr, "refused credentials for "+host) {
				t.Errorf("git-credential get for %s: %v, want a refusal", host, r)
			}
		}
	})

	t.Run("egress through the tunnel", func(t *testing.T) {
		px := "http://amelia:" + e.run.Token() + "@" + e.tun.Addr()
		status, body := e.curl(t, "-x", px, "http://allowed.example/pkg")
		if status != "200" || body != "hello from allowed.example/pkg" {
			t.Errorf("allowed host: %s %q", status, body)
		}
		status, body = e.curl(t, "-x", px, "http://denied.example/")
		if status != "403" || !strings.Contains(body, "denied.example") || !strings.Contains(body, "allowed_hosts") {
			t.Errorf("denied host: %s %q, want 403 naming the host and allowed_hosts", status, body)
		}
		if status, _ := e.curl(t, "-x", "http://"+e.tun.Addr(), "http://allowed.example/"); status != "407" {
			t.Errorf("egress without the token: %s, want 407", status)
		}
		close(e.dialled)
		var dials []string
		for a := range e.dialled {
			dials = append(dials, a)
		}
		if strings.Join(dials, " ") != "allowed.example:80" {
			t.Errorf("egress dials %q, want only allowed.example:80", dials)
		}
	})

	// The LLM server saw the real key on every request, never the token.
	reqs := e.up.Requests()
	if len(reqs) != 3 {
		t.Errorf("the LLM server got %d requests, want 3 (the unauthenticated one must not arrive)", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer "+llmKey {
			t.Errorf("LLM request %d: Authorization %q, want the real key", i, got)
		}
	}

	// The audit log has a line per request, and no secret.
	if err := e.run.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(e.run.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{llmKey, gitToken, e.run.Token()} {
		if strings.Contains(string(data), s) {
			t.Errorf("the audit log holds a secret (%.8s...)", s)
		}
	}
	routes := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		var rec proxy.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		routes[rec.Route]++
	}
	// 3 LLM calls, 3 credential requests, 2 egress requests (the 407 and
	// the 401 carried no valid token, so no run to log them under).
	if routes["openai"] != 3 || routes["git-credentials"] != 3 || routes["egress-http"] != 2 {
		t.Errorf("audit routes %v, want openai 3, git-credentials 3, egress-http 2", routes)
	}
}
