package daytona_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func appendLine(line string) sdk.SetupCommand {
	return sdk.SetupCommand{Argv: []string{"sh", "-c", `echo "$1" >> "$HOME/setup.log"`, "sh", line}}
}

func nonce() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// A setup becomes a snapshot built from a Dockerfile (POST /snapshots),
// once: a second prepare finds it active; a sandbox is created from it
// and holds the setup's result once; changed commands make another.
func TestSetupKeptAsSnapshot(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, map[string]any{"image": image.TestBase})
	p := newProvider(t)
	line := "set up " + nonce()
	s := spec("setup", cfg, sdk.NetworkNone)
	s.Setup = []sdk.SetupCommand{appendLine(line), {Name: "second", Argv: []string{"touch", "second"}}}

	first, err := p.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if first.UpToDate || !strings.HasPrefix(first.Ref, "amelia-setup-") || f.Snapshots()[first.Ref] != api.SnapshotActive {
		t.Fatalf("first prepare: %+v; the fake's snapshots: %v", first, f.Snapshots())
	}
	posts := requests(f, "POST", "/api/snapshots")
	if len(posts) != 1 || !strings.Contains(string(posts[0].Body), `FROM `+image.TestBase) || !strings.Contains(string(posts[0].Body), `RUN [\"env\",\"AMELIA_SETUP_STEP=1\"`) {
		t.Fatalf("POST /snapshots: %d requests, the first %s", len(posts), posts[0].Body)
	}
	again, err := newProvider(t).Prepare(t.Context(), s)
	if err != nil || !again.UpToDate || again.Ref != first.Ref || len(requests(f, "POST", "/api/snapshots")) != 1 {
		t.Errorf("second prepare: %+v %v, want %s up to date and no second POST", again, err, first.Ref)
	}

	sb, err := p.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Teardown(t.Context(), sb.Ref) })
	if sb.Details["setup"] != first.Ref {
		t.Errorf("the sandbox's details %v do not name its snapshot %s", sb.Details, first.Ref)
	}
	creates := requests(f, "POST", "/api/sandbox")
	if len(creates) != 1 || !strings.Contains(string(creates[0].Body), `"snapshot":"`+first.Ref+`"`) {
		t.Errorf("the sandbox was not created from the snapshot: %s", creates[0].Body)
	}
	out, st, err := run(t, p, sb.Ref, `cat "$HOME/setup.log"; test -e "$HOME/second" && echo second-ran; id -un`)
	if err != nil || st.Code != 0 || out != line+"\nsecond-ran\ndaytona\n" {
		t.Errorf("in the sandbox: %q %+v %v, want the line once, the second command's file, user daytona", out, st, err)
	}

	changed := s
	changed.Setup = []sdk.SetupCommand{appendLine(line + " changed")}
	other, err := p.Prepare(t.Context(), changed)
	if err != nil || other.UpToDate || other.Ref == first.Ref {
		t.Errorf("prepare of changed commands: %+v %v, want a new snapshot", other, err)
	}
}

// A command that fails fails the prepare naming it and its exit code;
// the snapshot whose build failed is deleted. The base is the image of
// the profile's daytona.snapshot.
func TestSetupFailureKeepsNoSnapshot(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{Snapshots: map[string]string{"base-1.0": image.TestBase}}, map[string]any{"snapshot": "base-1.0"})
	p := newProvider(t)
	s := spec("setup-fails", cfg, sdk.NetworkOpen)
	s.Setup = []sdk.SetupCommand{appendLine(nonce()), {Name: "install", Argv: []string{"sh", "-c", "exit 7"}}}
	_, err := p.Prepare(t.Context(), s)
	var se *sdk.SetupError
	if !errors.As(err, &se) || err.Error() != "setup command 2 (install) exited 7; nothing of the setup was kept" {
		t.Fatalf("a failing setup: %v", err)
	}
	if posts := requests(f, "POST", "/api/snapshots"); len(posts) != 1 || !strings.Contains(string(posts[0].Body), "FROM "+image.TestBase+`\n`) {
		t.Errorf("the setup's snapshot is not built on daytona.snapshot's image: %d POSTs %s", len(posts), posts)
	}
	if snaps := f.Snapshots(); len(snaps) != 0 {
		t.Errorf("snapshots left after a failed setup: %v", snaps)
	}
	deleted := 0
	for _, r := range f.Requests() {
		if r.Method == "DELETE" && strings.HasPrefix(r.Path, "/api/snapshots/") {
			deleted++
		}
	}
	if deleted != 1 {
		t.Errorf("%d DELETEs of the failed snapshot, want 1", deleted)
	}
	// Without a base to build on, the setup is refused.
	_, cfg2 := start(t, daytonatest.Options{}, nil)
	s2 := spec("setup-no-base", cfg2, sdk.NetworkOpen)
	s2.Setup = s.Setup[:1]
	if _, err := p.Prepare(t.Context(), s2); !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "set daytona.image") {
		t.Errorf("setup without daytona.image: %v", err)
	}
}
