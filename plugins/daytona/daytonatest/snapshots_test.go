package daytonatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// waitSnapshot polls a snapshot until it leaves pending and building,
// and returns it and the states it went through.
func (e *testEnv) waitSnapshot(t *testing.T, name string) (api.Snapshot, []api.SnapshotState) {
	t.Helper()
	var seen []api.SnapshotState
	for {
		s, err := e.c.GetSnapshot(t.Context(), name)
		if err != nil {
			t.Fatalf("get snapshot %s: %v", name, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != s.State {
			seen = append(seen, s.State)
		}
		if s.State != api.SnapshotPending && s.State != api.SnapshotBuilding {
			return s, seen
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("snapshot %s still %s", name, s.State)
		case <-e.f.ctx.Done():
			t.Fatal("the fake stopped")
		default:
		}
	}
}

// Snapshots made from build info, as Daytona's API makes them: pending,
// building, active (or build_failed with the builder's error); a name
// once (409); found by name or id; deleted by id only; a sandbox made
// from one runs what its Dockerfile built. Every exchange is checked
// against Daytona's OpenAPI file.
func TestSnapshots(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{Docker: dockertest.Engine(t), Snapshots: map[string]string{"base-1.0": image.TestBase}})
	e := newEnv(t, f)
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	df := "FROM " + image.TestBase + "\nRUN [\"sh\", \"-c\", \"echo " + nonce + " > /made\"]\n"

	created, err := e.c.CreateSnapshot(ctx, api.CreateSnapshot{Name: "setup-" + nonce, BuildInfo: &api.CreateBuildInfo{DockerfileContent: df}})
	if err != nil || created.State != api.SnapshotPending || created.ID == "" {
		t.Fatalf("create snapshot: %+v %v", created, err)
	}
	snap, seen := e.waitSnapshot(t, "setup-"+nonce)
	if snap.State != api.SnapshotActive || !slices.Contains(seen, api.SnapshotBuilding) && seen[0] != api.SnapshotActive {
		t.Fatalf("snapshot went %v, ended %+v", seen, snap)
	}
	if byID, err := e.c.GetSnapshot(ctx, created.ID); err != nil || byID.Name != "setup-"+nonce || byID.BuildInfo == nil || byID.BuildInfo.DockerfileContent != df {
		t.Errorf("get by id: %+v %v", byID, err)
	}
	if _, err := e.c.CreateSnapshot(ctx, api.CreateSnapshot{Name: "setup-" + nonce, BuildInfo: &api.CreateBuildInfo{DockerfileContent: df}}); api.StatusOf(err) != 409 {
		t.Errorf("a second snapshot of the name: %v, want 409", err)
	}
	if general, err := e.c.GetSnapshot(ctx, "base-1.0"); err != nil || general.State != api.SnapshotActive || !general.General || general.ImageName != image.TestBase {
		t.Errorf("a general snapshot: %+v %v", general, err)
	}

	sb, _ := e.started(t, api.CreateSandbox{Snapshot: "setup-" + nonce})
	res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "cat /made"})
	if err != nil || strings.TrimSpace(res.Result) != nonce || sb.Snapshot != "setup-"+nonce {
		t.Errorf("the snapshot's sandbox: %+v %v (snapshot %q)", res, err, sb.Snapshot)
	}

	failed, err := e.c.CreateSnapshot(ctx, api.CreateSnapshot{Name: "broken-" + nonce, BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM " + image.TestBase + "\nRUN [\"sh\", \"-c\", \"exit 7\"]\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := e.waitSnapshot(t, "broken-"+nonce); s.State != api.SnapshotBuildFailed || !strings.Contains(s.ErrorReason, "returned a non-zero code: 7") {
		t.Errorf("a failing build: %+v", s)
	}
	if _, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Snapshot: "broken-" + nonce}); api.StatusOf(err) != 400 || !strings.Contains(err.Error(), "is build_failed") {
		t.Errorf("a sandbox of a failed snapshot: %v, want 400", err)
	}
	if st, _, _ := e.raw(t, "DELETE", f.URL()+"/snapshots/broken-"+nonce, nil, nil); st != 400 {
		t.Errorf("delete by name: %d, want 400 (a uuid is expected)", st)
	}
	if err := e.c.DeleteSnapshot(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.GetSnapshot(ctx, failed.ID); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("get of a deleted snapshot: %v", err)
	}
	if _, err := e.c.CreateSnapshot(ctx, api.CreateSnapshot{Name: "bad name", BuildInfo: &api.CreateBuildInfo{DockerfileContent: df}}); api.StatusOf(err) != 400 {
		t.Errorf("a bad name: %v", err)
	}
	if err := e.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checked := e.conf.checked()
	for _, op := range []string{"createSnapshot", "getSnapshot", "removeSnapshot"} {
		if checked[op] == 0 {
			t.Errorf("operation %s was not checked against the spec", op)
		}
	}
}
