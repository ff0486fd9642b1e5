package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin/linked"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

func TestProxyServe(t *testing.T) {
	e := newEnv(t)
	up := llmtest.New(t, llmtest.Turn{Text: "through the standalone proxy"})
	e.writeConfig(t, "profiles:\n  dev:\n    llm: {base_url: "+up.URL()+"/v1, api_key_env: TEST_LLM_KEY}\n    sandbox: {provider: local}\n")
	t.Setenv("TEST_LLM_KEY", "sk-cli-test")

	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan int, 1)
	go func() {
		code := newApp(strings.NewReader(""), stdoutW, &stderr, linked.Providers()).run(ctx, []string{"proxy", "serve"})
		stdoutW.Close()
		done <- code
	}()
	lines := bufio.NewScanner(stdoutR)
	vars := map[string]string{}
	for range 2 {
		if !lines.Scan() {
			t.Fatalf("proxy serve printed %v before stopping; stderr: %s", vars, stderr.String())
		}
		k, v, _ := strings.Cut(lines.Text(), "=")
		vars[k] = v
	}
	url, token := vars["AMELIA_PROXY_URL"], vars["AMELIA_PROXY_TOKEN"]
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasPrefix(token, "amr_") {
		t.Fatalf("printed %v", vars)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "through the standalone proxy") {
		t.Errorf("chat through the proxy: %d %s", resp.StatusCode, body)
	}
	if got := up.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-cli-test" {
		t.Errorf("upstream got Authorization %q", got)
	}

	stop()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after Ctrl-C; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "amelia: proxy for profile dev on "+url) {
		t.Errorf("stderr: %q", stderr.String())
	}
	if _, err := http.Get(url + "/v1/models"); err == nil {
		t.Error("the proxy still answers after it stopped")
	}
	logs, _ := filepath.Glob(filepath.Join(e.home, ".local", "state", "amelia", "audit", "proxy-*.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("audit logs: %v", logs)
	}
	audit, _ := os.ReadFile(logs[0])
	if !strings.Contains(string(audit), `"route":"openai"`) || strings.Contains(string(audit), "sk-cli-test") || strings.Contains(string(audit), token) {
		t.Errorf("audit log: %s", audit)
	}
}

func TestProxyServeRefuses(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, "profiles:\n  dev:\n    llm: {api_key_env: UNSET_KEY_VAR}\n    sandbox: {provider: local}\n")
	r := amelia(t, "", "proxy", "serve")
	if r.code != 1 || !strings.Contains(r.stderr, "UNSET_KEY_VAR is not set") || r.stdout != "" {
		t.Errorf("key variable unset: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Setenv("UNSET_KEY_VAR", "sk-x")
	r = amelia(t, "", "proxy", "serve", "--listen", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "loopback only") {
		t.Errorf("--listen 0.0.0.0:0: exit %d, stderr %q", r.code, r.stderr)
	}
}
