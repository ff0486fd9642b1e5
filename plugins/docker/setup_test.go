package docker_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// nonce makes a setup of the test's own: its hash, and so its image, is
// no other test's.
func nonce(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// appendLine is a setup command that appends line to ~/setup.log: a
// sandbox made from its result holds the line once.
func appendLine(line string) sdk.SetupCommand {
	return sdk.SetupCommand{Argv: []string{"sh", "-c", `echo "$1" >> "$HOME/setup.log"`, "sh", line}}
}

// setupSpec is a sandbox spec with setup commands, whose images go when
// the test ends.
func setupSpec(t *testing.T, setup ...sdk.SetupCommand) sdk.Spec {
	s := spec(t, dockertest.Settings(nil), sdk.NetworkNone)
	s.Setup = setup
	return s
}

// A setup is prepared once as an image, which later sandboxes start from;
// a second prepare is up to date; a change of the commands makes another.
func TestSetupKeptAsImage(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	dockertest.RemoveNewImages(t, cli, "amelia-setup")
	p := newProvider(t)
	line := "set up " + nonce(t)
	s := setupSpec(t, appendLine(line), sdk.SetupCommand{Name: "second", Argv: []string{"touch", "second"}})

	first, err := p.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if first.UpToDate || !strings.HasPrefix(first.Ref, "amelia-setup:") {
		t.Fatalf("first prepare: %+v, want a new amelia-setup image", first)
	}
	img, err := cli.ImageInspect(t.Context(), first.Ref)
	if err != nil || img.Config.Labels["amelia.setup"] != strings.TrimPrefix(first.Ref, "amelia-setup:") {
		t.Fatalf("the prepared image %s: %v %v", first.Ref, err, img.Config)
	}
	again, err := p.Prepare(t.Context(), s)
	if err != nil || !again.UpToDate || again.Ref != first.Ref {
		t.Errorf("second prepare: %+v %v, want %s up to date", again, err, first.Ref)
	}

	sb := up(t, p, s)
	if sb.Details["setup"] != first.Ref {
		t.Errorf("the sandbox's details %v do not name its setup %s", sb.Details, first.Ref)
	}
	if got := run(t, p, sb.Ref, "", "sh", "-c", `cat "$HOME/setup.log"; test -e "$HOME/second" && echo second-ran`); got != line+"\nsecond-ran\n" {
		t.Errorf("the sandbox's ~/setup.log and ~/second:\n%q\nwant the line once and the second command's file", got)
	}
	if got := run(t, p, sb.Ref, "", "id", "-un"); strings.TrimSpace(got) != "amelia" {
		t.Errorf("the sandbox runs commands as %q", got)
	}

	// Changed commands: a sandbox started without a prepare prepares
	// them itself, into another image.
	changed := setupSpec(t, appendLine(line+" changed"))
	csb := up(t, p, changed)
	if csb.Details["setup"] == "" || csb.Details["setup"] == first.Ref {
		t.Errorf("a sandbox of changed commands was made from %q, want a new setup image", csb.Details["setup"])
	}
	if got := run(t, p, csb.Ref, "", "cat", "/home/amelia/setup.log"); got != line+" changed\n" {
		t.Errorf("the changed setup's sandbox holds %q", got)
	}
	other, err := p.Prepare(t.Context(), changed)
	if err != nil || !other.UpToDate || other.Ref != csb.Details["setup"] {
		t.Errorf("prepare of the changed commands after the sandbox made them: %+v %v, want %s up to date", other, err, csb.Details["setup"])
	}
}

// Two prepares at once of one setup run it once; the other waits and
// finds it up to date.
func TestSetupPreparedOnceAtATime(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveNewImages(t, cli, "amelia-setup")
	p1, p2 := newProvider(t), newProvider(t)
	s := setupSpec(t, appendLine(nonce(t)), sdk.SetupCommand{Argv: []string{"sleep", "1"}})
	var wg sync.WaitGroup
	res := make([]sdk.Prepared, 2)
	errs := make([]error, 2)
	for i, p := range []sdk.Preparer{p1, p2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = p.Prepare(t.Context(), s)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("prepares: %v, %v", errs[0], errs[1])
	}
	if res[0].Ref != res[1].Ref || res[0].UpToDate == res[1].UpToDate {
		t.Errorf("two prepares at once: %+v and %+v, want one made and one up to date, of one image", res[0], res[1])
	}
}

// A failing command fails the prepare with an error naming it and its
// exit code, and leaves neither an image nor a container.
func TestSetupFailureKeepsNothing(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveNewImages(t, cli, "amelia-setup")
	p := newProvider(t)
	before := setupImages(t, cli)
	s := setupSpec(t, appendLine(nonce(t)), sdk.SetupCommand{Name: "install", Argv: []string{"sh", "-c", "echo the install broke >&2; exit 7"}})
	_, err := p.Prepare(t.Context(), s)
	var se *sdk.SetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "setup command 2 (install) exited 7") || !strings.Contains(err.Error(), "the install broke") {
		t.Fatalf("a failing setup: %v, want an error naming command 2 (install), exit 7, and its output", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the error is not one line: %q", err)
	}
	if after := setupImages(t, cli); after != before {
		t.Errorf("amelia-setup images: %d before, %d after a failed setup", before, after)
	}
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("name", "amelia-setup-")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		t.Errorf("a setup container is left: %v (%s)", c.Names, c.State)
	}
	// A sandbox of that setup does not start either, and leaves nothing.
	if _, err := p.EnsureRunning(t.Context(), s); !errors.As(err, &se) {
		t.Errorf("EnsureRunning with a failing setup: %v", err)
	}
	if _, err := p.HealthCheck(t.Context(), s.SandboxRef); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("a sandbox is there after its setup failed: %v", err)
	}
}

func setupImages(t *testing.T, cli *client.Client) int {
	list, err := cli.ImageList(t.Context(), client.ImageListOptions{Filters: make(client.Filters).Add("reference", "amelia-setup")})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
