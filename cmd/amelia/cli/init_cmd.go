package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/atomicwriter"
	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// dockerSetup is what `amelia init` asks of the built-in docker provider:
// where the engine is and which base image it already holds, and, with
// --bootstrap, to make one.
type dockerSetup interface {
	imageBuilder
	LocalBase(ctx context.Context) (engine, base string, err error)
	Bootstrap(ctx context.Context, out io.Writer) error
}

// dockerName is the built-in provider `amelia init` sets up.
const dockerName = "docker"

func (a *app) initCommand() *cobra.Command {
	var force, bootstrap, noBuild bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write a config for this machine: a docker profile (the default) and a local one",
		Long: `Write a config file that works on this machine, and say what it did: it
finds the Docker engine, picks a base image the engine already holds to build
the sandbox image FROM (amelia-base:bookworm, else debian:bookworm-slim; with
--bootstrap it first makes amelia-base:bookworm from Debian's packages, for
engines that cannot pull), builds the sandbox image once (unless --no-build),
and writes --config (default ~/.config/amelia/config.yaml) with a profile
"docker" as the default and a profile "local" (no isolation). Without an
engine, local is the default and the docker profile waits for one. An
existing file is kept unless --force, which keeps a copy as FILE.bak.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.handOff(); err != nil {
				return err
			}
			return a.init(cmd.Context(), cmd.OutOrStdout(), force, bootstrap, noBuild)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "replace an existing config file (kept as FILE.bak)")
	f.BoolVar(&bootstrap, "bootstrap", false, "make amelia-base:bookworm from Debian's packages when the engine holds no base image (mmdebstrap; root or sudo)")
	f.BoolVar(&noBuild, "no-build", false, "do not build the sandbox image now (the first run builds it)")
	return cmd
}

func (a *app) init(ctx context.Context, out io.Writer, force, bootstrap, noBuild bool) error {
	path, err := config.Path(config.Options{Path: a.configPath, LookupEnv: a.lookup, HomeDir: a.home})
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil && !force {
		return usageError{fmt.Errorf("%s exists: amelia init writes a new config; check it with amelia config validate, or pass --force to replace it (the old one is kept as %s.bak)", path, path)}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	engine, base, dockerErr := a.setUpDocker(ctx, out, bootstrap, noBuild)
	if dockerErr != nil && engine != "" {
		// The engine answers, but the sandbox image cannot be made: a
		// config naming it would fail at the first run.
		return fmt.Errorf("%w; nothing was written", dockerErr)
	}
	text := initConfig(engine, base, dockerErr)
	if err := writeConfigFile(path, text, force); err != nil {
		return err
	}

	fmt.Fprintf(out, "wrote %s\n", path)
	if dockerErr == nil {
		fmt.Fprintf(out, "  profile docker (the default): sandboxes are containers on the Docker engine at %s, FROM %s\n", engine, base)
		fmt.Fprintf(out, "  profile local: runs on this machine and isolates nothing (amelia --profile local ...)\n")
	} else {
		fmt.Fprintf(out, "  profile local (the default): runs on this machine and isolates nothing\n")
		fmt.Fprintf(out, "  profile docker: no Docker engine answers (%s); start one and run amelia init --force again\n", oneLine(dockerErr.Error()))
	}
	amelia := a.invocation()
	fmt.Fprintf(out, "next, in a git checkout:\n")
	fmt.Fprintf(out, "  %s run --model %secho \"add a --verbose flag\"   # a scripted model on this machine: no key needed\n", amelia, ScriptedPrefix)
	fmt.Fprintf(out, "  export %s=...; %s run \"add a --verbose flag\"   # the real model; the key stays on this machine\n", config.DefaultAPIKeyEnv, amelia)
	if amelia != "amelia" {
		fmt.Fprintf(out, "(this amelia, named by its path: PATH does not find it; make install in its clone puts amelia and its workers in $(go env GOPATH)/bin)\n")
	}
	return nil
}

// invocation is how a shell runs this amelia from any directory:
// "amelia" when it is the first amelia on PATH, else its absolute path,
// quoted for the shell when it needs to be.
func (a *app) invocation() string {
	if a.self == "" {
		return "amelia"
	}
	for _, dir := range filepath.SplitList(a.getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry finds it only from one directory
		}
		p := filepath.Join(dir, "amelia")
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if self, err := os.Stat(a.self); err == nil && os.SameFile(st, self) {
			return "amelia"
		}
		break // another amelia comes first
	}
	if strings.ContainsFunc(a.self, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+", r))
	}) {
		return "'" + strings.ReplaceAll(a.self, "'", `'\''`) + "'"
	}
	return a.self
}

// setUpDocker finds the engine and a base image it holds (making one with
// bootstrap), and builds the sandbox image unless noBuild.
func (a *app) setUpDocker(ctx context.Context, out io.Writer, bootstrap, noBuild bool) (engine, base string, err error) {
	prov, ok := a.builtinProvider(dockerName, a.logger)
	if !ok {
		return "", "", errors.New("this amelia has no docker provider")
	}
	defer sandbox.CloseProvider(prov)
	d, ok := prov.(dockerSetup)
	if !ok {
		return "", "", errors.New("this amelia's docker provider cannot be set up by amelia init")
	}
	engine, base, err = d.LocalBase(ctx)
	if errors.Is(err, sdk.ErrNotFound) && bootstrap {
		fmt.Fprintf(out, "the engine at %s holds no base image: making %s from Debian's packages (a few minutes)\n", engine, base)
		if berr := d.Bootstrap(ctx, out); berr != nil {
			return engine, "", berr
		}
		engine, base, err = d.LocalBase(ctx)
	}
	if err != nil || noBuild {
		return engine, base, err
	}
	settings, _ := json.Marshal(map[string]string{"base_image": base})
	fmt.Fprintf(out, "building the sandbox image FROM %s (once: runs reuse it)\n", base)
	tag, err := d.BuildImage(ctx, settings, false, io.Discard)
	if err != nil {
		return engine, base, fmt.Errorf("build the sandbox image FROM %s: %w", base, err)
	}
	fmt.Fprintf(out, "sandbox image: %s\n", tag)
	return engine, base, nil
}

// initConfig is the config amelia init writes.
func initConfig(engine, base string, dockerErr error) string {
	def := "docker"
	if dockerErr != nil {
		def = "local"
	}
	baseLine := "" // with no engine found, the provider's default
	if base != "" {
		baseLine = "\n      docker:\n        base_image: " + base
	}
	return fmt.Sprintf(`# Written by amelia init on %s.
# Reference: docs/configuration.md; check with amelia config validate.
default_profile: %s
profiles:
  # A container on the Docker engine at %s.
  docker:
    model: %s
    llm: {base_url: %s, api_key_env: %s}
    sandbox:
      provider: docker
      network: open%s
  # This machine itself, in a scratch directory: it isolates nothing.
  local:
    model: %s
    llm: {base_url: %s, api_key_env: %s}
    sandbox:
      provider: local
`, time.Now().UTC().Format("2006-01-02"), def, orUnknown(engine),
		config.DefaultModel, config.DefaultBaseURL, config.DefaultAPIKeyEnv, baseLine,
		config.DefaultModel, config.DefaultBaseURL, config.DefaultAPIKeyEnv)
}

func orUnknown(s string) string {
	if s == "" {
		return "(none found)"
	}
	return s
}

// writeConfigFile writes text to path (0600, its directory 0700), whole or
// not at all; with replace, an existing file is first copied to path.bak,
// and path holds the old config until the new one takes its place.
func writeConfigFile(path, text string, replace bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if replace {
		old, err := os.ReadFile(path)
		if err == nil {
			err = atomicwriter.WriteFile(path+".bak", old, 0o600)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("keep the old config as %s.bak: %w", path, err)
		}
	}
	if err := atomicwriter.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
