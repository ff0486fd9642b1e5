package proxy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/proxy"
)

func runGit(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gittest.Env(os.TempDir(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// sandboxGit runs git as it runs inside a sandbox: amelia-worker
// git-credential is its only credential helper and it knows nothing but the
// proxy's URL and the run token.
func sandboxGit(t *testing.T, p *testProxy, run *proxy.Run, dir string, args ...string) ([]byte, error) {
	t.Helper()
	return helperGit(t, dir, []string{"AMELIA_PROXY_URL=" + p.URL, "AMELIA_PROXY_TOKEN=" + run.Token()}, args...)
}

// helperGit runs git in env (and a HOME of its own) with amelia-worker
// git-credential as its only credential helper.
func helperGit(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	args = append([]string{"-c", "credential.helper=", "-c", "credential.helper=" + workerBin + " git-credential"}, args...)
	return runGit(t, dir, append([]string{"HOME=" + t.TempDir()}, env...), args...)
}

func TestGitWithAConfiguredToken(t *testing.T) {
	const token = "ghs_configured_token_8d1e"
	srv := gittest.NewServer(t, "x-access-token", token)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{
		OpenAI:   proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:    []string{srv.RepoURL},
		Git:      proxy.GitAuth{Token: token},
		AuditDir: auditDir,
	})
	work := t.TempDir()
	if out, err := sandboxGit(t, p, run, work, "clone", "-q", srv.RepoURL, "clone"); err != nil {
		t.Fatalf("clone through the credential proxy: %v\n%s", err, out)
	}
	clone := filepath.Join(work, "clone")
	os.WriteFile(filepath.Join(clone, "change"), []byte("from the sandbox\n"), 0o644)
	gittest.Git(t, clone, "add", "change")
	gittest.Git(t, clone, "commit", "-q", "-m", "agent change")
	if out, err := sandboxGit(t, p, run, clone, "push", "-q", "origin", "HEAD:refs/heads/amelia/w1"); err != nil {
		t.Fatalf("push through the credential proxy: %v\n%s", err, out)
	}
	recs := readAudit(t, run)
	if len(recs) == 0 {
		t.Fatal("no audit records")
	}
	for _, rec := range recs {
		if rec.Route != "git-credentials" || rec.Status != 200 || rec.Upstream != strings.TrimPrefix(srv.URL, "http://") {
			t.Errorf("audit record %+v", rec)
		}
	}
	assertNoSecret(t, auditDir, token, run.Token())
}

// Without a configured token, the host's own credential store answers
// (here git's "store" helper, in a home of the test's own).
func TestGitFromTheHostCredentialStore(t *testing.T) {
	srv := gittest.NewServer(t, "alice", "s3cret-from-the-host")
	hostHome := t.TempDir()
	os.WriteFile(filepath.Join(hostHome, ".gitconfig"), []byte("[credential]\n\thelper = store\n"), 0o600)
	os.WriteFile(filepath.Join(hostHome, ".git-credentials"), []byte(strings.Replace(srv.URL, "http://", "http://alice:s3cret-from-the-host@", 1)+"\n"), 0o600)
	p := newProxy(t, proxy.Options{Environ: gittest.Env(hostHome, "GIT_ASKPASS=/bin/false-askpass-must-not-run")})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"}, Repos: []string{srv.RepoURL}, AuditDir: auditDir})

	if out, err := sandboxGit(t, p, run, t.TempDir(), "clone", "-q", srv.RepoURL, "clone"); err != nil {
		t.Fatalf("clone with the host's stored credentials: %v\n%s", err, out)
	}

	// A repository whose credentials the host does not have: a clear
	// refusal, no prompt (the askpass above would fail loudly).
	other := gittest.NewServer(t, "bob", "unknown")
	run2 := p.start(t, proxy.RunConfig{ID: "run-2", OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"}, Repos: []string{other.RepoURL}, AuditDir: auditDir})
	out, err := sandboxGit(t, p, run2, t.TempDir(), "clone", "-q", other.RepoURL, "clone")
	if err == nil || !strings.Contains(string(out), "no git credentials for") {
		t.Errorf("clone without stored credentials: %v\n%s", err, out)
	}
	readAudit(t, run)
	readAudit(t, run2)
	assertNoSecret(t, auditDir, "s3cret-from-the-host", run.Token())
}

func TestGitCredentialsOnlyForTheRunsRepositories(t *testing.T) {
	const token = "ghs_never_for_other_hosts"
	srv := gittest.NewServer(t, "x-access-token", token)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:  []string{"https://forge.test/org/repo.git", "git@mirror.test:org/other.git"},
		Git:    proxy.GitAuth{Token: token},
	})
	out, err := sandboxGit(t, p, run, t.TempDir(), "clone", "-q", srv.RepoURL, "clone")
	if err == nil || !strings.Contains(string(out), "403") || strings.Contains(string(out), token) {
		t.Errorf("clone of a repository that is not the run's: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"the run's host", "protocol=https\nhost=forge.test\npath=org/repo.git\n", 200, "password=" + token},
		{"the run's host over http", "protocol=http\nhost=forge.test\n", 403, "https://forge.test"},
		{"another host", "protocol=https\nhost=evil.example\n", 403, "no git credentials for https://evil.example"},
		{"a suffix of the run's host", "protocol=https\nhost=forge.test.evil.test\n", 403, "no git credentials"},
		{"another port", "protocol=https\nhost=forge.test:8443\n", 403, "no git credentials"},
		{"an ssh-only repository's host", "protocol=https\nhost=mirror.test\n", 403, "no git credentials"},
		{"by url", "url=https://Forge.test/org/repo.git\n", 200, "host=forge.test\nusername=x-access-token\npassword=" + token},
		{"malformed", "protocol\n", 400, "malformed"},
		{"no host", "path=x\n", 400, "no protocol and host"},
	} {
		status, body := do(t, "POST", p.URL+"/git/credentials", run.Token(), tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q; want %d containing %q", tc.name, status, body, tc.status, tc.want)
		}
		if status != 200 && strings.Contains(body, token) {
			t.Errorf("%s: the refusal holds the token", tc.name)
		}
	}
	if status, _ := do(t, "GET", p.URL+"/git/credentials", run.Token(), ""); status != 405 {
		t.Errorf("GET: %d, want 405", status)
	}
	if status, _ := do(t, "POST", p.URL+"/git/credentials", "", "protocol=https\nhost=forge.test\n"); status != 401 {
		t.Errorf("without the run token: %d, want 401", status)
	}
}
