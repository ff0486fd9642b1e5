package config

import (
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MCPServer is one of a profile's MCP servers (mcp.NAME): a program the
// host runs, with the host's environment and credentials, or a streamable
// HTTP server the host reaches. The sandbox reaches it only through the
// proxy (/mcp/NAME), as `amelia-worker mcp NAME`. Exactly one of Command
// and URL is set.
type MCPServer struct {
	// Name is the server's name in the profile; see ValidMCPName.
	Name string
	// Command is the server's program and its arguments (stdio); the
	// host looks the program up on its PATH.
	Command []string
	// Env is added to the host's environment for Command: secrets,
	// usually written as ${VAR}s. Never shown.
	Env map[string]string
	// URL is the absolute http(s) URL of a streamable HTTP server.
	URL string
	// Headers are sent with every request to URL: credentials, usually
	// written as ${VAR}s. Never shown.
	Headers map[string]string
}

// maxMCPName bounds an MCP server's name.
const maxMCPName = 64

// mcpNameRule describes ValidMCPName for messages.
const mcpNameRule = `letters, digits, "-" and "_", at most 64 characters`

// ValidMCPName reports whether name can name an MCP server: it becomes a
// segment of a URL path (/mcp/NAME) and a word of a command line, so it
// is ^[A-Za-z0-9_-]{1,64}$.
func ValidMCPName(name string) bool {
	if name == "" || len(name) > maxMCPName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// MCPServer returns the profile's MCP server named name.
func (p *Profile) MCPServer(name string) (MCPServer, bool) {
	for _, s := range p.MCP {
		if s.Name == name {
			return s, true
		}
	}
	return MCPServer{}, false
}

// mcpField is the profile's mcp key: a map of server names to servers,
// decoded into Profile.MCP sorted by name.
func mcpField() field[Profile] {
	return field[Profile]{
		key: "mcp",
		decode: func(d *decoder, at path, v any, p *Profile) {
			if v == nil {
				return
			}
			m, ok := d.mapping(at, v)
			if !ok {
				return
			}
			for _, name := range sortedKeys(m) {
				sat := at.key(name)
				if !ValidMCPName(name) {
					d.problemf(sat, "invalid MCP server name: it becomes part of a URL path and a command's argument, so use %s", mcpNameRule)
					continue
				}
				s := MCPServer{Name: name}
				if decodeSection(d, sat, m[name], mcpServerSection(), &s) {
					p.MCP = append(p.MCP, s)
				}
			}
		},
		show: func(s *shower, at path, p *Profile) any {
			if len(p.MCP) == 0 {
				return nil
			}
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for i := range p.MCP {
				srv := &p.MCP[i]
				n.Content = append(n.Content, strNode(srv.Name), showSection(s, at.key(srv.Name), mcpServerSection(), srv))
			}
			return n
		},
	}
}

// mcpServerSection is one server under mcp: command (with env) or url
// (with headers).
func mcpServerSection() section[MCPServer] {
	return section[MCPServer]{
		fields: []field[MCPServer]{
			{
				key: "command",
				decode: func(d *decoder, at path, v any, s *MCPServer) {
					if v == nil {
						return
					}
					cmd, ok := d.strList(at, v, func(at path, x sval) (string, bool) {
						if strings.ContainsRune(x.val, 0) {
							d.problemf(at, "contains a NUL, which a command's argument cannot hold")
							return "", false
						}
						return x.val, true
					})
					switch {
					case !ok:
					case len(cmd) == 0 || cmd[0] == "":
						d.problemf(at, "must name a program: write command: [PROGRAM, ARG...]")
					default:
						s.Command = cmd
					}
				},
				show: func(_ *shower, _ path, s *MCPServer) any {
					if len(s.Command) == 0 {
						return nil
					}
					return append([]string{}, s.Command...)
				},
			},
			{
				key: "env",
				decode: func(d *decoder, at path, v any, s *MCPServer) {
					s.Env = d.secretMap(at, v, func(at path, k string, x sval) bool {
						switch {
						case !validEnvName(k):
							d.problemf(at, "%q is not a valid environment variable name (letters, digits and _, not starting with a digit)", k)
						case strings.ContainsRune(x.val, 0):
							d.problemf(at, "contains a NUL, which an environment variable cannot hold")
						default:
							return true
						}
						return false
					})
				},
				show: func(_ *shower, _ path, s *MCPServer) any { return maskedMap(s.Env) },
			},
			{
				key: "url",
				decode: func(d *decoder, at path, v any, s *MCPServer) {
					if v == nil {
						return
					}
					x, ok := d.str(at, v)
					if !ok {
						return
					}
					if u, err := url.Parse(x.val); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						x.val, x.raw = redactURL(x.val), redactURL(x.raw)
						d.problemf(at, "%s is not an absolute http(s) URL", x.quote())
						return
					}
					s.URL = x.val
				},
				show: func(_ *shower, _ path, s *MCPServer) any {
					if s.URL == "" {
						return nil
					}
					return s.URL
				},
			},
			{
				key: "headers",
				decode: func(d *decoder, at path, v any, s *MCPServer) {
					s.Headers = d.secretMap(at, v, func(at path, k string, x sval) bool {
						switch {
						case !validHeaderName(k):
							d.problemf(at, "%q is not a valid HTTP header name", k)
						case hasLineBreak(x.val):
							d.problemf(at, "contains a line break or NUL, which cannot be sent in an HTTP header")
						default:
							return true
						}
						return false
					})
				},
				show: func(_ *shower, _ path, s *MCPServer) any { return maskedMap(s.Headers) },
			},
		},
		check: func(d *decoder, at path, set map[string]bool, s *MCPServer) {
			switch {
			case set["command"] && set["url"]:
				d.problemf(at, "command and url are both set: a server is a program the host runs (command) or one it reaches (url); use one")
			case !set["command"] && !set["url"]:
				d.problemf(at, "needs command: [PROGRAM, ARG...] (a stdio server the host runs) or url: https://... (a streamable HTTP server)")
			case set["env"] && !set["command"]:
				d.problemf(at.key("env"), "env goes with command (a program the host runs); a url server takes headers")
			case set["headers"] && !set["url"]:
				d.problemf(at.key("headers"), "headers go with url (a streamable HTTP server); a command server takes env")
			}
		},
	}
}

// secretMap converts a non-nil map of strings whose values are secrets,
// expanding ${VAR}s; ok checks each entry. Values are never echoed.
func (d *decoder) secretMap(at path, v any, ok func(at path, k string, x sval) bool) map[string]string {
	if v == nil {
		return nil
	}
	m, good := d.mapping(at, v)
	if !good || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		if x, good := d.str(at.key(k), m[k]); good && ok(at.key(k), k, x) {
			out[k] = x.val
		}
	}
	return out
}

// maskedMap shows a map of secrets: every key, every value masked.
func maskedMap(m map[string]string) any {
	if len(m) == 0 {
		return nil
	}
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, k := range sortedKeys(m) {
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: masked, Style: yaml.DoubleQuotedStyle}
		if m[k] == "" {
			v.Value = ""
		}
		n.Content = append(n.Content, strNode(k), v)
	}
	return n
}

// validHeaderName reports whether s is an HTTP header name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
