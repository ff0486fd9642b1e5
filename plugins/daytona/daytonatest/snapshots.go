package daytonatest

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// Snapshots, as Daytona's API keeps them (snapshot.controller.ts,
// snapshot.service.ts, snapshot.manager.ts): POST /snapshots with build
// info makes a pending snapshot, which is built in the background
// (building) and becomes active, or build_failed with the builder's error
// as its errorReason; a name is the organization's once (409); GET finds
// one by name or id, DELETE removes one by id. The fake builds the
// Dockerfile with the real engine (its sandboxes are containers); a
// sandbox created from an active snapshot runs its image. The snapshots
// of Options.Snapshots are Daytona's general ones: GET finds them,
// active, with their image as imageName.

// snapshotName is what Daytona takes as a snapshot's name
// (IMAGE_NAME_REGEX).
var snapshotName = regexp.MustCompile(`^[a-zA-Z0-9_.\-:]+(/[a-zA-Z0-9_.\-:]+)*(@sha256:[a-f0-9]{64})?$`)

type snapshot struct {
	id, name    string
	state       api.SnapshotState
	errorReason string
	imageName   string
	image       string // what its sandboxes run
	buildInfo   *api.BuildInfo
	general     bool
	createdAt   time.Time
}

// snapshotView is a snapshot as the API answers it (SnapshotDto): every
// required property, null where Daytona has none.
type snapshotView struct {
	ID              string            `json:"id"`
	OrganizationID  string            `json:"organizationId,omitempty"`
	General         bool              `json:"general"`
	Name            string            `json:"name"`
	ImageName       string            `json:"imageName,omitempty"`
	State           api.SnapshotState `json:"state"`
	Size            *float64          `json:"size"`
	Entrypoint      []string          `json:"entrypoint"`
	CPU             float64           `json:"cpu"`
	GPU             float64           `json:"gpu"`
	Mem             float64           `json:"mem"`
	Disk            float64           `json:"disk"`
	ErrorReason     *string           `json:"errorReason"`
	CreatedAt       time.Time         `json:"createdAt"`
	UpdatedAt       time.Time         `json:"updatedAt"`
	LastUsedAt      *time.Time        `json:"lastUsedAt"`
	BuildInfo       *api.BuildInfo    `json:"buildInfo,omitempty"`
	Ref             string            `json:"ref,omitempty"`
	SourceSandboxID *string           `json:"sourceSandboxId"`
	SandboxClass    string            `json:"sandboxClass,omitempty"`
}

func (s *snapshot) view(org string) snapshotView {
	v := snapshotView{
		ID: s.id, General: s.general, Name: s.name, ImageName: s.imageName, State: s.state,
		CPU: defaultCPU, Mem: defaultMemory, Disk: defaultDisk,
		CreatedAt: s.createdAt, UpdatedAt: s.createdAt, BuildInfo: s.buildInfo, Ref: s.image,
		SandboxClass: api.ClassContainer,
	}
	if !s.general {
		v.OrganizationID = org
	}
	if s.errorReason != "" {
		r := s.errorReason
		v.ErrorReason = &r
	}
	return v
}

// snapshotLocked finds a snapshot by name (the organization's, then a
// general one) or id. The caller holds f.mu.
func (f *Fake) snapshotLocked(idOrName string) *snapshot {
	for _, s := range f.snaps {
		if s.name == idOrName || s.id == idOrName {
			return s
		}
	}
	if img, ok := f.opts.Snapshots[idOrName]; ok {
		return &snapshot{id: "general-" + idOrName, name: idOrName, state: api.SnapshotActive, imageName: img, image: img, general: true}
	}
	return nil
}

func (f *Fake) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshot
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body: "+err.Error())
		return
	}
	switch {
	case req.BuildInfo != nil && req.ImageName != "":
		writeError(w, http.StatusBadRequest, "Cannot specify an image name when using a build info entry")
		return
	case req.BuildInfo == nil:
		// Pulling an image needs a registry: the fake builds only.
		writeError(w, http.StatusBadRequest, "daytonatest makes snapshots from build info only")
		return
	case !snapshotName.MatchString(req.Name):
		writeError(w, http.StatusBadRequest, "Invalid snapshot name format. May contain letters, digits, dots, colons, and dashes")
		return
	case strings.TrimSpace(req.BuildInfo.DockerfileContent) == "":
		writeError(w, http.StatusBadRequest, "dockerfileContent should not be empty")
		return
	}
	now := time.Now().UTC()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	for _, s := range f.snaps {
		if s.name == req.Name {
			writeError(w, http.StatusConflict, fmt.Sprintf("Snapshot with name %q already exists for this organization", req.Name))
			return
		}
	}
	id := newUUID()
	s := &snapshot{
		id: id, name: req.Name, state: api.SnapshotPending, createdAt: now,
		image:     "daytonatest-snapshot:" + strings.ReplaceAll(id, "-", ""),
		buildInfo: &api.BuildInfo{DockerfileContent: req.BuildInfo.DockerfileContent, ContextHashes: req.BuildInfo.ContextHashes, CreatedAt: now, UpdatedAt: now},
	}
	s.buildInfo.SnapshotRef = s.image
	if f.snaps == nil {
		f.snaps = map[string]*snapshot{}
	}
	f.snaps[id] = s
	f.wg.Add(1)
	go f.buildSnapshot(s)
	writeJSON(w, http.StatusOK, s.view(f.org))
}

// buildSnapshot takes a pending snapshot through building to active or
// build_failed, as Daytona's snapshot manager does.
func (f *Fake) buildSnapshot(s *snapshot) {
	defer f.wg.Done()
	f.mu.Lock()
	s.state = api.SnapshotBuilding
	dockerfile := s.buildInfo.DockerfileContent
	f.mu.Unlock()
	err := f.backend.build(f.ctx, s.image, dockerfile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snaps[s.id] != s {
		return // deleted meanwhile
	}
	if err != nil {
		s.state, s.errorReason = api.SnapshotBuildFailed, err.Error()
		return
	}
	s.state = api.SnapshotActive
}

func (f *Fake) getSnapshot(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	s := f.snapshotLocked(r.PathValue("id"))
	var v snapshotView
	if s != nil {
		v = s.view(f.org)
	}
	f.mu.Unlock()
	if s == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listSnapshots is GET /snapshots (getAllSnapshots): the organization's
// snapshots, oldest first, a page (default 1) of limit (default 10) at a
// time, as PaginatedSnapshotsDto.
func (f *Fake) listSnapshots(w http.ResponseWriter, r *http.Request) {
	num := func(name string, def int) (int, bool) {
		v := r.URL.Query().Get(name)
		if v == "" {
			return def, true
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 1
	}
	page, ok1 := num("page", 1)
	limit, ok2 := num("limit", 10)
	if !ok1 || !ok2 {
		writeError(w, http.StatusBadRequest, "page and limit must be positive numbers")
		return
	}
	f.mu.Lock()
	var all []snapshotView
	for _, s := range f.snaps {
		all = append(all, s.view(f.org))
	}
	f.mu.Unlock()
	slices.SortFunc(all, func(a, b snapshotView) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	pages := (len(all) + limit - 1) / limit
	items := []snapshotView{}
	if from := (page - 1) * limit; from < len(all) {
		items = all[from:min(from+limit, len(all))]
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "total": len(all), "page": page, "totalPages": pages})
}

// AgeSnapshot makes the snapshot name (one made through the API) as if
// it was created at t: for tests of what tidies old snapshots, which
// cannot wait for them to age.
func (f *Fake) AgeSnapshot(name string, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.snaps {
		if s.name == name {
			s.createdAt = t
			return true
		}
	}
	return false
}

// deleteSnapshot removes a snapshot by its id (ParseUUIDPipe: a name is
// 400), and its image.
func (f *Fake) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !uuidRule.MatchString(id) {
		writeError(w, http.StatusBadRequest, "Validation failed (uuid is expected)")
		return
	}
	f.mu.Lock()
	s, ok := f.snaps[id]
	delete(f.snaps, id)
	f.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", id))
		return
	}
	f.backend.removeImage(r.Context(), s.image)
	w.WriteHeader(http.StatusOK)
}

var uuidRule = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Snapshots are the names of the snapshots made through the API, and
// their states.
func (f *Fake) Snapshots() map[string]api.SnapshotState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]api.SnapshotState{}
	for _, s := range f.snaps {
		out[s.name] = s.state
	}
	return out
}

// build builds dockerfile (a context of it alone) as tag with the
// engine's classic builder, labelled as the fake's, removing the
// intermediate containers whatever happens. Its error is the builder's.
func (d *dockerBackend) build(ctx context.Context, tag, dockerfile string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, _ = io.WriteString(tw, dockerfile)
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := d.cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		Version: build.BuilderV1,
		Labels:  map[string]string{labelKey: d.label},
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the builder's output: %w", err)
		}
		if m.Error != nil {
			return errors.New(strings.TrimSpace(m.Error.Message))
		}
	}
}

func (d *dockerBackend) removeImage(ctx context.Context, tag string) {
	if _, err := d.cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.logger.Warn("daytonatest: remove a snapshot's image", "image", tag, "error", err)
	}
}

// removeImages removes every image the fake built.
func (d *dockerBackend) removeImages(ctx context.Context) error {
	list, err := d.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", labelKey+"="+d.label)})
	if err != nil {
		return fmt.Errorf("list the fake's images: %w", err)
	}
	for _, img := range list.Items {
		if _, err := d.cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove image %s: %w", img.ID, err)
		}
	}
	return nil
}

func (h *hostBackend) build(context.Context, string, string) error {
	return errors.New("daytonatest's host backend builds no images: use the docker backend")
}

func (h *hostBackend) removeImage(context.Context, string) {}
