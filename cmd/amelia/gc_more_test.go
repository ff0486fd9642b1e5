package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// gc on docker removes the setup images the profile prepared that it no
// longer starts from, once past retention: not its current one, not an
// old image of its current setup, not one a container was made from
// (said, with what to do), not another config file's. Every image the
// test plants is its own, labelled with its own config file: nothing
// of another test's is in gc's scope.
func TestGCPrunesOldSetupImagesOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	n := hex.EncodeToString(b)
	// A setup of this test's alone, so its image is the test's.
	h := newDockerHost(t, cli, withSetup(dockerSandbox("open"), `echo "gc `+n+`" >> "$HOME/setup.log"`))
	cfg := h.configPath()
	scope := make(client.Filters).Add("label", "amelia.setup.profile=e2e").Add("label", "amelia.setup.config="+cfg)
	t.Cleanup(func() {
		// The image prepare made, by its labels: this test's config file.
		list, err := cli.ImageList(context.Background(), client.ImageListOptions{Filters: scope})
		if err != nil {
			t.Errorf("list the test's setup images: %v", err)
			return
		}
		for _, img := range list.Items {
			dockertest.RemoveImageNow(t, cli, img.ID)
		}
	})
	if r := h.amelia(t, "sandbox", "prepare"); r.code != 0 {
		t.Fatalf("amelia sandbox prepare: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	list, err := cli.ImageList(t.Context(), client.ImageListOptions{Filters: scope})
	if err != nil || len(list.Items) != 1 || len(list.Items[0].RepoTags) != 1 {
		t.Fatalf("the setup image prepare made, labelled with the profile and config file: %+v %v", list.Items, err)
	}
	current, currentHash := list.Items[0].RepoTags[0], list.Items[0].Labels["amelia.setup"]

	plant := func(name, hash, config string) string {
		t.Helper()
		tag := "amelia-setup:gctest-" + n + "-" + name
		dockertest.BuildImage(t, cli, tag, "FROM "+image.TestBase+"\n"+
			`LABEL amelia.setup="`+hash+`" amelia.setup.profile="e2e" amelia.setup.config="`+config+`" amelia.created="2000-01-01T00:00:00Z"`+"\n")
		return tag
	}
	old := plant("old", "00000000"+n[:8], cfg)
	oldOfCurrent := plant("current", currentHash, cfg)
	inUse := plant("in-use", "11111111"+n[:8], cfg)
	otherConfig := plant("other", "22222222"+n[:8], "/elsewhere/config.yaml")
	ctr, err := cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{Name: "gctest-" + n, Config: &container.Config{Image: inUse, Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), ctr.ID, client.ContainerRemoveOptions{Force: true})
	})
	exists := func(ref string) bool {
		_, err := cli.ImageInspect(t.Context(), ref)
		return err == nil
	}

	dry := h.amelia(t, "gc", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "would remove setup "+old+" (of profile e2e, provider docker, ") ||
		!strings.Contains(dry.stdout, "left alone: setup "+inUse+" (of profile e2e, provider docker, ") ||
		!strings.Contains(dry.stdout, "a container was created from it") {
		t.Errorf("gc --dry-run: exit %d\nstdout: %s\nstderr: %s", dry.code, dry.stdout, dry.stderr)
	}
	for _, ref := range []string{current, old, oldOfCurrent, inUse, otherConfig} {
		if !exists(ref) {
			t.Errorf("gc --dry-run removed %s", ref)
		}
	}

	g := h.amelia(t, "gc")
	if g.code != 0 || !strings.Contains(g.stdout, "removed setup "+old+" (of profile e2e, provider docker, ") ||
		!strings.Contains(g.stdout, "left alone: setup "+inUse) {
		t.Errorf("gc: exit %d\nstdout: %s\nstderr: %s", g.code, g.stdout, g.stderr)
	}
	for _, ref := range []string{current, oldOfCurrent, otherConfig} {
		if strings.Contains(g.stdout, ref) {
			t.Errorf("gc names %s, which it must not touch:\n%s", ref, g.stdout)
		}
	}
	if exists(old) {
		t.Errorf("gc left the old setup image %s", old)
	}
	for _, ref := range []string{current, oldOfCurrent, inUse, otherConfig} {
		if !exists(ref) {
			t.Errorf("gc removed %s", ref)
		}
	}
	// The sandbox still starts from the current setup.
	if r := h.amelia(t, "sandbox", "prepare"); r.code != 0 || !strings.Contains(r.stdout, "is up to date") {
		t.Errorf("amelia sandbox prepare after gc: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// gc on docker removes the checkouts parked for reuse once they are past
// retention (they hold no work: only a delivered run's is parked), and a
// run after it makes its checkout anew.
func TestGCPrunesParkedCheckoutsOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("one.txt", "one\n")}},
		llmtest.Turn{Text: "Added one.txt."},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("two.txt", "two\n")}},
		llmtest.Turn{Text: "Added two.txt."},
	)
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
	if r := h.amelia(t, "run", "--workflow", "park-1", "Add one.txt."); r.code != 0 {
		t.Fatalf("the run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	// The parked checkouts, and the pool's records of them.
	parked := func() string {
		t.Helper()
		r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `cd /workspace/.amelia || exit 1
for e in parked/.park-*; do [ -e "$e" ] && echo "$e"; done
echo "records $(ls pool | grep -cx '[0-9]*')"`)
		if r.code != 0 {
			t.Fatalf("look into the sandbox: exit %d: %s", r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	before := parked()
	if !strings.HasPrefix(before, "parked/.park-") || !strings.HasSuffix(before, "\nrecords 1") {
		t.Fatalf("after a delivered run: %q, want one parked checkout and its record", before)
	}
	name := strings.TrimPrefix(strings.Split(before, "\n")[0], "parked/")
	if g := h.amelia(t, "gc"); g.code != 0 || strings.Contains(g.stdout, "parked checkout") {
		t.Errorf("gc of a young parked checkout: exit %d\nstdout: %s\nstderr: %s", g.code, g.stdout, g.stderr)
	}
	// Parked in 2001, by its record.
	age := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `cd /workspace/.amelia/pool && for f in $(ls | grep -x '[0-9]*'); do
	read -r park name key _ < "$f" && printf '%s %s %s 1000000000\n' "$park" "$name" "$key" > "$f"
done`)
	if age.code != 0 {
		t.Fatalf("age the pool's records: exit %d: %s", age.code, age.stderr)
	}

	dry := h.amelia(t, "gc", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "would remove parked checkout "+name+" in sandbox ") ||
		!strings.Contains(dry.stdout, "kept for reuse, with no work in it") {
		t.Errorf("gc --dry-run: exit %d\nstdout: %s\nstderr: %s", dry.code, dry.stdout, dry.stderr)
	}
	if got := parked(); got != before {
		t.Errorf("gc --dry-run changed the parked checkouts: %q, was %q", got, before)
	}
	g := h.amelia(t, "gc")
	if g.code != 0 || !strings.Contains(g.stdout, "removed parked checkout "+name+" in sandbox ") {
		t.Errorf("gc: exit %d\nstdout: %s\nstderr: %s", g.code, g.stdout, g.stderr)
	}
	if got := parked(); got != "records 0" {
		t.Errorf("after gc: %q, want no parked checkout and no record", got)
	}
	if r := h.amelia(t, "run", "--workflow", "park-2", "Add two.txt."); r.code != 0 {
		t.Fatalf("a run after gc: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if got := h.git(t, "show", "amelia/park-2:two.txt"); got != "two" {
		t.Errorf("two.txt on amelia/park-2: %q", got)
	}
}
