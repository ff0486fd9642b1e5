package netguard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowed are the public names the project's tests may write: each is a
// value the code under test parses, prints or compares, never a target.
// An entry that no longer matches anything fails the test, so the list
// stays as short as the truth.
var allowed = []struct {
	target string   // lowercased as found; "*" for every finding in the files
	files  []string // slash-separated, from the project's root
	why    string
}{
	{"api.openai.com", []string{
		"cmd/amelia/cli/testdata/config-show-builtin.golden",
		"core/config/load_test.go", "core/config/testdata/show/builtin.golden", "core/config/testdata/show/config.yaml",
		"core/config/testdata/show/dev.golden", "core/config/testdata/show/unset.golden", "proxy/llm_test.go",
	}, "the built-in default llm.base_url, which config show prints and the proxy's URL rewriting is tested on; every test that sends a request sets base_url to a server on loopback"},
	{"api.anthropic.com", []string{"core/config/load_test.go", "core/config/testdata/show/dev.golden", "proxy/llm_test.go"},
		"the default llm.anthropic.base_url, shown and rewritten, never sent to"},
	{"openrouter.ai", []string{"proxy/llm_test.go"},
		"the proxy adds OpenRouter's headers for this host; the test checks the rewritten request without sending it"},
	{"github.com", []string{"proxy/hosts_test.go"},
		"github.com:443, an input of MatchHost (a host with a port matches nothing), never dialled"},
	{"app.daytona.io", []string{"plugins/daytona/settings_test.go"},
		"the daytona provider's default api_url; its tests give it the fake's loopback URL"},
	{"ssh.app.daytona.io", []string{"plugins/daytona/settings_test.go"},
		"the sshCommand Daytona's API returns, parsed for its gateway address, never dialled"},
	{"*", []string{"plugins/daytona/daytonatest/testdata/api.yaml", "plugins/daytona/daytonatest/testdata/toolbox.yaml"},
		"copies of Daytona's OpenAPI files, documentation the fake is checked against"},
	{"*", []string{"internal/netguard/netguard_test.go"},
		"the guard's own cases: what it must find"},
}

// Every test and benchmark contacts only what it owns: no file they run
// names a public address, a public hostname or someone else's private
// address as a target, beyond the allowlist above.
func TestTestsNameOnlyTargetsTheyOwn(t *testing.T) {
	root := filepath.Join("..", "..")
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/amelia-sandbox/amelia\n") {
		t.Fatalf("%s is not the project's root (go.mod: %v)", root, err)
	}
	found, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	used := map[[2]string]bool{}
	for _, f := range found {
		if key, ok := allowedBy(f); ok {
			used[key] = true
			continue
		}
		t.Errorf("%s", f)
	}
	for _, a := range allowed {
		for _, file := range a.files {
			if !used[[2]string{a.target, file}] {
				t.Errorf("allowlist: %s names %s, which it no longer has: remove the entry", file, a.target)
			}
		}
	}
}

// allowedBy returns the allowlist entry (target, file) that lets f pass.
func allowedBy(f Finding) ([2]string, bool) {
	for _, a := range allowed {
		if (a.target == "*" || a.target == strings.ToLower(f.Target)) && slices.Contains(a.files, f.Path) {
			return [2]string{a.target, f.Path}, true
		}
	}
	return [2]string{}, false
}

// The addresses the guard must catch are put together at run time, so that
// this file, which only hands them to the scanner as text, names none.
var (
	v6Public    = strings.Join([]string{"2606", "4700", "4700", "", "1111"}, ":")
	v6LinkLocal = "fe" + "80::1"
)

func v4(a, b, c, d int) string { return fmt.Sprintf("%d.%d.%d.%d", a, b, c, d) }

func TestScanFile(t *testing.T) {
	const public, private, name = "a public address", "a private-range address", "a public hostname"
	for _, tc := range []struct {
		name, path, src string
		want            []string // "line target reason-prefix"
	}{
		{
			name: "IP literals in a test's strings",
			path: "x/x_test.go",
			src: "package x\n\nvar a = []string{\"" + v4(1, 1, 1, 1) + ":80\", \"" + v4(8, 8, 8, 8) + "\", `exec 3<>/dev/tcp/" + v4(172, 17, 0, 1) + "/80`,\n" +
				"\t\"[" + v6Public + "]:443\", \"::ffff:" + v4(9, 9, 9, 9) + "\", \"" + v6LinkLocal + "%eth0\", `\nline 4: " + v4(10, 0, 0, 1) + "`}\n",
			want: []string{"3 " + v4(1, 1, 1, 1) + " " + public, "3 " + v4(8, 8, 8, 8) + " " + public, "3 " + v4(172, 17, 0, 1) + " " + private,
				"4 " + v6Public + " " + public, "4 ::ffff:" + v4(9, 9, 9, 9) + " " + public, "4 " + v6LinkLocal + " " + private, "5 " + v4(10, 0, 0, 1) + " " + private},
		},
		{
			name: "what a test owns, or what is never routed",
			path: "x/x_test.go",
			src: "package x\n\nvar a = []string{\"127.0.0.1:80\", \"[::1]:22\", \"0.0.0.0:0\", \"192.0.2.1\", \"198.51.100.7:80\",\n" +
				"\t\"203.0.113.9\", \"2001:db8::1\", \"::\", \"go1.26.8\", \"v1.2.3\", \"1.2.3.4.5\", \"02:42:ac:11:00:02\", \"10:30:00\"}\n",
		},
		{
			name: "hostnames as targets",
			path: "x/x_test.go",
			src: "package x\n\nvar a = []string{\"https://api.openai.com/v1\", \"git@github.com:o/r.git\", \"pypi.org:443\",\n" +
				"\t\"http://u:pw@Example.COM/x\", `curl https://x.example.net`, \"/dev/tcp/ident.me/80\"}\n",
			want: []string{"3 api.openai.com " + name, "3 github.com " + name, "3 pypi.org " + name,
				"4 Example.COM " + name, "4 x.example.net " + name, "4 ident.me " + name},
		},
		{
			name: "names no network resolves, and names that are not targets",
			path: "x/x_test.go",
			src: "package x\n\n// A comment may say https://github.com.\nvar a = []string{\"http://allowed.example/\", \"git.test:22\", \"localhost:80\", \"http://sshd:2222\",\n" +
				"\t\"x.invalid:1\", \"a.localhost:9\", \"github.com\", \"dev@example.com\", \"main.go:12\", \"config.yaml:3: bad\",\n" +
				"\t\"github.com/amelia-sandbox/amelia\", \"https://gpu-box.internal:8000\"}\n",
		},
		{
			name: "bare names given to a dialling call",
			path: "x/x_test.go",
			src: "package x\n\nimport \"net\"\n\nfunc f() {\n\tnet.LookupHost(\"example.org\")\n\tnet.JoinHostPort(\"github.com\", \"443\")\n\tnet.Dial(\"tcp\", \"localhost:1\")\n" +
				"\tnet.Dial(\"tcp\", \"" + v4(8, 8, 8, 8) + ":53\")\n\thttp.Get(\"https://pypi.org/simple\")\n\tr.Header.Get(\"user.name\")\n}\n",
			want: []string{"6 example.org " + name, "7 github.com " + name, "9 " + v4(8, 8, 8, 8) + " " + public, "10 pypi.org " + name},
		},
		{
			name: "a test helper package",
			path: "internal/footest/foo.go",
			src:  "package footest\n\nconst resolver = \"" + v4(8, 8, 4, 4) + ":53\"\n",
			want: []string{"3 " + v4(8, 8, 4, 4) + " " + public},
		},
		{
			name: "production code is out of scope",
			path: "internal/worker/egress.go",
			src:  "package worker\n\nvar CanaryTargets = []string{\"" + v4(1, 1, 1, 1) + ":443\"}\n",
		},
		{
			name: "testdata, every line",
			path: "core/x/testdata/config.yaml",
			src:  "# see https://docs.example\nllm:\n  base_url: https://api.openai.com/v1\nallowed: [" + v4(10, 1, 2, 3) + "]\n",
			want: []string{"3 api.openai.com " + name, "4 " + v4(10, 1, 2, 3) + " " + private},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := ScanFile(tc.path, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range found {
				if f.Path != tc.path {
					t.Errorf("finding in %q, want %q", f.Path, tc.path)
				}
				got = append(got, strings.Join([]string{strconv.Itoa(f.Line), f.Target, f.Reason}, " "))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("finding %d: %s\nwant: %s...", i, got[i], tc.want[i])
				}
			}
		})
	}
}
