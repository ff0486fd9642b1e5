package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

// Shell completion suggests what this host knows: the config's profiles
// for --profile, the providers for run --sandbox, and the workflows of
// recorded runs for attach (running ones), logs and results (of
// --profile's sandbox when given).
func TestCompletion(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, "default_profile: dev\nprofiles:\n  dev:\n    sandbox: {provider: local}\n  remote:\n    sandbox: {provider: ssh, ssh: {host: build-1.test}}\n")
	runs := runstore.New(filepath.Join(e.home, ".local", "state", "amelia", "runs"))
	for _, r := range []runstore.Record{
		{Workflow: "fix-login-3f9a", Profile: "dev", State: runstore.Running, RunDir: "/w/.amelia/runs/fix-login-3f9a-x"},
		{Workflow: "fix-build-77aa", Profile: "dev", State: runstore.Kept},
		{Workflow: "docs-1", Profile: "remote", Sandbox: "amelia-remote-3c1d", State: runstore.Kept, RunDir: "/w/.amelia/runs/docs-1-x"},
	} {
		if err := runs.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "ls", "--profile", ""}, "dev\tprovider local\nremote\tprovider ssh\n"},
		{[]string{"-p", "r"}, "remote\tprovider ssh\n"},
		{[]string{"run", "--sandbox", ""}, "local\tbuilt-in\ndocker\tbuilt-in\nssh\tbuilt-in\ndaytona\tbuilt-in\nkubernetes\tbuilt-in\n"},
		{[]string{"attach", ""}, "fix-login-3f9a\trunning in sandbox dev\n"},
		{[]string{"logs", ""}, "fix-login-3f9a\trunning in sandbox dev\ndocs-1\tkept in sandbox amelia-remote-3c1d\n"},
		{[]string{"results", "fix-"}, "fix-build-77aa\tkept in sandbox dev\nfix-login-3f9a\trunning in sandbox dev\n"},
		{[]string{"--profile", "remote", "results", ""}, "docs-1\tkept in sandbox amelia-remote-3c1d\n"},
		{[]string{"results", "docs-1", ""}, ""},
	} {
		r := amelia(t, "", append([]string{"__complete"}, c.args...)...)
		got, _, _ := strings.Cut(r.stdout, ":") // then the directive
		if r.code != 0 || got != c.want {
			t.Errorf("complete amelia %s: exit %d\n%s\nwant:\n%s(stderr %q)", strings.Join(c.args, " "), r.code, got, c.want, r.stderr)
		}
	}
}
