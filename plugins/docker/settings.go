package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/docker/go-units"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Settings is a profile's `sandbox.docker` block.
type Settings struct {
	// Image is a ready image used as it is (nothing is built); it must
	// hold sh, coreutils and User, and a Workdir that User can write.
	Image string `json:"image"`
	// BaseImage is the BASE_IMAGE of Amelia's Dockerfile (default
	// debian:bookworm-slim).
	BaseImage string `json:"base_image"`
	// Dockerfile is a devcontainer-style Dockerfile: it is built first (in
	// BuildContext), and Amelia's image is built on top of it.
	Dockerfile string `json:"dockerfile"`
	// BuildContext is the Dockerfile's build context (default: the
	// Dockerfile's directory).
	BuildContext string `json:"build_context"`
	// BuildArgs are the Dockerfile's build arguments.
	BuildArgs map[string]string `json:"build_args"`
	// Packages are the Debian packages Amelia's image holds beyond its
	// own needs, installed when the base lacks them. Unset, it is
	// image.Toolchain on base_image, and nothing on a project's own
	// Dockerfile; an empty list is nothing.
	Packages *[]string `json:"packages"`
	// Env is the container's environment, which every command in it
	// gets: a devcontainer's containerEnv, or the profile's own.
	Env map[string]string `json:"env"`
	// Devcontainer says whether a run takes the sandbox's environment
	// from the repository's devcontainer.json: "auto" (the default) or
	// "off". amelia reads it on the host; the provider only checks it.
	Devcontainer string `json:"devcontainer"`
	// DevcontainerFile is set by amelia, for a run, to the
	// devcontainer.json whose environment the settings hold ("" for
	// none): the container is labelled with it, and a run whose
	// devcontainer asks for another image than its sandbox runs is
	// refused.
	DevcontainerFile string `json:"devcontainer_file"`
	// Host is the engine's address (unix://, tcp://, ssh://); default as
	// the docker CLI: DOCKER_HOST, else the current docker context.
	Host string `json:"host"`
	// Context is a docker context to use instead of the current one.
	Context string `json:"context"`
	// User runs the commands (default amelia).
	User      string            `json:"user"`
	Resources Resources         `json:"resources"`
	Labels    map[string]string `json:"labels"`
	// Tmpfs mounts a tmpfs of the size given (bytes, or "16m") at each
	// absolute path in the container, writable by every user: scratch
	// space kept in memory, and a small disk that can fill (the tests of
	// a full disk use one).
	Tmpfs map[string]Memory `json:"tmpfs"`
}

// Resources are the container's limits.
type Resources struct {
	// CPUs is a number of CPUs, fractions allowed (0 = no limit).
	CPUs float64 `json:"cpus"`
	// Memory is bytes, or a size such as "4g" or "512MiB" (unset = no
	// limit).
	Memory Memory `json:"memory"`
	// Pids is the most processes the sandbox may hold (default 1024).
	Pids int64 `json:"pids"`
}

// DefaultPids is the process limit of a sandbox whose profile sets none.
const DefaultPids = 1024

// Memory is a number of bytes, written in JSON as a number or as a string
// with a unit ("4g", "512MiB").
type Memory int64

// UnmarshalJSON reads a size. Its errors say what is wrong with the
// value; sdk.DecodeSettings puts the key in front.
func (m *Memory) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := n.Int64()
		if err != nil {
			return fmt.Errorf("%s is not a whole number of bytes", n)
		}
		*m = Memory(v)
		return nil
	}
	var str string
	_ = json.Unmarshal(b, &str)
	v, err := units.RAMInBytes(str)
	if err != nil {
		return fmt.Errorf("%s is not a size (write bytes, or a size like 4g or 512MiB)", b)
	}
	*m = Memory(v)
	return nil
}

var (
	packageRule = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	envNameRule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRule    = regexp.MustCompile(`^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})(:([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}))?$`)
	imageRule   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]{0,254}$`)
	contextRule = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.+-]*$`)
)

// decodeSettings reads and checks the settings of a sandbox ref or list
// request (strictly: a typo does not pass silently).
func decodeSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := sdk.DecodeSettings(raw, Name, &s); err != nil {
		return s, err
	}
	return s, s.normalize()
}

func invalid(key, format string, args ...any) error {
	return sdk.InvalidSetting(Name, key, format, args...)
}

// ValidateSettings checks a profile's docker block. Every network mode is
// enforced whatever the settings, so the policy needs no check here.
func (p *Provider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	_, err := decodeSettings(req.Config)
	return sdk.SettingsProblems(err)
}

// normalize fills in defaults and checks every value.
func (s *Settings) normalize() error {
	for key, ref := range map[string]string{"image": s.Image, "base_image": s.BaseImage} {
		if ref != "" && !imageRule.MatchString(ref) {
			return invalid(key, "%q is not an image reference (like debian:bookworm-slim or registry.example.com/team/img:tag)", ref)
		}
	}
	switch {
	case s.Image != "" && (s.BaseImage != "" || s.Dockerfile != ""):
		return invalid("image", "is a ready image used as it is; it does not go with base_image or dockerfile (those build Amelia's image)")
	case s.BaseImage != "" && s.Dockerfile != "":
		return invalid("base_image", "does not go with dockerfile: the image your Dockerfile builds is the base")
	case s.BuildContext != "" && s.Dockerfile == "":
		return invalid("build_context", "is the context of docker.dockerfile, which is not set")
	case len(s.BuildArgs) > 0 && s.Dockerfile == "":
		return invalid("build_args", "are the build arguments of docker.dockerfile, which is not set")
	case s.Packages != nil && s.Image != "":
		return invalid("packages", "does not go with docker.image, a ready image used as it is: install them in that image")
	case s.Host != "" && s.Context != "":
		return invalid("host", "does not go with docker.context: the context names the engine")
	}
	if s.BaseImage == "" && s.Image == "" && s.Dockerfile == "" {
		s.BaseImage = image.DefaultBase
	}
	if s.Packages == nil && s.Image == "" {
		// Amelia's own image gets the toolchain; a project's own
		// environment gets only what it asks for.
		pkgs := []string{}
		if s.Dockerfile == "" && s.DevcontainerFile == "" {
			pkgs = slices.Clone(image.Toolchain)
		}
		s.Packages = &pkgs
	}
	if s.Packages != nil {
		for i, p := range *s.Packages {
			if !packageRule.MatchString(p) {
				return invalid(fmt.Sprintf("packages[%d]", i), "%q is not a Debian package name (lowercase letters, digits, '+', '-' and '.', like build-essential or python3-venv)", p)
			}
		}
	}
	switch s.Devcontainer {
	case "":
		s.Devcontainer = "auto"
	case "auto", "off":
	default:
		return invalid("devcontainer", "%q is neither auto nor off", s.Devcontainer)
	}
	if s.DevcontainerFile != "" && (!filepath.IsLocal(s.DevcontainerFile) || strings.ContainsAny(s.DevcontainerFile, "\x00\n")) {
		return invalid("devcontainer_file", "%q is not a path inside a repository", s.DevcontainerFile)
	}
	for k, v := range s.BuildArgs {
		if !envNameRule.MatchString(k) || strings.ContainsRune(v, 0) {
			return invalid(sdk.JoinKey("build_args", k), "is not a build argument (a name of letters, digits and _, and a value without NUL)")
		}
	}
	for k, v := range s.Env {
		switch {
		case !envNameRule.MatchString(k) || strings.ContainsRune(v, 0):
			return invalid(sdk.JoinKey("env", k), "is not an environment variable (a name of letters, digits and _, not starting with a digit, and a value without NUL)")
		case strings.HasPrefix(k, "AMELIA_"):
			return invalid(sdk.JoinKey("env", k), "variables starting with AMELIA_ are Amelia's own")
		}
	}
	var err error
	if s.Dockerfile != "" {
		if s.Dockerfile, err = absPath("dockerfile", s.Dockerfile); err != nil {
			return err
		}
		if s.BuildContext == "" {
			s.BuildContext = filepath.Dir(s.Dockerfile)
		} else if s.BuildContext, err = absPath("build_context", s.BuildContext); err != nil {
			return err
		}
	}
	if s.Context != "" && !contextRule.MatchString(s.Context) {
		return invalid("context", "%q is not a docker context name", s.Context)
	}
	if s.User == "" {
		s.User = image.User
	}
	if !userRule.MatchString(s.User) {
		return invalid("user", "%q is not a user name or uid[:gid]", s.User)
	}
	r := &s.Resources
	if r.CPUs < 0 || math.IsNaN(r.CPUs) || r.CPUs > 1024 {
		return invalid("resources.cpus", "%v is not a number of CPUs (like 2 or 0.5)", r.CPUs)
	}
	if r.Memory < 0 || (r.Memory > 0 && r.Memory < 6<<20) {
		return invalid("resources.memory", "%d bytes is too little: a container needs at least 6MiB", r.Memory)
	}
	if r.Pids < 0 {
		return invalid("resources.pids", "%d is not a process limit (a positive number; default %d)", r.Pids, DefaultPids)
	}
	if r.Pids == 0 {
		r.Pids = DefaultPids
	}
	for p, size := range s.Tmpfs {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" || strings.ContainsAny(p, "\x00,:") {
			return invalid(sdk.JoinKey("tmpfs", p), "is not a clean absolute path in the container other than / (like /scratch)")
		}
		if size <= 0 {
			return invalid(sdk.JoinKey("tmpfs", p), "%d bytes is not a size: give one like 64m", size)
		}
	}
	for k, v := range s.Labels {
		switch {
		case k == "" || strings.ContainsAny(k, "\x00=") || strings.ContainsRune(v, 0):
			return invalid(sdk.JoinKey("labels", k), "is not a label (a non-empty key without '=' or NUL, and a value without NUL)")
		case strings.HasPrefix(k, labelPrefix):
			return invalid(sdk.JoinKey("labels", k), "labels starting with %q are Amelia's own", labelPrefix)
		}
	}
	return nil
}

// absPath expands a leading ~/ and requires an absolute path: the plugin's
// working directory is nothing the profile's author can rely on.
func absPath(key, p string) (string, error) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", invalid(key, "%q: cannot expand ~: %v", p, err)
		}
		p = filepath.Join(home, rest)
	}
	if !filepath.IsAbs(p) {
		return "", invalid(key, "%q must be an absolute path (or start with ~/)", p)
	}
	return filepath.Clean(p), nil
}
