// Package gittest serves real git repositories over smart HTTP for tests:
// git http-backend behind net/http/cgi, with basic authentication in front,
// as a hosted forge would ask for a token.
package gittest

import (
	"bytes"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Server is a git smart-HTTP server holding two bare repositories,
// repo.git and other.git, each seeded with a commit on main (a README),
// that accept pushes. Every request must carry the username and password
// it was made with.
type Server struct {
	*httptest.Server
	// RepoURL is the repository's URL (http://127.0.0.1:PORT/repo.git),
	// and OtherURL that of the other one on the same host.
	RepoURL, OtherURL string
	// Dir and OtherDir are the bare repositories on disk, for the test's
	// own checks.
	Dir, OtherDir string
}

// NewServer starts a server that requires user and password; it stops when
// the test ends.
func NewServer(t testing.TB, user, password string) *Server {
	t.Helper()
	root := t.TempDir()
	seed := t.TempDir()
	Git(t, seed, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(seed, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, seed, "add", "README")
	Git(t, seed, "commit", "-q", "-m", "seed")
	s := &Server{Dir: filepath.Join(root, "repo.git"), OtherDir: filepath.Join(root, "other.git")}
	for _, dir := range []string{s.Dir, s.OtherDir} {
		Git(t, root, "init", "-q", "--bare", "-b", "main", dir)
		Git(t, dir, "config", "http.receivepack", "true")
		Git(t, seed, "push", "-q", dir, "main")
	}

	backend := &cgi.Handler{
		Path: filepath.Join(Git(t, "", "--exec-path"), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	s.RepoURL, s.OtherURL = s.URL+"/repo.git", s.URL+"/other.git"
	return s
}

// Env is the environment of git run by a test: no user or system config,
// nothing interactive, a fixed identity; extra comes last and wins.
func Env(home string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GORACE=atexit_sleep_ms=0",
	}, extra...)
}

// Git runs git in dir with Env and returns its trimmed stdout; it fails the
// test if git fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Env = Env(os.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}
