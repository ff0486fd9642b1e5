package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The git route. git in the sandbox reaches the run's repositories through
// the proxy, which adds the credential on the way out, as hosted sandboxes
// add API keys: the sandbox's remote is http://PROXY/git/HOST/PATH (see
// GitPath), git authenticates to the proxy with the run's token (the
// password its credential helper gets from /git/credentials), and the
// proxy forwards the request to the repository's own URL with the real
// credential. The token never crosses the tunnel.
//
// The route serves the run's repositories only (host and path, so not
// every repository of its host), and git's smart HTTP protocol only: ref
// discovery (GET info/refs?service=...), fetch (POST git-upload-pack) and
// push (POST git-receive-pack), where every ref update is read before
// anything is sent upstream and the push is refused unless each creates or
// updates the run's own branch (RunConfig.PushRef).

// gitPrefix is the git route's path prefix.
const gitPrefix = "/git/"

// The smart HTTP endpoints below a repository.
const (
	gitInfoRefs    = "/info/refs"
	gitUploadPack  = "/git-upload-pack"
	gitReceivePack = "/git-receive-pack"
)

// Bounds of the git route.
const (
	// maxPushCommands bounds the command list of a push: ref updates,
	// read whole before anything goes upstream.
	maxPushCommands = 64 << 10
	// gitHeaderTimeout bounds the wait for a remote's response headers.
	gitHeaderTimeout = 5 * time.Minute
)

// GitPath is the path on the proxy of the git route to the repository at
// rawURL (http or https), "/git/HOST/PATH", and false for a URL it does not
// serve (ssh, a local path): git in the sandbox uses the proxy's URL plus
// this as the repository's remote.
func GitPath(rawURL string) (string, bool) {
	r, ok := parseGitRepo(rawURL)
	if !ok {
		return "", false
	}
	return gitPrefix + r.host + r.path, true
}

// gitRepo is one of the run's repositories the route serves.
type gitRepo struct {
	host     string   // lower case, with the port when the URL has one
	path     string   // as the URL has it, from its first "/"
	upstream *url.URL // the URL git would use without the proxy
}

// key names r in the route: its host and path without a trailing ".git"
// or "/", so both forms reach it.
func (r gitRepo) key() string { return gitKey(r.host + r.path) }

func gitKey(s string) string {
	s = strings.TrimSuffix(s, "/")
	return strings.TrimSuffix(s, ".git")
}

func parseGitRepo(rawURL string) (gitRepo, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Path == "" || u.Path == "/" || u.RawPath != "" || canonical(u.Path) != nil {
		return gitRepo{}, false
	}
	up := &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host), Path: strings.TrimSuffix(u.Path, "/")}
	return gitRepo{host: up.Host, path: up.Path, upstream: up}, true
}

// gitRemotes is a run's git route: its repositories, the one ref it may
// push, and where the credentials come from.
type gitRemotes struct {
	repos   map[string]gitRepo // by key
	pushRef string
	creds   *gitCredentials
	client  *http.Client

	// secrets are the run's, which nothing the route sends back holds
	// (the redactor of the LLM routes)...
	secrets []string

	mu    sync.Mutex
	auths map[string]gitAuth // by upstream host, once found
	// ...nor the passwords the host's credential store gave: redact is
	// made again whenever one is found.
	redact *redactor
}

type gitAuth struct{ user, password string }

func newGitRemotes(cfg RunConfig, creds *gitCredentials) *gitRemotes {
	g := &gitRemotes{repos: map[string]gitRepo{}, pushRef: cfg.PushRef, creds: creds, auths: map[string]gitAuth{}}
	g.secrets = cfg.runSecrets()
	g.redact = newRedactor(g.secrets...)
	for _, raw := range cfg.Repos {
		if r, ok := parseGitRepo(raw); ok {
			g.repos[r.key()] = r
		}
	}
	g.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   30 * time.Second,
			ExpectContinueTimeout: time.Second,
			ResponseHeaderTimeout: gitHeaderTimeout,
			// git's own encodings pass through as they are.
			DisableCompression: true,
		},
		// A redirect would lead git's credential somewhere the run did
		// not name: it is answered, not followed (see serve).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return g
}

// names are the route's URLs of the run's repositories as the sandbox
// reaches the proxy at host, for messages.
func (g *gitRemotes) names(host string) string {
	var out []string
	for _, r := range g.repos {
		out = append(out, "http://"+host+gitPrefix+r.host+r.path)
	}
	if len(out) == 0 {
		return "none: the run has no http(s) repository"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// serve forwards one smart HTTP request of git in the sandbox to the
// run's repository it names, with the host's credential.
func (g *gitRemotes) serve(w http.ResponseWriter, req *http.Request, rec *Record) {
	rest := strings.TrimPrefix(req.URL.Path, gitPrefix)
	var endpoint string
	for _, e := range []string{gitInfoRefs, gitUploadPack, gitReceivePack} {
		if strings.HasSuffix(rest, e) {
			endpoint, rest = e, strings.TrimSuffix(rest, e)
			break
		}
	}
	host, repoPath, _ := strings.Cut(rest, "/")
	repo, ok := g.repos[gitKey(strings.ToLower(host)+"/"+repoPath)]
	switch {
	case endpoint == "":
		gitError(w, http.StatusNotFound, "the git route serves git's smart HTTP protocol only (info/refs, git-upload-pack, git-receive-pack)")
		return
	case !ok:
		gitError(w, http.StatusForbidden, fmt.Sprintf("%s is not a repository of this run; it may reach %s", rest, g.names(req.Host)))
		return
	}
	rec.Upstream = repo.host
	service, err := gitService(req, endpoint)
	if err != nil {
		gitError(w, http.StatusBadRequest, err.Error())
		return
	}
	var body io.Reader = req.Body
	if service == "git-receive-pack" && req.Method == http.MethodPost {
		body, err = g.checkPush(req)
		if refused, ok := errors.AsType[*pushRefused](err); ok {
			rec.Error = err.Error()
			refused.reject(w, req.Body)
			return
		}
		if err != nil {
			rec.Error = err.Error()
			gitError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	auth, err := g.auth(req.Context(), repo)
	if err != nil {
		rec.Error = err.Error()
		gitError(w, http.StatusBadGateway, err.Error())
		return
	}
	up := *repo.upstream
	up.Path += endpoint
	if endpoint == gitInfoRefs {
		up.RawQuery = "service=" + service
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, up.String(), body)
	if err != nil {
		gitError(w, http.StatusBadRequest, err.Error())
		return
	}
	// A push's commands were read and go again first: the same bytes.
	out.ContentLength = req.ContentLength
	for _, k := range []string{"Content-Type", "Accept", "Content-Encoding", "Git-Protocol", "User-Agent"} {
		if v := req.Header.Values(k); len(v) > 0 {
			out.Header[k] = v
		}
	}
	if auth.password != "" {
		out.SetBasicAuth(auth.user, auth.password)
	}
	resp, err := g.client.Do(out)
	if err != nil {
		msg := fmt.Sprintf("cannot reach %s: %s", repo.upstream.Redacted(), cause(err))
		rec.Error = msg
		gitError(w, http.StatusBadGateway, g.scrub(msg))
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		msg := fmt.Sprintf("%s answered %s, to %s; give amelia the repository's own URL", repo.upstream.Redacted(), resp.Status, resp.Header.Get("Location"))
		rec.Error = msg
		gitError(w, http.StatusBadGateway, g.scrub(msg))
		return
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// Never a 401 to the sandbox's git: it would take it as a call
		// for the run token, which it gave.
		msg := fmt.Sprintf("%s refused the host's git credentials (%s): check git.token_env in the profile, or the host's credential store", repo.upstream.Redacted(), resp.Status)
		rec.Error = msg
		gitError(w, http.StatusForbidden, msg)
		return
	}
	for k, vs := range resp.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Type", "Content-Encoding", "Cache-Control", "Expires", "Pragma":
			for _, v := range vs {
				w.Header().Add(k, g.scrub(v))
			}
		}
	}
	w.WriteHeader(resp.StatusCode)
	flushCopy(w, resp.Body)
}

// gitError answers git with status and msg as a line of text/plain, which
// git shows as "remote: MSG".
func gitError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// gitService checks the method and the service of a request for endpoint
// and returns the service.
func gitService(req *http.Request, endpoint string) (string, error) {
	if endpoint == gitInfoRefs {
		if req.Method != http.MethodGet {
			return "", fmt.Errorf("%s takes GET", endpoint)
		}
		q := req.URL.Query()
		s := q.Get("service")
		if len(q) != 1 || len(q["service"]) != 1 || (s != "git-upload-pack" && s != "git-receive-pack") {
			return "", errors.New("info/refs takes ?service=git-upload-pack or ?service=git-receive-pack alone (the smart protocol)")
		}
		return s, nil
	}
	if req.Method != http.MethodPost || req.URL.RawQuery != "" {
		return "", fmt.Errorf("%s takes POST, without a query", endpoint)
	}
	return strings.TrimPrefix(endpoint, "/"), nil
}

// pushCommand is one ref update of a push.
type pushCommand struct{ ref, why string } // why: the refusal, if any

// pushRefused is a push whose ref updates the run may not make: git is
// told so per ref (see reject).
type pushRefused struct {
	commands []pushCommand
	sideband bool // the client asked for side-band(-64k)
}

func (e *pushRefused) Error() string {
	for _, c := range e.commands {
		if c.why != "" {
			return c.why
		}
	}
	return "push refused"
}

// checkPush reads the command list of a push and refuses it unless every
// command creates or updates the run's branch (*pushRefused); it returns
// the body to send on, the command list included.
func (g *gitRemotes) checkPush(req *http.Request) (io.Reader, error) {
	if enc := req.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return nil, fmt.Errorf("a push's request must not be encoded (%s): its ref updates are read before they go on", enc)
	}
	br := bufio.NewReader(req.Body)
	var head bytes.Buffer
	refused := &pushRefused{}
	for {
		pkt, err := readPkt(br, &head)
		if err != nil {
			return nil, fmt.Errorf("read the push's ref updates: %w", err)
		}
		if head.Len() > maxPushCommands {
			return nil, fmt.Errorf("the push's ref updates take more than %d bytes", maxPushCommands)
		}
		if pkt == nil { // flush: the command list is over
			break
		}
		line := strings.TrimSuffix(string(pkt), "\n")
		if strings.HasPrefix(line, "shallow ") {
			continue
		}
		if strings.HasPrefix(line, "push-cert") {
			return nil, errors.New("signed pushes are not supported through the proxy")
		}
		line, caps, _ := strings.Cut(line, "\x00") // the capabilities, on the first
		if caps != "" {
			refused.sideband = slices.ContainsFunc(strings.Fields(caps), func(c string) bool { return c == "side-band" || c == "side-band-64k" })
		}
		old, rest, _ := strings.Cut(line, " ")
		newID, ref, _ := strings.Cut(rest, " ")
		if !objectID(old) || !objectID(newID) || ref == "" || strings.ContainsAny(ref, " \x00") {
			return nil, fmt.Errorf("a ref update that is not one: %.100q", line)
		}
		c := pushCommand{ref: ref}
		switch {
		case g.pushRef == "":
			c.why = "this run pushes nothing: it was not started with --push"
		case ref != g.pushRef:
			c.why = "the run may push " + g.pushRef + " only"
		case strings.Trim(newID, "0") == "":
			c.why = "the run may not delete " + ref
		}
		refused.commands = append(refused.commands, c)
	}
	if len(refused.commands) == 0 {
		return nil, errors.New("a push without a ref update")
	}
	if refused.Error() != "push refused" {
		return nil, refused
	}
	return io.MultiReader(&head, br), nil
}

// reject answers a refused push as receive-pack would (report-status, in
// side-band when asked), so git in the sandbox shows each ref's reason:
// "! [remote rejected] main (the run may push refs/heads/amelia/x only)".
// The pack that follows the commands is read and dropped.
func (e *pushRefused) reject(w http.ResponseWriter, body io.Reader) {
	io.Copy(io.Discard, body)
	var report bytes.Buffer
	writePkt(&report, "unpack ok\n")
	for _, c := range e.commands {
		why := c.why
		if why == "" {
			why = "refused with the rest of the push"
		}
		writePkt(&report, "ng "+c.ref+" "+why+"\n")
	}
	report.WriteString("0000")
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if !e.sideband {
		w.Write(report.Bytes())
		return
	}
	var out bytes.Buffer
	writePkt(&out, "\x01"+report.String())
	out.WriteString("0000")
	w.Write(out.Bytes())
}

// writePkt writes payload as one pkt-line.
func writePkt(b *bytes.Buffer, payload string) {
	fmt.Fprintf(b, "%04x%s", len(payload)+4, payload)
}

// objectID: a SHA-1 or SHA-256 object name in hex.
func objectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// readPkt reads one pkt-line from r, copying its bytes to raw, and returns
// its payload, or nil for a flush packet.
func readPkt(r *bufio.Reader, raw *bytes.Buffer) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	raw.Write(size[:])
	n, err := strconv.ParseUint(string(size[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("bad pkt-line length %q", size[:])
	}
	switch {
	case n == 0:
		return nil, nil
	case n < 4 || n > maxPushCommands:
		return nil, fmt.Errorf("bad pkt-line length %d", n)
	}
	payload := make([]byte, n-4)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, err
	}
	raw.Write(payload)
	return payload, nil
}

// auth is the credential for repo's host: the profile's token, or the
// host's credential store's answer (looked up once per run and host). A
// host the store has nothing for gets no credential: a public repository
// needs none.
func (g *gitRemotes) auth(ctx context.Context, repo gitRepo) (gitAuth, error) {
	g.mu.Lock()
	a, ok := g.auths[repo.host]
	g.mu.Unlock()
	if ok {
		return a, nil
	}
	answer, err := g.creds.fill(ctx, repo.upstream.Scheme, repo.host, strings.TrimPrefix(repo.path, "/"))
	if errors.Is(err, errNoStoredCredential) {
		answer, err = nil, nil
	}
	if err != nil {
		return gitAuth{}, err
	}
	a = gitAuth{user: answer.Get("username"), password: answer.Get("password")}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.auths[repo.host] = a
	if a.password != "" {
		g.secrets = append(g.secrets, a.password)
		g.redact = newRedactor(g.secrets...)
	}
	return a, nil
}

// scrub hides the run's secrets and git credentials in s, for what goes
// back to the sandbox.
func (g *gitRemotes) scrub(s string) string {
	g.mu.Lock()
	r := g.redact
	g.mu.Unlock()
	return r.replace(s)
}

// flushCopy copies body to w, flushing every write, as git's side-band
// progress wants.
func flushCopy(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
