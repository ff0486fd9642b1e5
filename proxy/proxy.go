// Package proxy is the host-side proxy through which a sandbox reaches the
// outside world without holding a secret: the LLM upstream (OpenAI-compatible
// /v1/* and Anthropic /anthropic/v1/*, with the profile's key attached on the
// way out, and chat completions and messages translated from one API to the
// other when the profile's upstream speaks only the other; and Google's
// Gemini API at /gemini/*, untranslated), git credentials for the run's repositories (/git/credentials),
// and, for profiles with network: allowlist, an HTTP forward proxy (CONNECT
// and absolute-form requests) that reaches only the allowed hosts.
//
// The proxy listens on host loopback only. A sandbox reaches it through the
// tunnel the host opens over the provider's exec channel (core/tunnel), so
// the sandbox needs no route to the host. Every request must carry the token
// of a run the proxy knows: Start mints one per run (256 random bits) and the
// token selects the run's profile, so a sandbox cannot choose another
// profile's upstream or key. Run.Close revokes it.
//
// Every authenticated request is written to the run's audit log, one JSON
// line each: never a key, a token or a credential.
package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/gitcredential"
	"github.com/amelia-sandbox/amelia/core/mcpwire"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmwire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Upstream is an LLM API the proxy forwards to.
type Upstream struct {
	// BaseURL is the API's absolute base URL, such as
	// https://api.openai.com/v1; a request for /v1/chat/completions goes to
	// BaseURL + "/chat/completions".
	BaseURL string
	// Key is attached on the way out (Authorization: Bearer for OpenAI-
	// compatible upstreams, x-api-key for Anthropic, x-goog-api-key for
	// Gemini); "" attaches none.
	Key string
}

// GitAuth is where git credentials for the run's repositories come from.
type GitAuth struct {
	// Token, when set, is given as the password for every allowed host;
	// otherwise the host's own credential store answers (git credential
	// fill).
	Token string
	// Username goes with Token; default x-access-token.
	Username string
}

// RunConfig is what one run may reach through the proxy.
type RunConfig struct {
	// ID names the run in the audit log and its file name; see ValidRunID.
	ID      string
	Profile string
	// OpenAI is the upstream of /v1/*; a BaseURL of "" means the run has
	// none, and then Anthropic must be set.
	OpenAI Upstream
	// Anthropic is the upstream of /anthropic/v1/*; nil means none.
	//
	// A run with only one of the two translates between the APIs: a
	// messages request on /anthropic/v1/messages goes to the OpenAI
	// upstream's /chat/completions, a chat completions request on
	// /v1/chat/completions to the Anthropic upstream's /messages, and the
	// response comes back in the API the client spoke. Other paths of the
	// missing API answer 404, but for its models list (see Model).
	Anthropic *Upstream
	// Gemini is the upstream of /gemini/* (Google's Gemini API: a
	// request for /gemini/v1beta/X goes to BaseURL + "/v1beta/X"); nil
	// means none, and the route answers 404. Nothing is translated to or
	// from it.
	Gemini *Upstream
	// Model is the run's model. A translated request asks the upstream
	// for it instead of the model the client named (an Anthropic client
	// such as Claude Code asks for a Claude model, which an OpenAI upstream
	// does not know); "" keeps the client's. The models list of the
	// missing API lists it alone (none when "").
	Model string
	// Timeout bounds the wait for an upstream's response headers (504
	// after it); default config.DefaultLLMTimeout.
	Timeout time.Duration
	// MaxRequestBytes bounds request bodies (413 above it); default
	// config.DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Network is the profile's policy: with NetworkNone the egress proxy
	// allows nothing; otherwise it allows AllowedHosts.
	Network      sdk.NetworkMode
	AllowedHosts []string
	// Repos are the run's repository URLs: git in the sandbox reaches
	// those on http(s) through the git route (GitPath), with Git's
	// credential added on the way out.
	Repos []string
	Git   GitAuth
	// PushRef is the one ref a push through the git route may create or
	// update ("refs/heads/amelia/<id>"); "" refuses every push.
	PushRef string
	// AuditDir holds the run's audit log, AuditDir/ID.jsonl (created 0700).
	AuditDir string
	// Token, when set, is the run's token instead of a new one: a host
	// that attaches to a detached run serves the token its worker holds.
	// It must be one Start minted.
	Token string
	// MCP are the MCP servers the sandbox may reach (/mcp/NAME, see
	// mcp.go); no others are reachable.
	MCP []MCPServer
}

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Environ is the environment of `git credential fill` (os.Environ());
	// the proxy adds GIT_TERMINAL_PROMPT=0 and disables askpass programs.
	// MCP servers' commands get it too, with their Env.
	Environ []string
	// EgressDial replaces the egress proxy's dialer. The default refuses
	// names that resolve to loopback, link-local, unspecified or multicast
	// addresses (listed IP literals are dialled as they are). For tests.
	EgressDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is the proxy. It serves any number of runs at once, each with its
// own token, profile and audit log.
type Server struct {
	opts Options
	log  *slog.Logger

	mu   sync.RWMutex
	runs map[[sha256.Size]byte]*Run // by sha256 of the token

	srvMu    sync.Mutex
	srv      *http.Server
	served   chan struct{} // closed when srv.Serve has returned
	serveErr error         // why it returned, if not Close; read after served
}

// New returns a proxy with no runs.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, runs: map[[sha256.Size]byte]*Run{}}
}

// Run is a run the proxy serves, from Start until Close.
type Run struct {
	cfg      RunConfig
	token    string
	openai   *upstream
	anthro   *upstream
	gemini   *upstream
	gitRoute *gitRemotes
	egress   *egress
	mcp      *mcpServers
	redact   *redactor // the run's keys and token, kept out of LLM responses
	audit    *auditLog
	ctx      context.Context // cancelled by Close: ends the run's requests
	cancel   context.CancelFunc
	srv      *Server
	closeErr error
	once     sync.Once

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // requests being served, so Close can wait for their audit records
}

// Start registers a run and returns it with a freshly minted token. The
// run's audit log is opened (and created) here, so a bad AuditDir fails
// before anything else starts.
func (s *Server) Start(cfg RunConfig) (*Run, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Run{cfg: cfg, srv: s}
	var err error
	if cfg.OpenAI.BaseURL != "" {
		if r.openai, err = newUpstream(routeOpenAI, cfg.OpenAI, cfg, s.log); err != nil {
			return nil, fmt.Errorf("run %s: llm upstream: %w", cfg.ID, err)
		}
	}
	if cfg.Anthropic != nil {
		if r.anthro, err = newUpstream(routeAnthropic, *cfg.Anthropic, cfg, s.log); err != nil {
			return nil, fmt.Errorf("run %s: anthropic upstream: %w", cfg.ID, err)
		}
	}
	if cfg.Gemini != nil {
		if r.gemini, err = newUpstream(routeGemini, *cfg.Gemini, cfg, s.log); err != nil {
			return nil, fmt.Errorf("run %s: gemini upstream: %w", cfg.ID, err)
		}
	}
	r.gitRoute = newGitRemotes(cfg, newGitCredentials(cfg, s.opts.Environ))
	r.egress = newEgress(cfg, s.opts.EgressDial, s.log)
	if r.mcp, err = newMCPServers(cfg.MCP); err != nil {
		return nil, fmt.Errorf("run %s: %w", cfg.ID, err)
	}
	r.redact = newRedactor(cfg.runSecrets()...)
	if r.audit, err = openAuditLog(cfg.AuditDir, cfg.ID, cfg.Profile); err != nil {
		return nil, fmt.Errorf("run %s: %w", cfg.ID, err)
	}
	r.token = cfg.Token
	if r.token == "" {
		r.token, err = mintToken()
	}
	if err != nil {
		r.audit.Close()
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.runs[sha256.Sum256([]byte(r.token))] = r
	s.mu.Unlock()
	s.log.Debug("proxy run started", "run", cfg.ID, "profile", cfg.Profile, "audit", r.audit.path)
	return r, nil
}

func (c *RunConfig) check() error {
	if !ValidRunID(c.ID) {
		return fmt.Errorf("run id %q: use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63 characters, no \"..\"", c.ID)
	}
	if c.Token != "" && !validToken(c.Token) {
		return fmt.Errorf("run %s: the given token is not one amelia minted", c.ID)
	}
	if c.AuditDir == "" {
		return fmt.Errorf("run %s: no audit directory", c.ID)
	}
	if c.OpenAI.BaseURL == "" && c.Anthropic == nil {
		return fmt.Errorf("run %s: no LLM upstream: set OpenAI.BaseURL or Anthropic", c.ID)
	}
	if c.Timeout <= 0 {
		c.Timeout = config.DefaultLLMTimeout
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = config.DefaultMaxRequestBytes
	}
	if c.Git.Username == "" {
		c.Git.Username = config.DefaultGitUsername
	}
	return nil
}

// runSecrets are the run's upstream keys and git token.
func (c *RunConfig) runSecrets() []string {
	s := []string{c.OpenAI.Key, c.Git.Token}
	if c.Anthropic != nil {
		s = append(s, c.Anthropic.Key)
	}
	if c.Gemini != nil {
		s = append(s, c.Gemini.Key)
	}
	return s
}

// ValidRunID reports whether id can name a run (and its audit file):
// ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ without "..".
func ValidRunID(id string) bool {
	if id == "" || len(id) > 63 || strings.Contains(id, "..") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// mintToken returns 256 random bits, URL-safe, with a recognisable prefix
// so secret scanners and people can tell what it is.
func mintToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("mint run token: %w", err)
	}
	return "amr_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// validToken: what mintToken makes, 32 bytes in base64url after "amr_".
func validToken(t string) bool {
	raw, ok := strings.CutPrefix(t, "amr_")
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	return err == nil && len(b) == 32
}

// Token is the run's bearer token, for AMELIA_PROXY_TOKEN in the sandbox.
func (r *Run) Token() string { return r.token }

// ID is the run's id.
func (r *Run) ID() string { return r.cfg.ID }

// AuditPath is the run's audit log file.
func (r *Run) AuditPath() string { return r.audit.path }

// Close revokes the run's token, ends its requests still in flight (streams
// and CONNECT tunnels included), waits for them to write their audit
// records and closes the audit log. It is idempotent.
func (r *Run) Close() error {
	r.once.Do(func() {
		r.srv.mu.Lock()
		delete(r.srv.runs, sha256.Sum256([]byte(r.token)))
		r.srv.mu.Unlock()
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel()
		r.inflight.Wait()
		r.egress.close()
		r.closeErr = r.audit.Close()
		r.srv.log.Debug("proxy run ended", "run", r.cfg.ID)
	})
	return r.closeErr
}

// acquire returns the live run whose token is token, comparing in constant
// time, with one more request counted in flight: the caller calls
// r.release when done. The map is keyed by the token's hash, so the
// lookup's timing says nothing about how close a guess was.
func (s *Server) acquire(token string) *Run {
	if token == "" {
		return nil
	}
	s.mu.RLock()
	r := s.runs[sha256.Sum256([]byte(token))]
	s.mu.RUnlock()
	if r == nil || subtle.ConstantTimeCompare([]byte(r.token), []byte(token)) != 1 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.inflight.Add(1)
	return r
}

func (r *Run) release() { r.inflight.Done() }

// Routes, as named in the audit log.
const (
	routeOpenAI     = "openai"
	routeAnthropic  = "anthropic"
	routeGit        = "git-credentials"
	routeGitRemote  = "git"
	routeConnect    = "egress-connect"
	routeEgressHTTP = "egress-http"
	routeUnknown    = "unknown"
)

// Path prefixes of the LLM routes.
const (
	openAIPrefix    = "/v1/"
	anthropicPrefix = "/anthropic/v1/"
	// pythonPrefix is where the Python Amelia's proxy serves its routes
	// (its LLM_PROXY_URL ends in /proxy/v1): /proxy/v1/X is /v1/X.
	pythonPrefix = "/proxy"
)

// ServeHTTP routes a request: CONNECT and absolute-form requests are egress
// (authenticated by Proxy-Authorization), everything else is an API route
// (authenticated by X-Amelia-Proxy-Token, else Authorization: Bearer, or
// x-api-key on the Anthropic route, x-goog-api-key on the Gemini route,
// or the password of basic
// authentication on the git route, which is how git sends it). Only
// canonical paths are routed (see canonical), and nothing before the token
// is checked.
//
// The Python Amelia's paths work too: /proxy/v1/X is /v1/X, and
// /proxy/v1/git/credentials (and /v1/git/credentials, where a worker's
// LLM_PROXY_URL ends in /v1) is /git/credentials.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodConnect || req.URL.IsAbs() {
		s.serveEgress(w, req)
		return
	}
	if err := canonical(requestPath(req)); err != nil {
		s.log.Warn("proxy: refused a request for a path that is not canonical", "err", err, "remote", req.RemoteAddr)
		writeError(w, routeUnknown, http.StatusBadRequest, "invalid_path", err.Error())
		return
	}
	path := req.URL.Path
	if rest, ok := strings.CutPrefix(path, pythonPrefix); ok && strings.HasPrefix(rest, openAIPrefix) {
		path = rest
	}
	route := routeUnknown
	switch {
	case path == gitcredential.ProxyRoute || path == openAIPrefix+gitcredential.ProxyRoute[1:]:
		route = routeGit
	case strings.HasPrefix(path, gitPrefix):
		route = routeGitRemote
	case strings.HasPrefix(path, openAIPrefix):
		route = routeOpenAI
	case strings.HasPrefix(path, geminiPrefix):
		route = routeGemini
	case strings.HasPrefix(path, anthropicPrefix):
		route = routeAnthropic
	case strings.HasPrefix(path, mcpwire.Prefix):
		route = routeMCP
	}
	refuse := func(w http.ResponseWriter) {
		if route == routeGitRemote {
			// git asks its credential helper for the run token on this.
			w.Header().Set("WWW-Authenticate", `Basic realm="amelia proxy"`)
		}
		writeError(w, route, http.StatusUnauthorized, "unauthorized",
			"missing or invalid run token: send Authorization: Bearer $AMELIA_PROXY_TOKEN or X-Amelia-Proxy-Token (tokens end with their run)")
	}
	s.withRun(w, req, route, apiToken(req, route), refuse, func(run *Run, w http.ResponseWriter, req *http.Request, rec *Record) {
		if path != req.URL.Path {
			// The audit record keeps the path asked for.
			req.URL.Path, req.URL.RawPath = path, ""
		}
		switch route {
		case routeOpenAI, routeAnthropic, routeGemini:
			run.serveLLM(w, req, route, rec)
		case routeGit:
			run.serveHelper(w, req, rec)
		case routeGitRemote:
			run.gitRoute.serve(w, req, rec)
		case routeMCP:
			run.serveMCP(w, req, rec)
		default:
			writeError(w, route, http.StatusNotFound, "not_found",
				fmt.Sprintf("no route %s: the proxy serves %s*, %s*, %s*, %sNAME, %s* and %s", path, openAIPrefix, anthropicPrefix, geminiPrefix, mcpwire.Prefix, gitPrefix, gitcredential.ProxyRoute))
		}
	})
}

// requestPath is the path of req as the client sent it, still encoded.
func requestPath(req *http.Request) string {
	p, _, _ := strings.Cut(req.RequestURI, "?")
	if p == "" {
		p = req.URL.EscapedPath() // a request made in process
	}
	return p
}

// canonical refuses a path that is not plain: anything percent-encoded, a
// ';' or a backslash, a control character or space, an empty, "." or ".."
// segment. Such a path may mean one thing here and another to an upstream
// that decodes, normalises or splits it otherwise (%2F, "..;/", "%5c"), so
// the proxy forwards only paths that mean the same everywhere.
func canonical(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %.100q: want an absolute path", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '%' || c == ';' || c == '\\' || c <= ' ' || c >= 0x7f {
			return fmt.Errorf("path %.100q: %q is not allowed in a path the proxy forwards (it forwards plain paths only: no percent-encoding, ';', '\\\\', space or control character)", p, c)
		}
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "", ".", "..":
			return fmt.Errorf("path %.100q: an empty, \".\" or \"..\" segment is not allowed in a path the proxy forwards", p)
		}
	}
	return nil
}

// serveLLM forwards a request on an LLM route, with the run's secrets
// replaced in everything the response carries back (see redactor). A run
// without the route's upstream translates chat completions and messages
// to the API of the upstream it has.
func (r *Run) serveLLM(w http.ResponseWriter, req *http.Request, route string, rec *Record) {
	w, finish := r.redact.wrap(w)
	defer finish()
	if route == routeGemini {
		r.serveGemini(w, req, rec)
		return
	}
	up, other := r.openai, r.anthro
	if route == routeAnthropic {
		up, other = r.anthro, r.openai
	}
	if up != nil {
		up.serve(w, req, rec, nil)
		return
	}
	from := llmwire.OpenAI
	if route == routeAnthropic {
		from = llmwire.Anthropic
	}
	rest := strings.TrimPrefix(req.URL.Path, strings.TrimSuffix(routePrefix[route], "/"))
	switch {
	case rest == "/models" && req.Method == http.MethodGet:
		r.serveModels(w, from)
	case rest == translatedPath[from] && req.Method == http.MethodPost:
		rec.Translated = string(from) + "->" + string(from.Other())
		other.serve(w, req, rec, &translation{from: from, route: route, model: r.cfg.Model})
	default:
		missing := map[llmwire.API]string{llmwire.OpenAI: "OpenAI", llmwire.Anthropic: "Anthropic"}
		writeError(w, route, http.StatusNotFound, "not_found",
			fmt.Sprintf("profile %s's LLM upstream speaks %s's API, not %s's: the proxy translates only %s (and lists the run's model at %smodels); for %s, give the profile an upstream of that API (llm.api, llm.anthropic)",
				r.cfg.Profile, missing[from.Other()], missing[from], routePrefix[route]+translatedPath[from][1:], routePrefix[route], req.URL.Path))
	}
}

// routePrefix is the path prefix of each LLM route.
var routePrefix = map[string]string{routeOpenAI: openAIPrefix, routeAnthropic: anthropicPrefix}

// translatedPath is the path, under its route, of the one endpoint of each
// API that is translated.
var translatedPath = map[llmwire.API]string{llmwire.OpenAI: "/chat/completions", llmwire.Anthropic: "/messages"}

// serveModels answers the models list of API from with the run's model
// alone, in that API's shape: the upstream speaks the other API.
func (r *Run) serveModels(w http.ResponseWriter, from llmwire.API) {
	var body any
	if from == llmwire.OpenAI {
		list := llmwire.ChatModelList{Object: "list", Data: []llmwire.ChatModel{}}
		if m := r.cfg.Model; m != "" {
			list.Data = append(list.Data, llmwire.ChatModel{ID: m, Object: "model", OwnedBy: "amelia"})
		}
		body = list
	} else {
		list := llmwire.MessagesModelList{Data: []llmwire.MessagesModel{}}
		if m := r.cfg.Model; m != "" {
			list.Data = append(list.Data, llmwire.MessagesModel{Type: "model", ID: m, DisplayName: m, CreatedAt: "1970-01-01T00:00:00Z"})
			list.FirstID, list.LastID = &m, &m
		}
		body = list
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// withRun serves req on route for the run whose token it carries: written
// to the run's audit log, and ended when the run ends. Without a valid
// token, refuse answers, and no run sees the request.
func (s *Server) withRun(w http.ResponseWriter, req *http.Request, route, token string, refuse func(http.ResponseWriter), serve func(*Run, http.ResponseWriter, *http.Request, *Record)) {
	run := s.acquire(token)
	if run == nil {
		s.log.Warn("proxy: refused a request without a valid run token", "route", route, "method", req.Method, "remote", req.RemoteAddr)
		refuse(w)
		return
	}
	defer run.release()
	rec := run.audit.begin(req, route)
	w = rec.wrap(w)
	defer run.audit.end(rec)
	ctx, cancel := run.requestContext(req.Context())
	defer cancel()
	serve(run, w, req.WithContext(ctx), rec)
}

// requestContext ends when the request's context or the run ends.
func (r *Run) requestContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(r.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// apiToken is the run token of an API request: its X-Amelia-Proxy-Token
// (the Python worker's, which sends "proxy-managed" or a key of its own as
// its bearer token), else its bearer token; on the Anthropic route an
// x-api-key header carries it too (Anthropic's clients send their key
// there), and on the Gemini route an x-goog-api-key header (Google's
// clients send theirs there).
func apiToken(req *http.Request, route string) string {
	// The Python Amelia's identity header carries the token as
	// Authorization does; its profile header is taken and ignored (the
	// token names the run, and so its profile). Neither goes upstream (no
	// X-Amelia-* header does) nor into a log.
	if t := strings.TrimSpace(req.Header.Get(protocol.HeaderProxyToken)); t != "" {
		return t
	}
	if t, ok := bearer(req.Header.Get("Authorization")); ok {
		return t
	}
	switch route {
	case routeAnthropic:
		return req.Header.Get("X-Api-Key")
	case routeGemini:
		return req.Header.Get("X-Goog-Api-Key")
	case routeGitRemote:
		if _, password, ok := req.BasicAuth(); ok {
			return password
		}
	}
	return ""
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Listen listens on addr, which must be a loopback address ("" means
// 127.0.0.1:0, any free port): the proxy is never offered to a network, a
// Docker bridge included.
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("proxy address %q: want 127.0.0.1:PORT", addr)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("proxy address %q: the proxy listens on loopback only (127.0.0.1 or [::1])", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start proxy: %w", err)
	}
	return ln, nil
}

// ListenAndServe listens on addr (loopback only, see Listen; "" is any free
// port on 127.0.0.1) and serves the proxy there in the background until
// Close. It returns the address it listens on.
func (s *Server) ListenAndServe(addr string) (string, error) {
	ln, err := Listen(addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan struct{})
	s.srvMu.Lock()
	if s.srv != nil {
		s.srvMu.Unlock()
		ln.Close()
		return "", errors.New("proxy: already serving")
	}
	s.srv, s.served = srv, served
	s.srvMu.Unlock()
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = fmt.Errorf("proxy: %w", err)
		}
	}()
	return ln.Addr().String(), nil
}

// Close ends every run, stops serving and waits until serving has
// stopped; it returns what went wrong serving, if anything.
func (s *Server) Close() error {
	s.mu.Lock()
	runs := make([]*Run, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	var errs []error
	for _, r := range runs {
		errs = append(errs, r.Close())
	}
	s.srvMu.Lock()
	srv, served := s.srv, s.served
	s.srvMu.Unlock()
	if srv != nil {
		errs = append(errs, srv.Close())
		<-served
		errs = append(errs, s.serveErr)
	}
	return errors.Join(errs...)
}
