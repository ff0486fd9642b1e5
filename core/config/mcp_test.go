package config

import (
	"slices"
	"strings"
	"testing"
)

func TestMCPServers(t *testing.T) {
	content := profileWith(`sandbox: {provider: docker}
mcp:
  github:
    command: [github-mcp-server, stdio, --read-only]
    env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GH_PAT}", LOG_LEVEL: debug}
  Docs_2:
    url: https://docs.example/mcp
    headers: {Authorization: "Bearer ${DOCS_KEY}"}
`)
	env := testEnv{"GH_PAT": "ghp_SECRETsecretSECRET", "DOCS_KEY": "docs-SECRET-key"}
	p := mustProfile(t, mustLoad(t, content, env), "dev")
	want := []MCPServer{
		{Name: "Docs_2", URL: "https://docs.example/mcp", Headers: map[string]string{"Authorization": "Bearer docs-SECRET-key"}},
		{Name: "github", Command: []string{"github-mcp-server", "stdio", "--read-only"},
			Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_SECRETsecretSECRET", "LOG_LEVEL": "debug"}},
	}
	equal(t, "Profile.MCP", p.MCP, want)
	if s, ok := p.MCPServer("github"); !ok || s.Command[0] != "github-mcp-server" {
		t.Errorf("MCPServer(github) = %+v, %v", s, ok)
	}
	if _, ok := p.MCPServer("nope"); ok {
		t.Error("MCPServer(nope) found a server")
	}

	out, err := p.ShowYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "SECRET") || strings.Contains(string(out), "debug") {
		t.Errorf("ShowYAML shows an MCP server's env or header value:\n%s", out)
	}
	for _, line := range []string{
		"mcp:\n  Docs_2:\n    url: https://docs.example/mcp\n    headers:\n      Authorization: \"********\"\n",
		"  github:\n    command:\n      - github-mcp-server\n      - stdio\n      - --read-only\n    env:\n      GITHUB_PERSONAL_ACCESS_TOKEN: \"********\"\n      LOG_LEVEL: \"********\"\n",
	} {
		if !strings.Contains(string(out), line) {
			t.Errorf("ShowYAML lacks\n%s\nin:\n%s", line, out)
		}
	}
}

func TestMCPServerProblems(t *testing.T) {
	const sandbox = "sandbox: {provider: docker}\n"
	tests := []struct {
		name, mcp string
		want      []string
	}{
		{
			name: "name with a slash, and one with a dot",
			mcp:  "a/b: {url: https://x.example}\na.b: {url: https://x.example}",
			want: []string{
				`profiles.dev.mcp."a.b": invalid MCP server name: it becomes part of a URL path and a command's argument, so use letters, digits, "-" and "_", at most 64 characters`,
				`profiles.dev.mcp.a/b: invalid MCP server name: it becomes part of a URL path and a command's argument, so use letters, digits, "-" and "_", at most 64 characters`,
			},
		},
		{
			name: "name of 65 characters",
			mcp:  strings.Repeat("a", 65) + ": {url: https://x.example}",
			want: []string{`profiles.dev.mcp.` + strings.Repeat("a", 65) + `: invalid MCP server name: it becomes part of a URL path and a command's argument, so use letters, digits, "-" and "_", at most 64 characters`},
		},
		{
			name: "neither command nor url",
			mcp:  "gh: {env: {A: b}}",
			want: []string{`profiles.dev.mcp.gh: needs command: [PROGRAM, ARG...] (a stdio server the host runs) or url: https://... (a streamable HTTP server)`},
		},
		{
			name: "both command and url",
			mcp:  "gh: {command: [x], url: https://x.example}",
			want: []string{`profiles.dev.mcp.gh: command and url are both set: a server is a program the host runs (command) or one it reaches (url); use one`},
		},
		{
			name: "env with url",
			mcp:  "gh: {url: https://x.example, env: {A: b}}",
			want: []string{`profiles.dev.mcp.gh.env: env goes with command (a program the host runs); a url server takes headers`},
		},
		{
			name: "headers with command",
			mcp:  "gh: {command: [x], headers: {A: b}}",
			want: []string{`profiles.dev.mcp.gh.headers: headers go with url (a streamable HTTP server); a command server takes env`},
		},
		{
			name: "command is a string",
			mcp:  "gh: {command: github-mcp-server stdio}",
			want: []string{`profiles.dev.mcp.gh.command: must be a list, got a string`},
		},
		{
			name: "empty command",
			mcp:  "gh: {command: []}",
			want: []string{`profiles.dev.mcp.gh.command: must name a program: write command: [PROGRAM, ARG...]`},
		},
		{
			name: "url not http",
			mcp:  "gh: {url: 'ftp://x.example/mcp'}",
			want: []string{`profiles.dev.mcp.gh.url: "ftp://x.example/mcp" is not an absolute http(s) URL`},
		},
		{
			name: "bad env name, value not a string",
			mcp:  "gh: {command: [x], env: {1A: b, B: [c]}}",
			want: []string{
				`profiles.dev.mcp.gh.env.1A: "1A" is not a valid environment variable name (letters, digits and _, not starting with a digit)`,
				`profiles.dev.mcp.gh.env.B: must be a string, got a list`,
			},
		},
		{
			name: "bad header name, value with a line break",
			mcp:  "gh: {url: https://x.example, headers: {'a b': x, X-Key: \"v\\nw\"}}",
			want: []string{
				`profiles.dev.mcp.gh.headers."a b": "a b" is not a valid HTTP header name`,
				`profiles.dev.mcp.gh.headers.X-Key: contains a line break or NUL, which cannot be sent in an HTTP header`,
			},
		},
		{
			name: "not a map",
			mcp:  "[gh]",
			want: []string{`profiles.dev.mcp: must be a map, got a list`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, profileWith(sandbox+"mcp:\n"+indent(tt.mcp, "  ")), nil)
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			equal(t, "problems", got, want)
		})
	}
}

// A problem with an MCP server's secret never shows the secret.
func TestMCPProblemsHideSecrets(t *testing.T) {
	const secret = "sk-live-0a1b2c3d4e5f6a7b8c9d"
	content := profileWith("sandbox: {provider: docker}\nmcp:\n  gh: {url: \"${S}\", headers: {X-Key: \"${S}\\n\"}}\n")
	for _, p := range problems(t, content, testEnv{"S": secret}) {
		if strings.Contains(p, secret) {
			t.Errorf("a problem shows the secret: %s", p)
		}
	}
}
