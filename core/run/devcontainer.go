package run

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/devcontainer"
	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// dockerProvider is the provider whose settings a devcontainer maps onto.
const dockerProvider = "docker"

// applyDevcontainer gives a docker profile's run the environment of its
// repository's devcontainer.json, as committed at the commit the run
// starts from (read on the host: a URL repository's is not read), unless
// the profile says docker.devcontainer: off or names its own environment
// (docker.image, docker.dockerfile). The file's image becomes
// docker.base_image, its Dockerfile (its context taken from the commit
// into a directory of the run's own) docker.dockerfile, build_context and
// build_args, its containerEnv docker.env (the profile's own env wins),
// and docker.devcontainer_file names it; Amelia's image goes on top
// without the toolchain unless docker.packages asks. Its commands run
// later, in the checkout (setUpCheckout). What it has that cannot be
// applied is said in one warning.
func (r *runner) applyDevcontainer(ctx context.Context, src source) error {
	p := r.req.Profile
	block := p.Sandbox.ProviderSettings()
	if p.Sandbox.Provider != dockerProvider || block["devcontainer"] == "off" {
		return nil
	}
	log := r.host.Logger
	if src.local == nil {
		log.Info("the devcontainer.json of a URL repository is not read: the profile's own image is used")
		return nil
	}
	var file string
	var data []byte
	for _, f := range devcontainer.Files {
		b, ok, err := src.local.ReadFile(ctx, src.commit, f)
		if err != nil {
			return fmt.Errorf("read the repository's %s: %w", f, err)
		}
		if ok {
			file, data = f, b
			break
		}
	}
	if file == "" {
		return nil
	}
	for _, own := range []string{"image", "dockerfile"} {
		if v, _ := block[own].(string); v != "" {
			log.Warn(fmt.Sprintf("the repository has %s, but profile %s names its own environment (docker.%s): the devcontainer is not used", file, p.Name, own))
			return nil
		}
	}
	c, err := devcontainer.Parse(file, data)
	if err != nil {
		return refuse(fmt.Errorf("the repository's %w; fix it, or set docker.devcontainer: off in profile %s to use the profile's own image", err, p.Name))
	}
	if !c.Environment() {
		log.Warn(fmt.Sprintf("%s names no image and no build.dockerfile (a compose file is not supported): the profile's own image is used", file))
		return nil
	}
	set := maps.Clone(block)
	if set == nil {
		set = map[string]any{}
	}
	delete(set, "base_image")
	if c.Image != "" {
		set["base_image"] = c.Image
	} else {
		dockerfile, context, err := r.extractBuild(ctx, src, c.Build)
		if err != nil {
			return err
		}
		set["dockerfile"], set["build_context"] = dockerfile, context
		if len(c.Build.Args) > 0 {
			args := map[string]any{}
			for k, v := range c.Build.Args {
				args[k] = v
			}
			set["build_args"] = args
		}
	}
	if len(c.ContainerEnv) > 0 {
		env := map[string]any{}
		for k, v := range c.ContainerEnv {
			env[k] = v
		}
		if own, ok := block["env"].(map[string]any); ok {
			maps.Copy(env, own)
		}
		set["env"] = env
	}
	set["devcontainer_file"] = c.File
	settings := maps.Clone(p.Sandbox.Settings)
	settings[dockerProvider] = set
	withDC := *p
	withDC.Sandbox.Settings = settings
	r.req.Profile = &withDC
	r.devcontainer = c

	var notes []string
	if c.RemoteUser != "" {
		notes = append(notes, fmt.Sprintf("remoteUser %s (each run's steps and agent run as a uid of the run's own)", c.RemoteUser))
	}
	if len(c.Ignored) > 0 {
		notes = append(notes, strings.Join(c.Ignored, ", "))
	}
	what := "image " + c.Image
	if c.Build != nil {
		what = "build.dockerfile " + c.Build.Dockerfile
	}
	log.Info("the sandbox's environment comes from the repository's devcontainer", "file", file, "from", what)
	if len(notes) > 0 {
		log.Warn(fmt.Sprintf("%s: not supported, so not applied: %s", file, strings.Join(notes, "; ")))
	}
	return nil
}

// extractBuild writes a devcontainer's Dockerfile and its build context,
// as committed, into a directory of the run's own, removed when the run
// ends, and returns their paths.
func (r *runner) extractBuild(ctx context.Context, src source, b *devcontainer.Build) (dockerfile, buildContext string, err error) {
	df, ok, err := src.local.ReadFile(ctx, src.commit, b.Dockerfile)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("read the devcontainer's Dockerfile: %w", err)
	case !ok:
		return "", "", refuse(fmt.Errorf("the devcontainer's build.dockerfile %s is not a file in %s at %.12s: fix the devcontainer.json, or set docker.devcontainer: off", b.Dockerfile, src.local.Dir, src.commit))
	}
	dir, err := os.MkdirTemp("", "amelia-devcontainer-")
	if err != nil {
		return "", "", fmt.Errorf("make a directory for the devcontainer's build: %w", err)
	}
	r.onEnd("remove the devcontainer's build context", "", func(context.Context) error { return os.RemoveAll(dir) })
	dockerfile, buildContext = filepath.Join(dir, "Dockerfile"), filepath.Join(dir, "context")
	if err := os.WriteFile(dockerfile, df, 0o644); err != nil {
		return "", "", fmt.Errorf("write the devcontainer's Dockerfile: %w", err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(src.local.Archive(ctx, src.commit, b.Context, pw)) }()
	err = untar(pr, buildContext)
	pr.CloseWithError(err)
	if err != nil {
		return "", "", fmt.Errorf("take the devcontainer's build context %s from the repository: %w", b.Context, err)
	}
	return dockerfile, buildContext, nil
}

// untar writes the directories, files and symbolic links of a tar made by
// git archive under dir.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))
		if h.Typeflag == tar.TypeXGlobalHeader || name == "" || name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%q is not a path inside the context", h.Name)
		}
		to := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(to, 0o755)
		case tar.TypeReg:
			err = writeFrom(to, tr, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, to)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// setUpCheckout runs the devcontainer's onCreateCommand,
// updateContentCommand and postCreateCommand, if any, in the run's
// checkout before its agent starts, as the run's uid, with a HOME and
// TMPDIR of their own (in the sandbox's temp directory, removed with the
// uid). Sandboxes are reused across runs and every run has a fresh
// checkout, so they run for every run. A command that fails fails the run
// with its output. What they create is not the agent's work: it is added
// to the checkout's .git/info/exclude; a command that changes a tracked
// file fails the run, since that change would be taken for the agent's.
func (r *runner) setUpCheckout(ctx context.Context, a *agentRun) error {
	c := r.devcontainer
	if c == nil || len(c.Commands) == 0 {
		return nil
	}
	ex := r.st.Driver.Exec // as the workflow's uid
	var out bytes.Buffer
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: []string{"mktemp", "-d", "/tmp/amelia-setup.XXXXXX"}}, sdk.ExecIO{Stdout: &out})
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("exit %d", st.Code)
	}
	if err != nil {
		return fmt.Errorf("make a HOME for the devcontainer's commands: %w", err)
	}
	home := strings.TrimSpace(out.String())
	env := map[string]string{"HOME": home, "TMPDIR": home}
	for _, cmd := range c.Commands {
		r.host.Logger.Info("running the devcontainer's "+cmd.Key, "argv", cmd.Argv)
		var tail execreport.Stderr
		st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: cmd.Argv, Dir: a.worktree, Env: env}, sdk.ExecIO{Stdout: &tail, Stderr: &tail})
		if err != nil {
			return fmt.Errorf("run the devcontainer's %s: %w", cmd.Key, err)
		}
		if st.Code != 0 {
			return fmt.Errorf("the devcontainer's %s (%s) exited %d before the agent started%s; fix it, or set docker.devcontainer: off to run without it",
				cmd.Key, c.File, st.Code, tail.NoteAs("output"))
		}
	}
	// Untracked paths they made go to .git/info/exclude (directories
	// whole); a tracked file they changed is refused.
	const body = `set -e
changed=$(git status --porcelain --untracked-files=no)
if [ -n "$changed" ]; then printf '%s\n' "$changed"; exit 3; fi
mkdir -p .git/info
git ls-files --others --exclude-standard --directory | sed 's|^|/|' >> .git/info/exclude
`
	var gitOut execreport.Stderr
	st, err = ex.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", body}, Dir: a.worktree}, sdk.ExecIO{Stdout: &gitOut, Stderr: &gitOut})
	switch {
	case err != nil:
		return fmt.Errorf("exclude what the devcontainer's commands made: %w", err)
	case st.Code == 3:
		return fmt.Errorf("the devcontainer's commands (%s) changed tracked files (%s), which would be taken for the agent's work: make them leave tracked files as they are (npm ci rather than npm install), or set docker.devcontainer: off", c.File, gitOut.Tail())
	case st.Code != 0:
		return fmt.Errorf("exclude what the devcontainer's commands made: exit %d: %s", st.Code, gitOut.Tail())
	}
	return nil
}
