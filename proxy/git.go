package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/gitcredential"
)

// gitFillTimeout bounds `git credential fill` on the host.
const gitFillTimeout = 30 * time.Second

// gitCredentials answers the sandbox's git credential requests for the
// run's repository hosts.
type gitCredentials struct {
	allowed []string // "protocol://host[:port]" of the run's http(s) repositories
	auth    GitAuth
	environ []string
}

func newGitCredentials(cfg RunConfig, environ []string) (*gitCredentials, error) {
	g := &gitCredentials{auth: cfg.Git, environ: gitEnviron(environ)}
	for _, r := range cfg.Repos {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			// ssh and local repositories do not use git's credential
			// helpers.
			continue
		}
		g.allowed = append(g.allowed, strings.ToLower(u.Scheme+"://"+u.Host))
	}
	slices.Sort(g.allowed)
	g.allowed = slices.Compact(g.allowed)
	return g, nil
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

func (g *gitCredentials) serve(w http.ResponseWriter, req *http.Request, rec *Record) {
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
	if !slices.Contains(g.allowed, protocol+"://"+host) {
		allowed := "none: the run has no http(s) repository"
		if len(g.allowed) > 0 {
			allowed = strings.Join(g.allowed, ", ")
		}
		writeError(w, routeGit, http.StatusForbidden, "host_not_allowed",
			fmt.Sprintf("no git credentials for %s://%s: this run gets them only for its repositories' hosts (%s)", protocol, host, allowed))
		return
	}
	answer, err := g.fill(req.Context(), protocol, host, msg)
	if err != nil {
		rec.Error = err.Error()
		writeError(w, routeGit, http.StatusNotFound, "no_credentials", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(answer.Bytes())
}

// fill answers from the configured token, or from the host's credential
// store through `git credential fill`. The answer holds only the protocol,
// host, username and password.
func (g *gitCredentials) fill(ctx context.Context, protocol, host string, req gitcredential.Message) (gitcredential.Message, error) {
	answer := gitcredential.Message{{Key: "protocol", Value: protocol}, {Key: "host", Value: host}}
	if g.auth.Token != "" {
		return append(answer, gitcredential.Attr{Key: "username", Value: g.auth.Username}, gitcredential.Attr{Key: "password", Value: g.auth.Token}), nil
	}
	query := slices.Clone(answer)
	for _, k := range []string{"path", "username"} {
		if v := req.Get(k); v != "" {
			query = append(query, gitcredential.Attr{Key: k, Value: v})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, gitFillTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "credential", "fill")
	cmd.Env = g.environ
	cmd.Stdin = bytes.NewReader(append(query.Bytes(), '\n'))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		why := firstLine(stderr.String())
		if why == "" {
			why = err.Error()
		}
		return nil, fmt.Errorf("no git credentials for %s://%s on this machine (git credential fill: %s); set git.token_env in the profile or store one with git", protocol, host, why)
	}
	got, err := gitcredential.Read(&stdout)
	if err != nil {
		return nil, fmt.Errorf("git credential fill answered badly: %v", err)
	}
	if got.Get("password") == "" {
		return nil, fmt.Errorf("no git credentials for %s://%s on this machine (git credential fill gave no password)", protocol, host)
	}
	return append(answer, gitcredential.Attr{Key: "username", Value: got.Get("username")}, gitcredential.Attr{Key: "password", Value: got.Get("password")}), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}
