package main_test

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// A base_url that does not answer is named as the profile configured it,
// not as the proxy's address inside the sandbox.
func TestUnreachableUpstreamIsNamedAsConfigured(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	cfg, err := os.ReadFile(h.configPath())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, h.configPath(), strings.Replace(string(cfg), h.up.URL()+"/v1", gone, 1))

	r := h.amelia(t, "run", "--workflow", "gone", "do it")
	if r.code == 0 {
		t.Fatalf("amelia run succeeded against %s", gone)
	}
	if !strings.Contains(r.stderr, "cannot reach upstream "+gone) {
		t.Errorf("stderr does not name the configured %s:\n%s", gone, r.stderr)
	}
	if strings.Contains(r.stderr, "LLM request to http://127.0.0.1") {
		t.Errorf("stderr names the proxy's address in the sandbox:\n%s", r.stderr)
	}
}

// A command that is not in the Docker sandbox is named as a shell would,
// with 127, not by the wrapper amelia runs it through.
func TestMissingCommandOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	r := h.amelia(t, "sandbox", "exec", "--", "nosuchcmd")
	if r.code != 127 || r.stderr != "nosuchcmd: command not found\n" {
		t.Errorf("exit %d, stderr %q; want 127 and \"nosuchcmd: command not found\"", r.code, r.stderr)
	}
}
