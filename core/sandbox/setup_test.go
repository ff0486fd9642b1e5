package sandbox_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// cat is a file of the sandbox's home, through its provider.
func cat(t *testing.T, sb *sandbox.Sandbox, name string) string {
	t.Helper()
	var out bytes.Buffer
	if _, err := sb.Exec(t.Context(), sdk.ExecRequest{Argv: []string{"sh", "-c", `cat "$HOME/$1" 2>/dev/null; true`, "sh", name}}, sdk.ExecIO{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// On a provider that keeps no setup (local, as ssh), the host runs the
// commands in the sandbox once, in name order, and marks it done: a
// second prepare, and Ups at once, run nothing; changed commands run
// again; a failing one names itself and leaves no mark.
func TestSetupByTheHost(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir()}}
	c, _ := loadProfiles(t, `default_profile: a
profiles:
  a:
    sandbox:
      provider: local
      setup:
        b-second: [sh, -c, 'echo second >> "$HOME/setup.log"; pwd > "$HOME/setup.pwd"']
        a-first: 'echo "first ''quoted''" >> "$HOME/setup.log"'
  broken: {sandbox: {provider: local, setup: "echo the install broke >&2; exit 3"}}
`)
	ps := profiles(t, c)
	sb, err := o.Open(t.Context(), ps[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Prepare(t.Context())
	if err != nil || res.UpToDate || res.Sandbox == nil || res.Ref != "" {
		t.Fatalf("first prepare: %+v %v", res, err)
	}
	home := strings.TrimSpace(cat(t, sb, "setup.pwd"))
	if got := cat(t, sb, "setup.log"); got != "first 'quoted'\nsecond\n" || !strings.HasSuffix(home, "/home") {
		t.Errorf("after the setup: setup.log %q, run in %q; want both commands once, in name order, in $HOME", got, home)
	}
	if res, err := sb.Prepare(t.Context()); err != nil || !res.UpToDate {
		t.Errorf("second prepare: %+v %v, want up to date", res, err)
	}
	// Starts at once of other processes find it done, or wait for it.
	var wg sync.WaitGroup
	for range 3 {
		other, err := o.Open(t.Context(), ps[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := other.Up(t.Context()); err != nil {
				t.Errorf("Up: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := cat(t, sb, "setup.log"); got != "first 'quoted'\nsecond\n" {
		t.Errorf("after more starts: setup.log %q, want the setup's lines once", got)
	}

	broken, err := o.Open(t.Context(), ps[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = broken.Up(t.Context())
	var se *sdk.SetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "setup command 1 (echo the install broke >&2; exit 3) exited 3; nothing of the setup was kept: the install broke") {
		t.Fatalf("a failing setup: %v", err)
	}
	if got := cat(t, broken, ".amelia/setup"); got != "" {
		t.Errorf("a failed setup left its mark: %q", got)
	}
}
