package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Image labels and names.
const (
	// labelImageHash is on the sandbox image and its containers: the
	// sha256 of what the image was built from.
	labelImageHash = "amelia.image-hash"

	sandboxRepo      = "amelia-sandbox"
	devcontainerRepo = "amelia-devcontainer"
	// userDockerfile is the name a profile's Dockerfile has in its build
	// context, wherever it lives on the host.
	userDockerfile = ".amelia.Dockerfile"
	// pruneAge is how old another sandbox image must be before a new build
	// removes it: a younger one may be about to start a container.
	pruneAge = 24 * time.Hour
)

// imagePlan is what a profile's sandbox image is built from, and the tag
// that names exactly that.
type imagePlan struct {
	ready    string // docker.image: used as it is
	tag      string // amelia-sandbox:<hash>
	hash     string
	base     string // BASE_IMAGE; the devcontainer's tag when there is one
	packages string // PACKAGES, space-separated
	worker   string // the host's amelia-worker for the engine's architecture
	user     *userImage
}

// userImage is the image a profile's own Dockerfile builds.
type userImage struct {
	dockerfile, context, tag string
	args                     map[string]*string
}

// plan works out the profile's image without building anything.
func (p *Provider) plan(ctx context.Context, e *engine, set Settings) (imagePlan, error) {
	if set.Image != "" {
		return imagePlan{ready: set.Image, tag: set.Image}, nil
	}
	arch, err := e.architecture(ctx)
	if err != nil {
		return imagePlan{}, err
	}
	worker, err := workerbin.Find(p.opts.WorkerDirs, arch)
	if err != nil {
		return imagePlan{}, fmt.Errorf("build the sandbox image for the %s engine at %s: %w", arch, e.host, err)
	}
	workerSum, _, err := p.sums.Sum(worker)
	if err != nil {
		return imagePlan{}, err
	}
	pl := imagePlan{base: set.BaseImage, worker: worker}
	if set.Packages != nil {
		pl.packages = strings.Join(*set.Packages, " ")
	}
	h := sha256.New()
	fmt.Fprintf(h, "amelia sandbox image\x00%s\x00worker %s\x00", image.Dockerfile, workerSum)
	if set.Dockerfile != "" {
		sum := sha256.New()
		if err := writeUserContext(sum, set.Dockerfile, set.BuildContext); err != nil {
			return imagePlan{}, err
		}
		u := &userImage{dockerfile: set.Dockerfile, context: set.BuildContext, args: map[string]*string{}}
		for _, k := range slices.Sorted(maps.Keys(set.BuildArgs)) {
			v := set.BuildArgs[k]
			u.args[k] = &v
			fmt.Fprintf(sum, "\x00arg %s=%s", k, v)
		}
		userHash := hex.EncodeToString(sum.Sum(nil))
		u.tag = devcontainerRepo + ":" + userHash[:16]
		pl.user, pl.base = u, u.tag
	}
	fmt.Fprintf(h, "base %s\x00packages %s\x00", pl.base, pl.packages)
	pl.hash = hex.EncodeToString(h.Sum(nil))
	pl.tag = sandboxRepo + ":" + pl.hash[:16]
	return pl, nil
}

// ensureImage returns the image the profile's containers run, building it
// when the engine does not have it: on a profile's first use, and whenever
// the Dockerfile, the base or the worker changed. A ready image
// (docker.image) is pulled when it is missing.
func (p *Provider) ensureImage(ctx context.Context, e *engine, set Settings) (imagePlan, error) {
	pl, err := p.plan(ctx, e, set)
	if err != nil {
		return pl, err
	}
	if pl.ready != "" {
		return pl, p.pullMissing(ctx, e, pl)
	}
	_, err = p.buildIfMissing(ctx, e, pl, false, &logWriter{log: p.opts.Logger})
	return pl, err
}

// buildIfMissing builds the plan's image unless the engine has it (with
// noCache, always) and reports whether it built.
func (p *Provider) buildIfMissing(ctx context.Context, e *engine, pl imagePlan, noCache bool, progress io.Writer) (bool, error) {
	missing := func() (bool, error) {
		ok, err := hasImage(ctx, e, pl.tag)
		return noCache || !ok, err
	}
	if build, err := missing(); err != nil || !build {
		return false, err
	}
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	// Another EnsureRunning may have built it while this one waited.
	if build, err := missing(); err != nil || !build {
		return false, err
	}
	return true, p.build(ctx, e, pl, noCache, progress)
}

// hasImage reports whether the engine has the image ref.
func hasImage(ctx context.Context, e *engine, ref string) (bool, error) {
	_, err := e.cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, e.wrap(err, "inspect image "+ref)
}

// missing says which image the plan needs that the engine lacks: the ready
// image (docker.image) when the plan has one, else the base Amelia's
// sandbox image is built FROM. Whether the sandbox image itself is built
// is buildIfMissing's question; a profile's own Dockerfile names its base
// itself, and the builder pulls that. ref is empty when nothing is
// missing.
func missing(ctx context.Context, e *engine, pl imagePlan) (ref string, err error) {
	switch {
	case pl.ready != "":
		ref = pl.ready
	case pl.user != nil:
		return "", nil
	default:
		ref = pl.base
	}
	if ok, err := hasImage(ctx, e, ref); err != nil || ok {
		return "", err
	}
	return ref, nil
}

// pullMissing pulls the image the plan needs that the engine lacks. A base
// that cannot be pulled is a *missingBase; a ready image, an error matching
// sdk.ErrNotFound.
func (p *Provider) pullMissing(ctx context.Context, e *engine, pl imagePlan) error {
	ref, err := missing(ctx, e, pl)
	if err != nil || ref == "" {
		return err
	}
	err = p.pull(ctx, e, ref)
	switch {
	case err == nil:
		return nil
	case pl.ready == "":
		return &missingBase{base: ref, host: e.host, cause: err}
	}
	return sdk.Errorf(sdk.ErrNotFound, "docker.image %q is not on the engine at %s and could not be pulled: %v", ref, e.host, err)
}

// pull pulls the image ref onto the engine. Its error is the engine's, for
// the caller to say which image could not be had.
func (p *Provider) pull(ctx context.Context, e *engine, ref string) error {
	p.opts.Logger.Info("pulling an image the engine lacks", "image", ref, "engine", e.host)
	resp, err := e.cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	return resp.Wait(ctx)
}

// missingBase is a base image that is neither on the engine nor pullable.
// It matches sdk.ErrNotFound.
type missingBase struct {
	base, host string
	cause      error // why it could not be pulled; nil when not tried
	// profile, when known, names the environment variable that would set
	// the base for one shell.
	profile string
}

func (m *missingBase) Error() string {
	what := "and cannot be pulled (" + strings.Join(strings.Fields(fmt.Sprint(m.cause)), " ") + ")"
	if m.cause == nil {
		what = "(the first start would pull it)"
	}
	msg := fmt.Sprintf("the base image %s is not on the Docker engine at %s %s: pull it, or set docker.base_image to one the engine has (docker images lists them; amelia init picks one, and amelia init --bootstrap makes %s without a registry)",
		m.base, m.host, what, image.TestBase)
	if envName.MatchString(m.profile) {
		msg += fmt.Sprintf("; for one shell, AMELIA_PROFILES__%s__SANDBOX__DOCKER__BASE_IMAGE=%s", strings.ToUpper(m.profile), image.TestBase)
	}
	return msg
}

func (m *missingBase) Is(target error) bool { return target == sdk.ErrNotFound }

// envName matches a profile name that can be part of an environment
// variable's name.
var envName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// build builds the plan's image (the devcontainer first, when there is
// one), writing the build's output to progress.
func (p *Provider) build(ctx context.Context, e *engine, pl imagePlan, noCache bool, progress io.Writer) error {
	if u := pl.user; u != nil {
		ok, err := hasImage(ctx, e, u.tag)
		if err != nil {
			return err
		}
		if !ok || noCache {
			fmt.Fprintf(progress, "Building %s from %s\n", u.tag, u.dockerfile)
			err := e.runBuild(ctx, u.tag, func(w io.Writer) error { return writeUserContext(w, u.dockerfile, u.context) },
				client.ImageBuildOptions{
					Dockerfile: userDockerfile,
					NoCache:    noCache,
					BuildArgs:  u.args,
				}, progress)
			if err != nil {
				return err
			}
		}
	} else if err := p.pullMissing(ctx, e, pl); err != nil {
		return err
	}
	with := ""
	if pl.packages != "" {
		with = " with " + pl.packages
	}
	fmt.Fprintf(progress, "Building %s FROM %s%s\n", pl.tag, pl.base, with)
	base, packages := pl.base, pl.packages
	err := e.runBuild(ctx, pl.tag, func(w io.Writer) error { return writeSandboxContext(w, pl.worker) },
		client.ImageBuildOptions{
			Dockerfile: "Dockerfile",
			NoCache:    noCache,
			BuildArgs:  map[string]*string{image.BaseArg: &base, image.PackagesArg: &packages},
			Labels:     map[string]string{labelImageHash: pl.hash},
		}, progress)
	if err != nil {
		return err
	}
	p.pruneSuperseded(ctx, e, pl)
	return nil
}

// runBuild sends the context that write produces to the engine's classic
// builder, tags the result, and streams its output to progress. A failed
// step becomes an error naming the step, with its output.
func (e *engine) runBuild(ctx context.Context, tag string, write func(io.Writer) error, opts client.ImageBuildOptions, progress io.Writer) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	defer pr.Close()
	opts.Tags = []string{tag}
	opts.Remove, opts.ForceRemove = true, true
	opts.Version = build.BuilderV1 // BuildKit needs a session the API alone does not give
	resp, err := e.cli.ImageBuild(ctx, pr, opts)
	if err != nil {
		return e.wrap(err, "build image "+tag)
	}
	defer resp.Body.Close()
	return readBuildOutput(resp.Body, tag, progress)
}

// readBuildOutput follows the builder's JSON messages until the build ends.
func readBuildOutput(r io.Reader, tag string, progress io.Writer) error {
	var step string      // the step being run: "Step 3/9 : RUN ..."
	var stepOut []string // its output so far
	const keepLines = 40 // of a failed step's output, in the error
	dec := json.NewDecoder(r)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("build image %s: read the builder's output: %w", tag, err)
		}
		if m.Error != nil {
			return buildError(tag, step, m.Error.Message, stepOut)
		}
		if m.Stream == "" {
			continue
		}
		_, _ = io.WriteString(progress, m.Stream)
		for _, line := range strings.Split(strings.TrimRight(m.Stream, "\n"), "\n") {
			if strings.HasPrefix(line, "Step ") {
				step, stepOut = line, nil
				continue
			}
			if strings.TrimSpace(line) != "" {
				stepOut = append(stepOut, line)
				if len(stepOut) > keepLines {
					stepOut = stepOut[1:]
				}
			}
		}
	}
}

// buildError says which step failed and how, with the step's output.
func buildError(tag, step, msg string, out []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "build image %s: ", tag)
	if step != "" {
		fmt.Fprintf(&b, "%s: ", clip(step))
	}
	b.WriteString(strings.TrimSpace(msg))
	if strings.Contains(step, " : FROM ") || strings.Contains(msg, "pull access denied") || strings.Contains(msg, "no such host") {
		b.WriteString(" — is the base image on the engine? Without a registry, make one with amelia init --bootstrap and set docker.base_image: " + image.TestBase)
	}
	for _, line := range out {
		b.WriteString("\n    ")
		b.WriteString(line)
	}
	return errors.New(b.String())
}

// pruneSuperseded removes the other sandbox images once they are a day old:
// those of older amelia versions and bases. One a container still uses stays
// (the engine refuses, and the refusal is ignored); a profile whose image
// went is built again on its next start.
func (p *Provider) pruneSuperseded(ctx context.Context, e *engine, pl imagePlan) {
	list, err := e.cli.ImageList(ctx, client.ImageListOptions{
		Filters: make(client.Filters).Add("label", labelImageHash).Add("reference", sandboxRepo),
	})
	if err != nil {
		return
	}
	for _, img := range list.Items {
		if time.Since(time.Unix(img.Created, 0)) < pruneAge || img.Labels[labelImageHash] == pl.hash {
			continue
		}
		for _, t := range img.RepoTags {
			if _, err := e.cli.ImageRemove(ctx, t, client.ImageRemoveOptions{PruneChildren: true}); err == nil {
				p.opts.Logger.Info("removed an older sandbox image", "image", t)
			}
		}
	}
}

// writeSandboxContext writes the build context of Amelia's image: the
// Dockerfile, the worker and its stamp (workerbin.Stamp), which the image
// holds beside it, owned by root, so that runs need not hash the worker.
func writeSandboxContext(w io.Writer, worker string) error {
	tw := tar.NewWriter(w)
	if err := addFile(tw, "Dockerfile", 0o644, bytes.NewReader(image.Dockerfile), int64(len(image.Dockerfile))); err != nil {
		return err
	}
	f, err := os.Open(worker)
	if err != nil {
		return fmt.Errorf("worker binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("worker binary: %w", err)
	}
	h := sha256.New()
	if err := addFile(tw, image.WorkerFile, 0o755, io.TeeReader(f, h), fi.Size()); err != nil {
		return err
	}
	stamp := workerbin.Stamp(hex.EncodeToString(h.Sum(nil)), fi.Size())
	if err := addFile(tw, image.WorkerFile+workerbin.StampSuffix, 0o644, bytes.NewReader(stamp), int64(len(stamp))); err != nil {
		return err
	}
	return tw.Close()
}

// writeUserContext writes a profile's build context: the directory dir
// (less what its .dockerignore excludes), in a stable order with times and
// owners left out, so equal content gives equal bytes, and the Dockerfile
// as userDockerfile. Its sha256 names the image it builds.
func writeUserContext(w io.Writer, dockerfile, dir string) error {
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		return sdk.Errorf(sdk.ErrInvalid, "docker.dockerfile: %v", err)
	}
	var pm *patternmatcher.PatternMatcher
	if f, err := os.Open(filepath.Join(dir, ".dockerignore")); err == nil {
		patterns, err := ignorefile.ReadAll(f)
		f.Close()
		if err == nil {
			pm, err = patternmatcher.New(patterns)
		}
		if err != nil {
			return sdk.Errorf(sdk.ErrInvalid, "docker.build_context: %s/.dockerignore: %v", dir, err)
		}
	}
	tw := tar.NewWriter(w)
	if err := addFile(tw, userDockerfile, 0o644, bytes.NewReader(df), int64(len(df))); err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if pm != nil {
			if skip, _ := pm.MatchesOrParentMatches(rel); skip {
				if d.IsDir() && !pm.Exclusions() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			return tw.WriteHeader(hdr)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case d.Type().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return addFile(tw, rel, int64(fi.Mode().Perm()), f, fi.Size())
		}
		return nil // sockets, devices: not build material
	})
	if err != nil {
		return fmt.Errorf("docker.build_context %s: %w", dir, err)
	}
	return tw.Close()
}

// addFile writes one regular file to a context tar.
func addFile(tw *tar.Writer, name string, mode int64, r io.Reader, size int64) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while it was read", name)
	}
	return err
}

// clip shortens a builder line for a message: a step's RUN can be a
// screenful.
func clip(line string) string {
	const most = 120
	if len(line) <= most {
		return line
	}
	return line[:most] + "…"
}

// logWriter turns build output into log records: step lines at info,
// the rest at debug.
type logWriter struct {
	log  *slog.Logger
	part []byte
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimSpace(string(l.part[:i]))
		l.part = l.part[i+1:]
		switch {
		case line == "":
		case strings.HasPrefix(line, "Step "), strings.HasPrefix(line, "Building "):
			l.log.Info("image build: " + clip(line))
		default:
			l.log.Debug("image build: " + line)
		}
	}
}
