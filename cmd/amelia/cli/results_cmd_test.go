package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

// Without --profile, a workflow found in the sandboxes, or the host logs,
// of more than one profile is refused, naming them.
func TestWorkflowOfManyProfilesAsksForOne(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, "default_profile: dev\nprofiles:\n  dev:\n    sandbox: {provider: local}\n  remote:\n    sandbox: {provider: ssh, ssh: {host: build-1.test}}\n")
	state := filepath.Join(e.home, ".local", "state", "amelia")
	runs, logs := runstore.New(filepath.Join(state, "runs")), runstore.NewLogs(filepath.Join(state, "logs"))
	for _, profile := range []string{"dev", "remote"} {
		if err := runs.Put(runstore.Record{Workflow: "docs-1", Profile: profile, State: runstore.Kept}); err != nil {
			t.Fatal(err)
		}
		w, err := logs.Create(profile, "docs-2")
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Keep(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"results", "docs-1"}, "amelia: workflow docs-1 has work in the sandboxes of profiles dev, remote: pick one with --profile\n"},
		{[]string{"logs", "docs-2"}, "amelia: workflow docs-2 has logs of the runs of profiles dev, remote: pick one with --profile\n"},
	} {
		if r := amelia(t, "", c.args...); r.code == 0 || r.stderr != c.want {
			t.Errorf("amelia %s: exit %d, stderr %q; want %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}
