package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/gitcredential"
)

// gitFillTimeout bounds `git credential fill` on the host.
const gitFillTimeout = 30 * time.Second

// gitCredentials is where the run's git credentials come from: the
// profile's token, or the host's own credential store. They go upstream
// only, through the git route (gitroute.go); what /git/credentials
// answers the sandbox is the run's token, for the proxy itself.
type gitCredentials struct {
	auth    GitAuth
	environ []string
}

func newGitCredentials(cfg RunConfig, environ []string) *gitCredentials {
	return &gitCredentials{auth: cfg.Git, environ: gitEnviron(environ)}
}

// gitEnviron is environ for `git credential fill`: never a prompt, on a
// terminal or through an askpass program, since nobody is there to answer.
func gitEnviron(environ []string) []string {
	out := make([]string, 0, len(environ)+4)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_TERMINAL_PROMPT", "GIT_ASKPASS", "SSH_ASKPASS", "GCM_INTERACTIVE":
			continue
		}
		out = append(out, kv)
	}
	// An empty GIT_ASKPASS makes git skip core.askPass and SSH_ASKPASS too.
	return append(out, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "GCM_INTERACTIVE=never")
}

// serveHelper answers git's credential helper in the sandbox
// (amelia-worker git-credential, or the Python Amelia's
// credential-helper.sh): for the proxy itself, as the sandbox reaches it
// (the request's Host), the run's token, which git then shows the git
// route; for anything else nothing, with the way git gets there instead.
// No credential of the host's ever goes back.
func (r *Run) serveHelper(w http.ResponseWriter, req *http.Request, rec *Record) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, routeGit, http.StatusMethodNotAllowed, "method_not_allowed", "use POST with git's credential request as the body")
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, gitcredential.MaxMessage+1))
	if err != nil {
		writeError(w, routeGit, http.StatusBadRequest, "bad_request", "read request: "+err.Error())
		return
	}
	rec.RequestBytes = int64(len(body))
	msg, err := gitcredential.Read(bytes.NewReader(body))
	if err != nil {
		writeError(w, routeGit, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	protocol, host := msg.Target()
	rec.Upstream = host
	if protocol == "" || host == "" {
		writeError(w, routeGit, http.StatusBadRequest, "bad_request", "the request names no protocol and host")
		return
	}
	if protocol != "http" || host != strings.ToLower(req.Host) {
		writeError(w, routeGit, http.StatusForbidden, "host_not_allowed",
			fmt.Sprintf("no git credentials for %s://%s: they stay on the host, and git reaches the run's repositories through the proxy: %s", protocol, host, r.gitRoute.names(req.Host)))
		return
	}
	answer := gitcredential.Message{
		{Key: "protocol", Value: protocol}, {Key: "host", Value: host},
		{Key: "username", Value: "amelia"}, {Key: "password", Value: r.token},
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(answer.Bytes())
}

// errNoStoredCredential: the host's credential store has nothing for a
// host (git credential fill failed), and no token is configured.
var errNoStoredCredential = errors.New("no git credentials on this machine")

// fill is the credential for path on host: the configured token, or the
// host's credential store's answer through `git credential fill`. The
// answer holds only the username and password.
func (g *gitCredentials) fill(ctx context.Context, protocol, host, path string) (gitcredential.Message, error) {
	if g.auth.Token != "" {
		return gitcredential.Message{{Key: "username", Value: g.auth.Username}, {Key: "password", Value: g.auth.Token}}, nil
	}
	query := gitcredential.Message{{Key: "protocol", Value: protocol}, {Key: "host", Value: host}, {Key: "path", Value: path}}
	ctx, cancel := context.WithTimeout(ctx, gitFillTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "credential", "fill")
	cmd.Env = g.environ
	cmd.Stdin = bytes.NewReader(append(query.Bytes(), '\n'))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("git credential fill for %s://%s on this machine: %w", protocol, host, ctx.Err())
		}
		why := firstLine(stderr.String())
		if why == "" {
			why = err.Error()
		}
		return nil, fmt.Errorf("%w for %s://%s (git credential fill: %s); set git.token_env in the profile or store one with git", errNoStoredCredential, protocol, host, why)
	}
	got, err := gitcredential.Read(&stdout)
	if err != nil {
		return nil, fmt.Errorf("git credential fill answered badly: %v", err)
	}
	if got.Get("password") == "" {
		return nil, fmt.Errorf("%w for %s://%s (git credential fill gave no password)", errNoStoredCredential, protocol, host)
	}
	return gitcredential.Message{{Key: "username", Value: got.Get("username")}, {Key: "password", Value: got.Get("password")}}, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}
