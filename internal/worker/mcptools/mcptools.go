// Package mcptools gives the worker's own agent (amelia-worker agentic
// without --agent) the tools of the profile's MCP servers, next to its own.
//
// Each server is reached through the amelia proxy, as the CLI agents'
// bridge (amelia-worker mcp NAME) reaches it: a session on the proxy's
// /mcp/NAME (package mcpwire) that carries MCP's stdio framing, spoken
// with the official Go SDK's client. A server's tool TOOL is offered to the
// model as mcp__SERVER__TOOL, the name Claude Code gives it, made to fit
// what model APIs accept (see [Open]).
package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/mcpwire"
	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// Prefix starts the model's name of every MCP tool: mcp__SERVER__TOOL.
const Prefix = "mcp__"

// maxName is the longest tool name model APIs accept
// (^[a-zA-Z0-9_-]{1,64}$).
const maxName = 64

// setupTimeout bounds opening one server's session: the dial, MCP's
// initialization and the listing of its tools.
const setupTimeout = 30 * time.Second

// Tools is what a Toolbox adds the servers' tools to: the worker's
// [tools.Set].
type Tools interface {
	Definitions() []tools.Definition
	Call(ctx context.Context, name string, args json.RawMessage) tools.Result
}

// Options are where the servers are and what to log.
type Options struct {
	// ProxyURL is the proxy's root URL, AMELIA_PROXY_URL.
	ProxyURL string
	// Token is the run's token, AMELIA_PROXY_TOKEN.
	Token string
	// Logger gets the sessions' and calls' records; nil discards them.
	Logger *slog.Logger
}

// Toolbox is a set of tools plus the tools of MCP servers. It is safe for
// concurrent use.
type Toolbox struct {
	base     Tools
	defs     []tools.Definition
	routes   map[string]route // by the model's name of the tool
	sessions []*session
	log      *slog.Logger
}

// route is where the model's name of an MCP tool leads.
type route struct {
	s    *session
	tool string // the server's name of the tool
}

// session is one server's MCP session.
type session struct {
	name string
	cs   *mcp.ClientSession
}

// Open opens a session with each of servers (names of the profile's MCP
// servers) through the proxy, lists their tools, and returns base with
// those tools added. A server that cannot be reached, refuses or cannot
// list its tools fails Open, with an error naming it; the sessions opened
// so far are closed.
//
// The model's name of a server's tool is mcp__SERVER__TOOL with each
// character model APIs do not accept (outside [a-zA-Z0-9_-]) replaced by
// '_'. When that name is longer than 64 characters or already taken (by
// base's tools or an earlier server's), it is cut and ends with '_' and 8
// hexadecimal digits of a hash of the server's and tool's names; a tool
// whose name is taken even so is left out, with a warning in the log.
// Calls of the renamed tools reach the server with their real names.
func Open(ctx context.Context, base Tools, servers []string, opts Options) (*Toolbox, error) {
	switch {
	case opts.ProxyURL == "":
		return nil, fmt.Errorf("%s is not set: the worker reaches the profile's MCP servers through the amelia proxy", sandboxend.EnvProxyURL)
	case opts.Token == "":
		return nil, fmt.Errorf("%s is not set: the worker reaches the profile's MCP servers with the run's token", sandboxend.EnvProxyToken)
	}
	t := &Toolbox{base: base, defs: base.Definitions(), routes: map[string]route{}, log: opts.Logger}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	taken := map[string]bool{}
	for _, d := range t.defs {
		taken[d.Name] = true
	}
	seen := map[string]bool{}
	for _, name := range servers {
		if seen[name] {
			t.Close()
			return nil, fmt.Errorf("MCP server %s is given twice: give each once", name)
		}
		seen[name] = true
		s, list, err := open(ctx, name, opts, t.log)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("MCP server %s: %w", name, err)
		}
		t.sessions = append(t.sessions, s)
		added := 0
		for _, tool := range list {
			d, ok := definition(name, tool, taken)
			if !ok {
				t.log.Warn("MCP tool left out: no name for it is free", "server", name, "tool", tool.Name)
				continue
			}
			taken[d.Name] = true
			t.defs = append(t.defs, d)
			t.routes[d.Name] = route{s: s, tool: tool.Name}
			added++
		}
		t.log.Info("MCP server ready", "server", name, "tools", added)
	}
	return t, nil
}

// open opens the session with the server name and lists its tools.
func open(ctx context.Context, name string, opts Options, log *slog.Logger) (*session, []*mcp.Tool, error) {
	if !validServer(name) {
		return nil, nil, errors.New("an MCP server's name is letters, digits, '-' and '_'")
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	conn, err := mcpwire.Dial(ctx, opts.ProxyURL, opts.Token, name)
	var refused *mcpwire.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == 401:
		return nil, nil, fmt.Errorf("the proxy refused the run's token (%s): %s", sandboxend.EnvProxyToken, refused.Message)
	case errors.As(err, &refused):
		return nil, nil, fmt.Errorf("the proxy refused: %s", refused.Message)
	case err != nil:
		return nil, nil, fmt.Errorf("open a session with the proxy at %s: %w", sandboxend.EnvProxyURL, err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "amelia-worker", Version: buildinfo.Version()}, &mcp.ClientOptions{Logger: log})
	// Closing the reader closes the connection, which ends the session:
	// the proxy then ends the server.
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: nopCloser{conn}}, nil)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("start the MCP session: %w", err)
	}
	s := &session{name: name, cs: cs}
	var list []*mcp.Tool
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			s.close()
			return nil, nil, fmt.Errorf("list its tools: %w", err)
		}
		list = append(list, tool)
	}
	return s, list, nil
}

// close ends the session; a session the server or proxy ended already is
// no failure.
func (s *session) close() error {
	err := s.cs.Close()
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("close the session with MCP server %s: %w", s.name, err)
}

// nopCloser is the session's writer, whose Close leaves the connection to
// the reader's.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Definitions returns the base tools, then each server's, in the order of
// the servers given to Open and of their listings.
func (t *Toolbox) Definitions() []tools.Definition {
	return append([]tools.Definition(nil), t.defs...)
}

// Call runs the tool name with args, a JSON object: an MCP tool through
// its server's session, any other through the base tools. An MCP tool's
// result is its text content, one part a line (its structured content as
// JSON when it has no text), and is an error when the server says so or
// the call failed; Output is valid UTF-8 and cut as [tools.Set.Call] cuts
// it.
func (t *Toolbox) Call(ctx context.Context, name string, args json.RawMessage) tools.Result {
	r, ok := t.routes[name]
	if !ok {
		if strings.HasPrefix(name, Prefix) {
			return finish(tools.Result{Output: fmt.Sprintf("unknown tool %q; the MCP tools are %s", name, t.mcpNames()), IsError: true})
		}
		return t.base.Call(ctx, name, args)
	}
	start := time.Now()
	res := r.s.call(ctx, r.tool, args)
	t.log.Debug("MCP tool call", "server", r.s.name, "tool", r.tool, "is_error", res.IsError,
		"output_chars", len(res.Output), "duration", time.Since(start))
	return finish(res)
}

// call calls the server's tool.
func (s *session) call(ctx context.Context, tool string, args json.RawMessage) tools.Result {
	if !isObject(args) {
		return tools.Result{Output: "the arguments must be a JSON object", IsError: true}
	}
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return tools.Result{Output: fmt.Sprintf("MCP server %s: call %s: %v", s.name, tool, err), IsError: true}
	}
	return tools.Result{Output: output(res), IsError: res.IsError}
}

// output is what the model sees of a tool's result.
func output(res *mcp.CallToolResult) string {
	var parts []string
	hasText := false
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
			hasText = true
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s (%s, %d bytes), not shown]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s: %s]", c.URI, c.Name))
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image (%s, %d bytes), not shown]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio (%s, %d bytes), not shown]", c.MIMEType, len(c.Data)))
		}
	}
	if !hasText && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append([]string{string(b)}, parts...)
		}
	}
	return strings.Join(parts, "\n")
}

func (t *Toolbox) mcpNames() string {
	var names []string
	for _, d := range t.defs {
		if _, ok := t.routes[d.Name]; ok {
			names = append(names, d.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Close ends every session. The base tools stay open.
func (t *Toolbox) Close() error {
	var errs []error
	for _, s := range t.sessions {
		errs = append(errs, s.close())
	}
	t.sessions = nil
	return errors.Join(errs...)
}

// definition is the model's definition of the server's tool, named as
// Open says with the names in taken avoided; false when no name is free.
func definition(server string, tool *mcp.Tool, taken map[string]bool) (tools.Definition, bool) {
	if tool.Name == "" {
		return tools.Definition{}, false
	}
	name := Prefix + sanitize(server) + "__" + sanitize(tool.Name)
	desc := tool.Description
	if desc == "" {
		desc = tool.Title
	}
	if len(name) > maxName || taken[name] {
		sum := sha256.Sum256([]byte(server + "\x00" + tool.Name))
		suffix := "_" + hex.EncodeToString(sum[:4])
		name = name[:min(len(name), maxName-len(suffix))] + suffix
		if taken[name] {
			return tools.Definition{}, false
		}
	}
	if name != Prefix+server+"__"+tool.Name {
		desc = strings.TrimSpace(desc + fmt.Sprintf("\n\n(The tool %q of the MCP server %s.)", tool.Name, server))
	}
	return tools.Definition{Name: name, Description: desc, Parameters: parameters(tool.InputSchema)}, true
}

// sanitize replaces each character of s outside [a-zA-Z0-9_-] with '_'.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && validByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func validByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// validServer says whether name can name an MCP server (as
// config.ValidMCPName, without its length limit).
func validServer(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !validByte(name[i]) {
			return false
		}
	}
	return true
}

// emptyObject is the parameters of a tool without an input schema.
var emptyObject = json.RawMessage(`{"type":"object","properties":{}}`)

// parameters is a tool's input schema as the function's parameters: an
// object schema, with "properties" (which some model APIs require of one)
// even when the server left it out.
func parameters(schema any) json.RawMessage {
	b, err := json.Marshal(schema)
	if err != nil {
		return emptyObject
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return emptyObject
	}
	if _, ok := m["type"]; !ok {
		m["type"] = json.RawMessage(`"object"`)
	}
	if _, ok := m["properties"]; !ok {
		m["properties"] = json.RawMessage(`{}`)
	}
	if b, err = json.Marshal(m); err != nil {
		return emptyObject
	}
	return b
}

// isObject reports whether b is a JSON object.
func isObject(b json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

// finish makes res.Output valid UTF-8 and at most [tools.MaxOutputChars]
// characters followed by a truncation marker, as [tools.Set.Call] does.
func finish(res tools.Result) tools.Result {
	res.Output = strings.ToValidUTF8(res.Output, "\uFFFD")
	if len(res.Output) <= tools.MaxOutputChars { // bytes bound runes
		return res
	}
	runes := []rune(res.Output)
	if len(runes) <= tools.MaxOutputChars {
		return res
	}
	res.Output = fmt.Sprintf("%s\n[output truncated: showed %d of %d characters]",
		string(runes[:tools.MaxOutputChars]), tools.MaxOutputChars, len(runes))
	return res
}
