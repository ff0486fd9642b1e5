// Command standin is a scripted stand-in for the CLI coding agents the
// cliagent adapters run (Claude Code, Codex CLI, Gemini CLI), which cannot
// be installed where Amelia's tests run. Invoked as claude, codex or
// gemini (by its name, or by a first argument of that name), it follows
// the real CLI's documented contract as far as the adapters rely on it:
// its flags (refusing unknown ones as the real one does), its environment
// and configuration files, the LLM API it calls and how it authenticates,
// a real agent loop with a shell tool and a file-writing tool, the MCP
// servers of its configuration (stdio: initialize, tools/list,
// tools/call), its event stream on stdout, its state files outside the
// working directory, and its failures and exit codes.
//
// It never calls a public API: with no base URL configured it refuses to
// run. Each agent is a file: claude.go, codex.go, gemini.go.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if !isAgent(name) && len(args) > 0 && isAgent(args[0]) {
		name, args = args[0], args[1:]
	}
	switch name {
	case "claude":
		os.Exit(claude(args))
	case "codex":
		os.Exit(codex(args))
	case "gemini":
		os.Exit(gemini(args))
	}
	fmt.Fprintln(os.Stderr, "standin: run me as claude, codex or gemini (by name or as the first argument)")
	os.Exit(2)
}

func isAgent(s string) bool { return s == "claude" || s == "codex" || s == "gemini" }

// out writes the agent's events, one JSON line each, and keeps a copy
// for the session file.
type out struct {
	w   *bufio.Writer
	log [][]byte
}

func newOut() *out { return &out{w: bufio.NewWriter(os.Stdout)} }

func (o *out) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o.log = append(o.log, b)
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

// saveSession writes the events to path, as the agents keep their
// sessions: under their home, never in the working directory.
func (o *out) saveSession(path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "standin: session:", err)
		return
	}
	if err := os.WriteFile(path, append(bytes.Join(o.log, []byte("\n")), '\n'), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "standin: session:", err)
	}
}

// newID is a random id, hex.
func newID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// runShell runs command with bash in dir: its combined output and exit code.
func runShell(dir, command string) (string, int) {
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = dir
	cmd.Stdin = nil
	b, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			b = append(b, []byte(err.Error())...)
		}
	}
	return string(b), code
}

// writeFile writes content to path, relative to dir unless absolute.
func writeFile(dir, path, content string) (string, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return path, err
	}
	return path, os.WriteFile(path, []byte(content), 0o644)
}

// post sends body as JSON and returns the response when it is a success,
// or an *httpError.
func post(ctx context.Context, url string, header http.Header, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, &httpError{status: resp.StatusCode, text: resp.Status, body: strings.TrimSpace(string(body))}
	}
	return resp, nil
}

// httpError is a response that is not a success.
type httpError struct {
	status int
	text   string
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.body) }

// readSSE calls fn with each server-sent event of r.
func readSSE(r io.Reader, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var event string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				if err := fn(event, data); err != nil {
					return err
				}
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(data) > 0 {
		return fn(event, data)
	}
	return nil
}

// readStdin is all of standard input, or "" when it is a terminal.
func readStdin() string {
	if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return ""
	}
	b, _ := io.ReadAll(os.Stdin)
	return string(b)
}

// splitFlag splits "--name=value" into its name and value.
func splitFlag(a string) (name, value string, hasValue bool) {
	if strings.HasPrefix(a, "--") {
		if i := strings.IndexByte(a, '='); i > 0 {
			return a[:i], a[i+1:], true
		}
	}
	return a, "", false
}

// cliMessage is a message the real CLI prints, word for word, rather
// than an error string in Go's style.
type cliMessage string

func (m cliMessage) Error() string { return string(m) }

// cliMsg formats a cliMessage.
func cliMsg(format string, a ...any) error { return cliMessage(fmt.Sprintf(format, a...)) }
