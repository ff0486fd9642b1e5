package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/mcpwire"
)

// The MCP route: /mcp/NAME bridges the sandbox to the run's MCP server
// NAME, which the host runs (a command, started for each session with the
// host's environment and the server's Env, and ended with the session,
// its process group too) or reaches (a streamable HTTP URL, with the
// server's Headers). The sandbox's end is `amelia-worker mcp NAME`, a
// stdio MCP server to the agent; the wire is package mcpwire's: an
// upgraded HTTP/1.1 request, then JSON-RPC messages in lines both ways.
// The host's end is the MCP Go SDK's client transport, so the server sees
// a client as its SDK expects. Only the servers of the run's config are
// reachable; every tools/call is a record in the audit log (server, tool,
// outcome, duration; never its arguments).

// MCPServer is an MCP server a run's sandbox may reach, at /mcp/Name.
// Exactly one of Command and URL is set.
type MCPServer struct {
	// Name is the server's name in the profile (config.ValidMCPName).
	Name string
	// Command is the program (looked up on the host's PATH) and its
	// arguments, started for each session and ended with it.
	Command []string
	// Env is added to Options.Environ for Command.
	Env map[string]string
	// URL is a streamable HTTP server's absolute http(s) URL.
	URL string
	// Headers are set on every request to URL.
	Headers map[string]string
}

// Routes of the audit log: a session, and each tools/call in it.
const (
	routeMCP     = "mcp"
	routeMCPCall = "mcp-call"
)

// mcpTerminate is how long a command server has, once its input is
// closed at the end of a session, to end by itself before it is
// signalled (mcp.CommandTransport.TerminateDuration).
const mcpTerminate = 5 * time.Second

// maxMCPToolName bounds a tool name as the audit log keeps it.
const maxMCPToolName = 200

// mcpServers are a run's MCP servers, by name.
type mcpServers struct {
	byName  map[string]MCPServer
	names   []string // sorted
	secrets []string // the servers' credentials, kept out of what the sandbox gets
}

func newMCPServers(list []MCPServer) (*mcpServers, error) {
	m := &mcpServers{byName: make(map[string]MCPServer, len(list))}
	for _, s := range list {
		if !config.ValidMCPName(s.Name) {
			return nil, fmt.Errorf("MCP server name %q: use letters, digits, '-' and '_', at most 64 characters", s.Name)
		}
		if _, dup := m.byName[s.Name]; dup {
			return nil, fmt.Errorf("MCP server %s is listed twice", s.Name)
		}
		switch {
		case len(s.Command) > 0 && s.URL != "":
			return nil, fmt.Errorf("MCP server %s has both a command and a URL; give one", s.Name)
		case len(s.Command) > 0:
			if s.Command[0] == "" {
				return nil, fmt.Errorf("MCP server %s: its command names no program", s.Name)
			}
		case s.URL != "":
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("MCP server %s: its URL is not an absolute http(s) URL", s.Name)
			}
		default:
			return nil, fmt.Errorf("MCP server %s has neither a command nor a URL", s.Name)
		}
		m.byName[s.Name] = s
		m.names = append(m.names, s.Name)
		for k, v := range s.Env {
			if secretName(k) {
				m.secrets = append(m.secrets, secretForms(v)...)
			}
		}
		for _, v := range s.Headers {
			m.secrets = append(m.secrets, secretForms(v)...)
			if _, cred, ok := strings.Cut(v, " "); ok { // "Bearer TOKEN"
				m.secrets = append(m.secrets, secretForms(strings.TrimSpace(cred))...)
			}
		}
	}
	slices.Sort(m.names)
	return m, nil
}

// secretName reports whether an environment variable's name says it holds
// a credential: other values (a host name, a log level) are not kept out
// of the servers' answers, where they would mangle ordinary text.
func secretName(k string) bool {
	k = strings.ToUpper(k)
	for _, w := range []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PAT"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// secretForms are s and s as a JSON string holds it (without quotes),
// which is how it would appear in a message.
func secretForms(s string) []string {
	b, _ := json.Marshal(s)
	if q := string(b[1 : len(b)-1]); q != s {
		return []string{s, q}
	}
	return []string{s}
}

// unknown is the message for a name the run has no server of.
func (m *mcpServers) unknown(name, profile string) string {
	if len(m.names) == 0 {
		return fmt.Sprintf("no MCP server %q: profile %s has no MCP servers (add them under mcp: in the profile)", name, profile)
	}
	return fmt.Sprintf("no MCP server %q in profile %s (its MCP servers: %s)", name, profile, strings.Join(m.names, ", "))
}

// upstream names a server in the audit log: its program, or its URL
// without credentials or query.
func (s MCPServer) upstream() string {
	if len(s.Command) > 0 {
		return "command " + s.Command[0]
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// serveMCP serves a session request on /mcp/NAME.
func (r *Run) serveMCP(w http.ResponseWriter, req *http.Request, rec *Record) {
	name := strings.TrimPrefix(req.URL.Path, mcpwire.Prefix)
	srv, ok := r.mcp.byName[name]
	if !ok {
		writeError(w, routeMCP, http.StatusNotFound, "not_found", r.mcp.unknown(name, r.cfg.Profile))
		return
	}
	rec.MCPServer, rec.Upstream = name, srv.upstream()
	if req.Method != http.MethodGet || !headerHas(req.Header, "Connection", "upgrade") || !strings.EqualFold(req.Header.Get("Upgrade"), mcpwire.Upgrade) {
		w.Header().Set("Upgrade", mcpwire.Upgrade)
		writeError(w, routeMCP, http.StatusUpgradeRequired, "upgrade_required",
			fmt.Sprintf("%s%s is an MCP session: GET with Connection: Upgrade and Upgrade: %s (amelia-worker mcp %s opens one)", mcpwire.Prefix, name, mcpwire.Upgrade, name))
		return
	}
	s := &mcpSession{
		run: r, srv: srv, rec: rec, log: r.srv.log.With("run", r.cfg.ID, "mcp_server", name),
		pending: map[jsonrpc.ID]*mcpCall{},
		redact:  newRedactor(append(r.cfg.runSecrets(), r.mcp.secrets...)...),
	}
	host, err := s.connect(req.Context(), r.srv.opts.Environ)
	if err != nil {
		msg := s.clean(err.Error())
		rec.Error = msg
		writeError(w, routeMCP, http.StatusBadGateway, "mcp_server_failed", fmt.Sprintf("MCP server %s: %s", name, msg))
		return
	}
	s.host = host
	defer s.closeHost()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rec.Error = "hijack: " + err.Error()
		writeError(w, routeMCP, http.StatusInternalServerError, "internal", "cannot take over the connection")
		return
	}
	defer client.Close()
	// The deadlines the server set for reading the request must not end
	// the session.
	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+mcpwire.Upgrade+"\r\n\r\n"); err != nil {
		return
	}
	rec.Status = http.StatusSwitchingProtocols
	s.client = client
	s.serve(req.Context(), io.MultiReader(io.LimitReader(brw.Reader, int64(brw.Reader.Buffered())), client))
}

// headerHas reports whether the comma-separated header key holds token.
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// mcpSession is one bridged session: the sandbox's stream on one side,
// the host's connection to the server on the other.
type mcpSession struct {
	run    *Run
	srv    MCPServer
	rec    *Record // the session's
	log    *slog.Logger
	redact *redactor // the run's and the servers' secrets
	host   *hostServer
	client net.Conn

	wmu sync.Mutex // one line at a time to the sandbox

	mu      sync.Mutex
	pending map[jsonrpc.ID]*mcpCall // the sandbox's calls the server has not answered
	sent    int64                   // bytes from the sandbox
	got     int64                   // bytes to the sandbox
}

// mcpCall is a call of the sandbox's, waiting for its answer.
type mcpCall struct {
	method string
	tool   string // tools/call's
	start  time.Time
	bytes  int64
}

// serve shuttles messages until the sandbox ends its side, the server
// ends, or ctx does (the run's end). The calls left unanswered are
// answered with an error saying why, while the sandbox may still read.
func (s *mcpSession) serve(ctx context.Context, in io.Reader) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.client.Close() })
	defer stop()
	hostDone, sandboxDone := make(chan error, 1), make(chan error, 1)
	go func() { hostDone <- s.fromHost(ctx) }()
	go func() { sandboxDone <- s.fromSandbox(ctx, in) }()
	why := "the session ended"
	select {
	case err := <-hostDone:
		if errors.Is(err, errSandboxGone) {
			s.closeHost()
			break
		}
		// The server ended (or failed) first: its calls are answered
		// before the stream closes, which ends fromSandbox.
		why = "the MCP server ended"
		if !errors.Is(err, io.EOF) && s.run.ctx.Err() == nil {
			why = "the MCP server failed: " + s.clean(err.Error())
			s.rec.Error = why
		}
		s.endPending(why)
		s.client.Close()
		<-sandboxDone
	case err := <-sandboxDone:
		// The sandbox ended the session (or its stream broke, or the
		// run ended): so does the server, and what fromHost says then
		// is of our doing.
		s.closeHost()
		cancel()
		<-hostDone
		if !errors.Is(err, io.EOF) && s.run.ctx.Err() == nil {
			s.rec.Error = "the sandbox's stream: " + s.clean(err.Error())
		}
	}
	if s.run.ctx.Err() != nil {
		why = "the run ended"
	}
	s.endPending(why)
	s.mu.Lock()
	s.rec.RequestBytes, s.rec.ResponseBytes = s.sent, s.got
	s.mu.Unlock()
}

// errSandboxGone: the sandbox's stream cannot be written to.
var errSandboxGone = errors.New("the sandbox's stream is closed")

// fromSandbox forwards the sandbox's lines to the server until the
// sandbox ends its side or the stream breaks.
func (s *mcpSession) fromSandbox(ctx context.Context, in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), int(min(s.run.cfg.MaxRequestBytes, 1<<30)))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		s.mu.Lock()
		s.sent += int64(len(sc.Bytes())) + 1
		s.mu.Unlock()
		if len(line) == 0 {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			s.toSandboxRaw(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`,
				jsonrpc.CodeParseError, "amelia proxy: not a JSON-RPC message: "+err.Error()))
			continue
		}
		req, isReq := msg.(*jsonrpc.Request)
		if isReq && req.IsCall() {
			s.track(req, int64(len(line)))
		}
		if err := s.host.conn.Write(ctx, msg); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Debug("mcp: a message to the server failed", "err", s.clean(err.Error()))
			if isReq && req.IsCall() {
				s.fail(req.ID, "sending it failed: "+s.clean(err.Error()))
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			s.toSandboxRaw(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":"amelia proxy: a message over %d bytes (proxy.max_request_bytes); the session ends"}}`,
				jsonrpc.CodeInvalidRequest, s.run.cfg.MaxRequestBytes))
		}
		return err
	}
	return io.EOF
}

// track notes a call of the sandbox's, to audit and answer it.
func (s *mcpSession) track(req *jsonrpc.Request, n int64) {
	c := &mcpCall{method: req.Method, start: time.Now(), bytes: n}
	if req.Method == "tools/call" {
		var p struct {
			Name string `json:"name"`
		}
		json.Unmarshal(req.Params, &p)
		c.tool = p.Name
		if len(c.tool) > maxMCPToolName {
			c.tool = c.tool[:maxMCPToolName] + "..."
		}
	}
	s.mu.Lock()
	s.pending[req.ID] = c
	s.mu.Unlock()
}

// fromHost forwards the server's messages to the sandbox until the
// server ends or fails, or ctx ends.
func (s *mcpSession) fromHost(ctx context.Context) error {
	for {
		msg, err := s.host.conn.Read(ctx)
		if err != nil {
			return err
		}
		line, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			s.log.Debug("mcp: a message of the server's cannot be encoded", "err", err)
			continue
		}
		if resp, ok := msg.(*jsonrpc.Response); ok {
			s.answered(resp, int64(len(line)))
		}
		if err := s.toSandboxRaw(line); err != nil {
			return fmt.Errorf("%w: %w", errSandboxGone, err)
		}
	}
}

// answered ends the call resp answers: a tools/call's record goes to the
// audit log.
func (s *mcpSession) answered(resp *jsonrpc.Response, n int64) {
	s.mu.Lock()
	c := s.pending[resp.ID]
	delete(s.pending, resp.ID)
	s.mu.Unlock()
	if c == nil {
		return
	}
	if c.method == "initialize" && s.host.version != nil {
		s.host.version.learn(resp)
	}
	if c.method != "tools/call" {
		return
	}
	rec := s.callRecord(c)
	rec.ResponseBytes = n
	if resp.Error != nil {
		rec.Status = http.StatusOK
		var we *jsonrpc.Error
		if errors.As(resp.Error, &we) {
			rec.Error = fmt.Sprintf("JSON-RPC error %d: %s", we.Code, s.clean(we.Message))
		} else {
			rec.Error = "JSON-RPC error: " + s.clean(resp.Error.Error())
		}
	} else {
		var res struct {
			IsError bool `json:"isError"`
		}
		json.Unmarshal(resp.Result, &res)
		rec.Status, rec.IsError = http.StatusOK, &res.IsError
	}
	s.run.audit.write(rec)
}

// endPending fails the calls still waiting, saying why (the sandbox may
// still be there to read it).
func (s *mcpSession) endPending(why string) {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.pending))
	s.mu.Unlock()
	for _, id := range ids {
		s.fail(id, "no answer: "+why)
	}
}

func (s *mcpSession) callRecord(c *mcpCall) *Record {
	return &Record{
		Time: c.start.UTC(), Run: s.run.cfg.ID, Profile: s.run.cfg.Profile,
		Route: routeMCPCall, Method: c.method, Path: mcpwire.Prefix + s.srv.Name, Upstream: s.rec.Upstream,
		MCPServer: s.srv.Name, Tool: c.tool, RequestBytes: c.bytes, start: c.start,
	}
}

// fail answers the sandbox's call id with an error saying why the
// server will not, unless the server answered it meanwhile; a tools/call
// goes to the audit log so.
func (s *mcpSession) fail(id jsonrpc.ID, why string) {
	s.mu.Lock()
	c := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if c == nil {
		return
	}
	line, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
		Code: jsonrpc.CodeInternalError, Message: "amelia proxy: MCP server " + s.srv.Name + ": " + why}})
	if err == nil {
		s.toSandboxRaw(line)
	}
	if c.method == "tools/call" {
		rec := s.callRecord(c)
		rec.Status, rec.Error = http.StatusBadGateway, why
		s.run.audit.write(rec)
	}
}

// toSandboxRaw writes one line to the sandbox, its secrets redacted.
func (s *mcpSession) toSandboxRaw(line []byte) error {
	if s.redact != nil {
		line = []byte(s.redact.replace(string(line)))
	}
	line = append(line, '\n')
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n, err := s.client.Write(line)
	s.mu.Lock()
	s.got += int64(n)
	s.mu.Unlock()
	return err
}

// clean is text for the audit log or the sandbox: the run's and the
// servers' secrets redacted, on one line, bounded.
func (s *mcpSession) clean(msg string) string {
	msg = strings.Join(strings.Fields(s.redact.replace(msg)), " ")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// hostServer is the host's end of a session: the SDK's connection to the
// server, and for a command its process.
type hostServer struct {
	conn    mcp.Connection
	cmd     *exec.Cmd       // a command server's; nil for a URL
	stderr  *tailBuffer     // a command server's
	done    chan struct{}   // closed when its stderr is all read
	version *mcpVersion     // a URL server's
	tr      *http.Transport // a URL server's
	once    sync.Once
}

// connect starts the session's server (a command) or prepares its
// connection (a URL).
func (s *mcpSession) connect(ctx context.Context, environ []string) (*hostServer, error) {
	if len(s.srv.Command) == 0 {
		return s.connectURL(ctx)
	}
	cmd := exec.Command(s.srv.Command[0], s.srv.Command[1:]...)
	env := slices.Clone(environ)
	for _, k := range slices.Sorted(maps.Keys(s.srv.Env)) {
		env = append(env, k+"="+s.srv.Env[k])
	}
	cmd.Env = env
	// A group of its own, so that the session's end ends whatever it
	// started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// stderr through a pipe of our own (an *os.File, so Wait does not
	// wait for what the server's children hold open).
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.srv.Command[0], err)
	}
	cmd.Stderr = pw
	h := &hostServer{cmd: cmd, stderr: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	conn, err := (&mcp.CommandTransport{Command: cmd, TerminateDuration: mcpTerminate}).Connect(ctx)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start %s: %w", s.srv.Command[0], err)
	}
	go func() {
		defer close(h.done)
		defer pr.Close()
		io.Copy(h.stderr, pr)
	}()
	h.conn = conn
	s.log.Debug("mcp: server started", "pid", cmd.Process.Pid, "program", s.srv.Command[0])
	return h, nil
}

func (s *mcpSession) connectURL(ctx context.Context) (*hostServer, error) {
	h := &hostServer{version: &mcpVersion{}}
	h.tr = &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	client := &http.Client{Transport: &mcpHeaders{base: h.tr, headers: s.srv.Headers, version: h.version}}
	t := &mcp.StreamableClientTransport{Endpoint: s.srv.URL, HTTPClient: client, MaxRetries: -1}
	conn, err := t.Connect(ctx)
	if err != nil {
		h.tr.CloseIdleConnections()
		return nil, fmt.Errorf("connect to %s: %w", s.srv.upstream(), err)
	}
	h.conn = conn
	return h, nil
}

// closeHost ends the server's side: the SDK closes the connection (a
// command's input, then the wait for it to end, signals if it does not;
// a URL server's session is deleted), then what is left of the command's
// process group is killed and its stderr logged.
func (s *mcpSession) closeHost() {
	h := s.host
	if h == nil {
		return
	}
	h.once.Do(func() {
		err := h.conn.Close()
		if h.tr != nil {
			h.tr.CloseIdleConnections()
		}
		if h.cmd == nil {
			return
		}
		pid := h.cmd.Process.Pid
		if kerr := syscall.Kill(-pid, syscall.SIGKILL); kerr == nil {
			s.log.Debug("mcp: killed what was left of the server's process group", "pgid", pid)
		}
		<-h.done
		attrs := []any{"pid", pid}
		if err != nil {
			attrs = append(attrs, "exit", s.clean(err.Error()))
		}
		if tail := h.stderr.String(); tail != "" {
			attrs = append(attrs, "stderr", s.redact.replace(tail))
		}
		s.log.Debug("mcp: server ended", attrs...)
	})
}

// mcpHeaders sets a URL server's headers on each request, and the MCP
// protocol version the session settled on (which the SDK's client sets
// itself, but which the bridge, not being that client, learns from the
// initialize answer).
type mcpHeaders struct {
	base    http.RoundTripper
	headers map[string]string
	version *mcpVersion
}

func (t *mcpHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		if req.Header.Get(k) == "" {
			req.Header.Set(k, v)
		}
	}
	if v := t.version.get(); v != "" && req.Header.Get("Mcp-Protocol-Version") == "" {
		req.Header.Set("Mcp-Protocol-Version", v)
	}
	return t.base.RoundTrip(req)
}

// mcpVersion is the protocol version of a URL server's session, from the
// server's answer to initialize.
type mcpVersion struct {
	v atomic.Pointer[string]
}

// learn takes the version from resp, the answer to initialize.
func (m *mcpVersion) learn(resp *jsonrpc.Response) {
	if resp.Error != nil {
		return
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(resp.Result, &res) == nil && res.ProtocolVersion != "" && !strings.ContainsAny(res.ProtocolVersion, "\r\n") {
		m.v.Store(&res.ProtocolVersion)
	}
}

func (m *mcpVersion) get() string {
	if p := m.v.Load(); p != nil {
		return *p
	}
	return ""
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// mcpRunServers are the MCP servers of a profile, as a RunConfig lists
// them.
func mcpRunServers(list []config.MCPServer) []MCPServer {
	out := make([]MCPServer, len(list))
	for i, s := range list {
		out[i] = MCPServer{Name: s.Name, Command: s.Command, Env: s.Env, URL: s.URL, Headers: s.Headers}
	}
	return out
}
