package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
// proxy's URL and the run token. GIT_TRACE_CURL shows everything git sends
// and gets, as an agent reading it would see it.
func sandboxGit(t *testing.T, p *testProxy, run *proxy.Run, dir string, args ...string) ([]byte, error) {
	t.Helper()
	return helperGit(t, dir, []string{"AMELIA_PROXY_URL=" + p.URL, "AMELIA_PROXY_TOKEN=" + run.Token(), "GIT_TRACE_CURL=1", "GIT_TRACE_CURL_NO_DATA=0"}, args...)
}

// helperGit runs git in env (and a HOME of its own) with amelia-worker
// git-credential as its only credential helper.
func helperGit(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	args = append([]string{"-c", "credential.helper=", "-c", "credential.helper=" + workerBin + " git-credential"}, args...)
	return runGit(t, dir, append([]string{"HOME=" + t.TempDir()}, env...), args...)
}

// remote is the URL git in a sandbox has for the repository at repoURL:
// the proxy's git route.
func remote(t *testing.T, p *testProxy, repoURL string) string {
	t.Helper()
	path, ok := proxy.GitPath(repoURL)
	if !ok {
		t.Fatalf("GitPath(%s): not served", repoURL)
	}
	return p.URL + path
}

// git in the sandbox reaches the run's repository through the git route:
// it clones, and pushes the run's own branch, with the run token alone;
// the forge gets the host's token. Pushing another branch, deleting the
// run's, reaching the other repository on the same host or the forge
// itself, and asking the credential helper for the forge's credential all
// fail; nothing git sees or says, nor the audit log, holds the token.
func TestGitThroughTheProxy(t *testing.T) {
	const token = "ghs_configured_token_8d1e"
	srv := gittest.NewServer(t, "x-access-token", token)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{
		OpenAI:   proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:    []string{srv.RepoURL},
		Git:      proxy.GitAuth{Token: token},
		PushRef:  "refs/heads/amelia/w1",
		AuditDir: auditDir,
	})
	var seen bytes.Buffer // all that git in the sandbox saw and said
	sandbox := func(dir string, args ...string) ([]byte, error) {
		out, err := sandboxGit(t, p, run, dir, args...)
		seen.Write(out)
		return out, err
	}
	work := t.TempDir()
	if out, err := sandbox(work, "clone", "-q", remote(t, p, srv.RepoURL), "clone"); err != nil {
		t.Fatalf("clone through the git route: %v\n%s", err, out)
	}
	clone := filepath.Join(work, "clone")
	if got, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(got) != "hello\n" {
		t.Fatalf("the clone's README: %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(clone, "change"), []byte("from the sandbox\n"), 0o644)
	gittest.Git(t, clone, "add", "change")
	gittest.Git(t, clone, "commit", "-q", "-m", "agent change")
	head := gittest.Git(t, clone, "rev-parse", "HEAD")
	if out, err := sandbox(clone, "push", "-q", "origin", "HEAD:refs/heads/amelia/w1"); err != nil {
		t.Fatalf("push of the run's branch through the git route: %v\n%s", err, out)
	}
	if got := gittest.Git(t, srv.Dir, "rev-parse", "amelia/w1"); got != head {
		t.Errorf("the forge's amelia/w1 = %s, want the pushed %s", got, head)
	}
	mainBefore := gittest.Git(t, srv.Dir, "rev-parse", "main")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another branch", []string{"push", "origin", "HEAD:refs/heads/main"}, "! [remote rejected] HEAD -> main (the run may push refs/heads/amelia/w1 only)"},
		{"a branch of the run's name elsewhere", []string{"push", "origin", "HEAD:refs/heads/feature/amelia/w1"}, "(the run may push refs/heads/amelia/w1 only)"},
		{"a tag", []string{"push", "origin", "HEAD:refs/tags/v1"}, "(the run may push refs/heads/amelia/w1 only)"},
		{"deleting the run's branch", []string{"push", "origin", ":refs/heads/amelia/w1"}, "(the run may not delete refs/heads/amelia/w1)"},
		{"the other repository", []string{"clone", "-q", remote(t, p, srv.OtherURL), "other"}, "other.git is not a repository of this run"},
		{"the forge itself", []string{"clone", "-q", srv.RepoURL, "direct"}, "they stay on the host"},
		{"the other repository, directly", []string{"clone", "-q", srv.OtherURL, "direct-other"}, "they stay on the host"},
	} {
		out, err := sandbox(clone, tc.args...)
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v, want a refusal with %q:\n%s", tc.name, err, tc.want, out)
		}
	}
	if got := gittest.Git(t, srv.Dir, "for-each-ref", "--format=%(refname) %(objectname)"); got != "refs/heads/amelia/w1 "+head+"\nrefs/heads/main "+mainBefore {
		t.Errorf("the forge's refs after the refused pushes:\n%s", got)
	}
	if got := gittest.Git(t, srv.OtherDir, "for-each-ref", "--format=%(refname)"); got != "refs/heads/main" {
		t.Errorf("the other repository's refs: %s", got)
	}

	// What the sandbox's credential helper answers: the run's own token,
	// for the proxy; for the forge, nothing.
	for host, want := range map[string]string{strings.TrimPrefix(p.URL, "http://"): "password=" + run.Token(), strings.TrimPrefix(srv.URL, "http://"): ""} {
		cmd := exec.Command(workerBin, "git-credential", "get")
		cmd.Env = []string{"AMELIA_PROXY_URL=" + p.URL, "AMELIA_PROXY_TOKEN=" + run.Token()}
		cmd.Stdin = strings.NewReader("protocol=http\nhost=" + host + "\n\n")
		out, _ := cmd.CombinedOutput()
		seen.Write(out)
		if want != "" && !strings.Contains(string(out), want) || want == "" && strings.Contains(string(out), "password=") {
			t.Errorf("git-credential get for %s: %s", host, out)
		}
	}
	if !strings.Contains(seen.String(), "Authorization: Basic") {
		t.Fatal("the trace shows no Authorization header: GIT_TRACE_CURL did not trace")
	}
	if strings.Contains(seen.String(), token) {
		t.Errorf("git in the sandbox saw the forge's token:\n%s", seen.String())
	}
	recs := readAudit(t, run)
	routes := map[string]int{}
	for _, rec := range recs {
		routes[rec.Route]++
		if rec.Route == "git" && rec.Status == 200 && rec.Upstream != strings.TrimPrefix(srv.URL, "http://") {
			t.Errorf("audit record %+v: want the forge as its upstream", rec)
		}
	}
	if routes["git"] == 0 || routes["git-credentials"] == 0 {
		t.Errorf("audit routes %v: want git and git-credentials", routes)
	}
	assertNoSecret(t, auditDir, token, run.Token())
}

// Without a configured token, the host's own credential store answers
// (here git's "store" helper, in a home of the test's own); a host it has
// nothing for gets no credential, and the forge's refusal is one line
// that says where to set one, with no prompt.
func TestGitFromTheHostCredentialStore(t *testing.T) {
	srv := gittest.NewServer(t, "alice", "s3cret-from-the-host")
	hostHome := t.TempDir()
	os.WriteFile(filepath.Join(hostHome, ".gitconfig"), []byte("[credential]\n\thelper = store\n"), 0o600)
	os.WriteFile(filepath.Join(hostHome, ".git-credentials"), []byte(strings.Replace(srv.URL, "http://", "http://alice:s3cret-from-the-host@", 1)+"\n"), 0o600)
	p := newProxy(t, proxy.Options{Environ: gittest.Env(hostHome, "GIT_ASKPASS=/bin/false-askpass-must-not-run")})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"}, Repos: []string{srv.RepoURL}, AuditDir: auditDir})
	out, err := sandboxGit(t, p, run, t.TempDir(), "clone", "-q", remote(t, p, srv.RepoURL), "clone")
	if err != nil {
		t.Fatalf("clone with the host's stored credentials: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "s3cret-from-the-host") {
		t.Errorf("git in the sandbox saw the host's stored credential:\n%s", out)
	}

	other := gittest.NewServer(t, "bob", "unknown")
	run2 := p.start(t, proxy.RunConfig{ID: "run-2", OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"}, Repos: []string{other.RepoURL}, AuditDir: auditDir})
	out, err = sandboxGit(t, p, run2, t.TempDir(), "clone", "-q", remote(t, p, other.RepoURL), "clone")
	if err == nil || !strings.Contains(string(out), "403") {
		t.Errorf("clone without stored credentials: %v\n%s", err, out)
	}
	var rec proxy.Record
	for _, r := range readAudit(t, run2) {
		if r.Route == "git" {
			rec = r
		}
	}
	if !strings.Contains(rec.Error, "refused the host's git credentials") || !strings.Contains(rec.Error, "git.token_env") {
		t.Errorf("the audit record of the refused clone: %+v", rec)
	}
	readAudit(t, run)
	assertNoSecret(t, auditDir, "s3cret-from-the-host", run.Token())
}

// The git route serves git's smart protocol for the run's repositories
// and nothing else, each refusal one line that says why.
func TestGitRouteRefusals(t *testing.T) {
	srv := gittest.NewServer(t, "x-access-token", "ghs_route_refusals")
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:  []string{srv.RepoURL},
		Git:    proxy.GitAuth{Token: "ghs_route_refusals"},
	})
	route := strings.TrimPrefix(remote(t, p, srv.RepoURL), p.URL)
	// A run that pushes, to the other repository.
	pushRun := p.start(t, proxy.RunConfig{
		ID: "pusher", OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos: []string{srv.OtherURL}, Git: proxy.GitAuth{Token: "ghs_route_refusals"}, PushRef: "refs/heads/amelia/w",
	})
	pushRoute := strings.TrimPrefix(remote(t, p, srv.OtherURL), p.URL)
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		token                    string
		status                   int
		want                     string
	}{
		{"refs", "GET", route + "/info/refs?service=git-upload-pack", "", nil, run.Token(), 200, "service=git-upload-pack"},
		{"the same without .git", "GET", strings.TrimSuffix(route, ".git") + "/info/refs?service=git-upload-pack", "", nil, run.Token(), 200, "service=git-upload-pack"},
		{"no token", "GET", route + "/info/refs?service=git-upload-pack", "", nil, "", 401, "run token"},
		{"the dumb protocol", "GET", route + "/HEAD", "", nil, run.Token(), 404, "smart HTTP"},
		{"refs without a service", "GET", route + "/info/refs", "", nil, run.Token(), 400, "service="},
		{"another service", "GET", route + "/info/refs?service=git-upload-archive", "", nil, run.Token(), 400, "service="},
		{"refs by POST", "POST", route + "/info/refs?service=git-upload-pack", "", nil, run.Token(), 400, "GET"},
		{"a path that climbs", "GET", route + "/../other.git/info/refs?service=git-upload-pack", "", nil, run.Token(), 400, "segment"},
		{"an encoded climb", "GET", route + "/%2e%2e/other.git/info/refs?service=git-upload-pack", "", nil, run.Token(), 400, "percent-encoding"},
		{"the repository in upper case", "GET", strings.Replace(route, "repo.git", "REPO.git", 1) + "/info/refs?service=git-upload-pack", "", nil, run.Token(), 403, "not a repository of this run"},
		{"a push without a ref update", "POST", route + "/git-receive-pack", "0000", nil, run.Token(), 400, "without a ref update"},
		{"a push by a run that pushes nothing", "POST", route + "/git-receive-pack", pushCommand("refs/heads/amelia/x"), nil, run.Token(), 200, "ng refs/heads/amelia/x this run pushes nothing"},
		{"a push of two refs", "POST", pushRoute + "/git-receive-pack", pushCommand("refs/heads/amelia/w", "refs/heads/main"), nil, pushRun.Token(), 200,
			"ng refs/heads/amelia/w refused with the rest of the push\n0041ng refs/heads/main the run may push refs/heads/amelia/w only"},
		{"a malformed push", "POST", route + "/git-receive-pack", "0009abcde", nil, run.Token(), 400, "not one"},
		{"an encoded push", "POST", route + "/git-receive-pack", pushCommand("refs/heads/amelia/x"), map[string]string{"Content-Encoding": "gzip"}, run.Token(), 400, "must not be encoded"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, p.URL+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.SetBasicAuth("amelia", tc.token)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(body.String(), tc.want) {
			t.Errorf("%s: %d %.300s; want %d with %q", tc.name, resp.StatusCode, body.String(), tc.status, tc.want)
		}
		if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate: git would not ask its helper for the token", tc.name)
		}
	}
}

// pushCommand is the command list of a push creating ref, as git sends
// it, with no pack after.
func pushCommand(refs ...string) string {
	var b strings.Builder
	for i, ref := range refs {
		line := strings.Repeat("0", 40) + " " + strings.Repeat("1", 40) + " " + ref
		if i == 0 {
			line += "\x00report-status"
		}
		fmt.Fprintf(&b, "%04x%s\n", len(line)+5, line)
	}
	return b.String() + "0000"
}

// A forge that echoes the credential back — in a redirect's Location, in
// a header git reads — hands it to nobody: what the route sends back
// holds it redacted.
func TestGitRouteRedactsWhatComesBack(t *testing.T) {
	const token = "ghs_echoed_back_by_the_forge_41c2"
	forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, password, _ := r.BasicAuth()
		if strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-receive-pack" {
			w.Header().Set("Content-Type", "text/plain; token="+password)
			w.Write([]byte("not a pack"))
			return
		}
		http.Redirect(w, r, "https://forge.example/moved?token="+password, http.StatusFound)
	}))
	t.Cleanup(forge.Close)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1"},
		Repos:  []string{forge.URL + "/org/repo.git"},
		Git:    proxy.GitAuth{Token: token},
	})
	route := remote(t, p, forge.URL+"/org/repo.git")
	for _, service := range []string{"git-upload-pack", "git-receive-pack"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", route+"/info/refs?service="+service, nil)
		req.SetBasicAuth("amelia", run.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		back := fmt.Sprint(resp.Header) + body.String()
		if strings.Contains(back, token) || !strings.Contains(back, "[redacted]") {
			t.Errorf("%s: the forge's echo of the token came back as %d %q", service, resp.StatusCode, back)
		}
	}
}
