package worker_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// The worker reaches the LLM in amelia's environment and in the Python
// Amelia's, with the bearer token and identity headers each expects.
func TestLLMIdentity(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     func(url string) []string
		bearer  string
		token   string // X-Amelia-Proxy-Token, "" for none
		profile string // X-Amelia-Profile, "" for none
	}{
		{"amelia", func(url string) []string {
			return []string{"AMELIA_PROXY_URL=" + url, "AMELIA_PROXY_TOKEN=" + runToken}
		},
			runToken, runToken, ""},
		{"amelia with a profile", func(url string) []string {
			return []string{"AMELIA_PROXY_URL=" + url, "AMELIA_PROXY_TOKEN=" + runToken, "AMELIA_PROFILE=dev"}
		}, runToken, runToken, "dev"},
		{"python docker provider", func(url string) []string {
			return []string{"LLM_PROXY_URL=" + url + "/v1", "AMELIA_PROFILE=work", "AMELIA_PROXY_TOKEN=" + runToken}
		}, runToken, runToken, "work"},
		{"python, proxy-managed", func(url string) []string { return []string{"LLM_PROXY_URL=" + url + "/v1"} },
			"proxy-managed", "", ""},
		{"python daytona, a key of its own", func(url string) []string {
			return []string{"LLM_PROXY_URL=" + url + "/v1", "OPENAI_API_KEY=sk-direct"}
		}, "sk-direct", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{Text: "ok"})
			prompt := writeFile(t, t.TempDir(), "p.txt", "hi")
			r := runWorker(t, tt.env(srv.URL()), nil, "generate", "--prompt-file", prompt, "--model", "m")
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			h := srv.Requests()[0].Header
			if got := h.Get("Authorization"); got != "Bearer "+tt.bearer {
				t.Errorf("Authorization = %q, want Bearer %s", got, tt.bearer)
			}
			if got := h.Get("X-Amelia-Proxy-Token"); got != tt.token || (tt.token == "" && h.Values("X-Amelia-Proxy-Token") != nil) {
				t.Errorf("X-Amelia-Proxy-Token = %q, want %q", got, tt.token)
			}
			if got := h.Get("X-Amelia-Profile"); got != tt.profile || (tt.profile == "" && h.Values("X-Amelia-Profile") != nil) {
				t.Errorf("X-Amelia-Profile = %q, want %q", got, tt.profile)
			}
		})
	}
}

// git-credential works in the Python Amelia's environment as its
// credential-helper.sh does: it posts to $LLM_PROXY_URL/git/credentials
// with X-Amelia-Profile ("default" when unset), and with the token when
// there is one.
func TestGitCredentialPythonEnvironment(t *testing.T) {
	type seen struct{ path, profile, token, auth string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, seen{r.URL.Path, r.Header.Get("X-Amelia-Profile"), r.Header.Get("X-Amelia-Proxy-Token"), r.Header.Get("Authorization")})
		mu.Unlock()
		io.WriteString(w, "protocol=https\nhost=forge.test\nusername=u\npassword=p\n")
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		name string
		env  []string
		want seen
	}{
		{"python docker provider", []string{"LLM_PROXY_URL=" + srv.URL + "/proxy/v1", "AMELIA_PROFILE=work", "AMELIA_PROXY_TOKEN=" + runToken},
			seen{"/proxy/v1/git/credentials", "work", runToken, "Bearer " + runToken}},
		{"no profile, no token", []string{"LLM_PROXY_URL=" + srv.URL + "/proxy/v1/"},
			seen{"/proxy/v1/git/credentials", "default", "", ""}},
		{"amelia's wins", []string{"AMELIA_PROXY_URL=" + srv.URL, "LLM_PROXY_URL=" + srv.URL + "/proxy/v1", "AMELIA_PROXY_TOKEN=" + runToken},
			seen{"/git/credentials", "default", runToken, "Bearer " + runToken}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			r := runWorker(t, tt.env, strings.NewReader("protocol=https\nhost=forge.test\n\n"), "git-credential", "get")
			if r.code != 0 || !strings.Contains(string(r.stdout), "password=p\n") {
				t.Fatalf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("the proxy saw %+v, want %+v", got, tt.want)
			}
		})
	}
	r := runWorker(t, []string{"AMELIA_PROXY_URL=" + srv.URL}, strings.NewReader("host=forge.test\n\n"), "git-credential", "get")
	if r.code != 1 || !strings.Contains(string(r.stderr), "AMELIA_PROXY_TOKEN must be set with AMELIA_PROXY_URL") {
		t.Errorf("amelia's URL without its token: exit %d, stderr %q", r.code, r.stderr)
	}
}
