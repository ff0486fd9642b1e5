package proxy_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
)

// The Python Amelia's worker reaches this proxy as it reaches its own: the
// run token in X-Amelia-Proxy-Token (its bearer token is proxy-managed),
// X-Amelia-Profile beside it, and the routes under /proxy/v1.
func TestPythonWorkerIdentity(t *testing.T) {
	up := llmtest.NewWithOptions(t, llmtest.Options{Script: func(int, *llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: "hi"} }})
	var logs bytes.Buffer
	p := newProxy(t, proxy.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	gitSrv := gittest.NewServer(t, "x-access-token", "ghs_identity_test_token")
	run := p.start(t, proxy.RunConfig{
		OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey},
		Repos:  []string{gitSrv.RepoURL},
		Git:    proxy.GitAuth{Token: "ghs_identity_test_token"},
	})
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	// The sandbox's git asks for the proxy's own credential (the run
	// token, for the git route); the forge's stays on the host.
	cred := "protocol=http\nhost=" + strings.TrimPrefix(p.URL, "http://") + "\n\n"
	forge := "protocol=http\nhost=" + strings.TrimPrefix(gitSrv.URL, "http://") + "\n\n"
	for _, tt := range []struct {
		name, path, body string
		header           map[string]string
		status           int
		want             string // in the body
	}{
		{"python worker, /proxy/v1", "/proxy/v1/chat/completions", chat,
			map[string]string{"Authorization": "Bearer proxy-managed", "X-Amelia-Proxy-Token": run.Token(), "X-Amelia-Profile": "python-profile-7x"}, 200, `"hi"`},
		{"the header alone", "/v1/chat/completions", chat, map[string]string{"X-Amelia-Proxy-Token": run.Token()}, 200, `"hi"`},
		{"the bearer alone, under /proxy/v1", "/proxy/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + run.Token()}, 200, `"hi"`},
		{"the header wins over a valid bearer", "/v1/chat/completions", chat,
			map[string]string{"Authorization": "Bearer " + run.Token(), "X-Amelia-Proxy-Token": "amr_wrong"}, 401, "unauthorized"},
		{"the profile header alone", "/proxy/v1/chat/completions", chat, map[string]string{"X-Amelia-Profile": "dev"}, 401, "X-Amelia-Proxy-Token"},
		{"git credentials, python path", "/proxy/v1/git/credentials", cred,
			map[string]string{"X-Amelia-Proxy-Token": run.Token(), "X-Amelia-Profile": "default"}, 200, "password=" + run.Token()},
		{"git credentials under /v1", "/v1/git/credentials", cred, map[string]string{"X-Amelia-Proxy-Token": run.Token()}, 200, "password=" + run.Token()},
		{"the forge's git credentials", "/proxy/v1/git/credentials", forge, map[string]string{"X-Amelia-Proxy-Token": run.Token()}, 403, "they stay on the host"},
		{"not a python path", "/proxy/v2/chat/completions", chat, map[string]string{"X-Amelia-Proxy-Token": run.Token()}, 404, "no route /proxy/v2/chat/completions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+tt.path, strings.NewReader(tt.body))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
				t.Errorf("%d %s; want %d with %q", resp.StatusCode, body, tt.status, tt.want)
			}
		})
	}
	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the upstream got %d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer "+realKey {
			t.Errorf("request %d: Authorization %q, want the real key", i, got)
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Amelia-") {
				t.Errorf("request %d: %s went upstream", i, k)
			}
		}
	}
	recs := readAudit(t, run)
	if len(recs) != 7 {
		t.Fatalf("%d audit records, want 7 (the refused requests are not a run's): %+v", len(recs), recs)
	}
	if recs[0].Path != "/proxy/v1/chat/completions" || recs[0].Route != "openai" || recs[4].Route != "git-credentials" {
		t.Errorf("audit: %+v", recs)
	}
	if strings.Contains(logs.String(), run.Token()) || strings.Contains(logs.String(), "python-profile-7x") {
		t.Errorf("the logs hold the token or the profile header:\n%s", logs.String())
	}
	assertNoSecret(t, filepath.Dir(run.AuditPath()), run.Token(), realKey, "ghs_identity_test_token")
}

// Real git in the Python Amelia's environment, with amelia-worker
// git-credential as its helper, clones through this proxy's git route.
func TestGitPythonEnvironment(t *testing.T) {
	const token = "ghs_python_env_token_5c2a"
	srv := gittest.NewServer(t, "x-access-token", token)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:  []string{srv.RepoURL},
		Git:    proxy.GitAuth{Token: token},
	})
	work := t.TempDir()
	out, err := helperGit(t, work, []string{"LLM_PROXY_URL=" + p.URL + "/proxy/v1", "AMELIA_PROFILE=work", "AMELIA_PROXY_TOKEN=" + run.Token()},
		"clone", "-q", remote(t, p, srv.RepoURL), "clone")
	if err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(work, "clone", ".git")); err != nil {
		t.Fatal(err)
	}
}
