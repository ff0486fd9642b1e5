// Package devcontainer reads a repository's devcontainer.json (the
// Development Containers specification's JSON with comments), as far as
// Amelia's sandboxes can take it: the image or Dockerfile the project's
// environment is built from, its build arguments, the container's
// environment and the commands that set a checkout up. What it cannot
// take (features, which need a registry; mounts, ports, a compose file;
// variable substitution) it lists, for the caller to say so.
package devcontainer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/tailscale/hujson"
)

// Files are where a repository may keep its devcontainer.json, in the
// order they are looked for.
var Files = []string{".devcontainer/devcontainer.json", ".devcontainer.json"}

// Config is what Amelia takes from a devcontainer.json.
type Config struct {
	// File is where in the repository it is ("/"-separated).
	File string
	// Image is the image the environment starts from; "" with Build.
	Image string
	// Build is the Dockerfile that builds it; nil with Image.
	Build *Build
	// ContainerEnv is the container's environment, less the variables
	// whose values use ${...} substitution (see Ignored).
	ContainerEnv map[string]string
	// RemoteUser is the user the file asks commands to run as.
	RemoteUser string
	// Commands set a checkout up: onCreateCommand, updateContentCommand
	// and postCreateCommand, in that order.
	Commands []Command
	// Ignored says what of the file is not applied, one phrase each
	// ("features", "forwardPorts", "containerEnv.PATH (uses ${...})").
	Ignored []string
}

// Build is a devcontainer's Dockerfile; its paths are inside the
// repository, "/"-separated, relative to its top ("." for the top).
type Build struct {
	Dockerfile string
	Context    string
	Args       map[string]string
}

// Command is one command: an argv, run without a shell; a string in the
// file is run by sh -c.
type Command struct {
	// Key names it in the file: "postCreateCommand", or
	// "postCreateCommand.install" for one of an object's.
	Key  string
	Argv []string
}

// lifecycle are the commands Config.Commands holds, in the order they run.
var lifecycle = []string{"onCreateCommand", "updateContentCommand", "postCreateCommand"}

// descriptive keys say nothing about the environment: they are not
// "ignored".
var descriptive = []string{"$schema", "name", "customizations"}

// variable matches the specification's ${...} substitution, which Amelia
// does not do: ${localEnv:...} would carry the host's environment in.
var variable = regexp.MustCompile(`\$\{[^}]*\}`)

// imageRef is what an image reference may look like; its length (at most
// 255) is checked apart, since a bounded repetition ({0,254}) compiles to
// as many copies of the class: 216 KB built at every start of amelia.
var imageRef = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$`)

// envName is a name an environment variable or build argument can have.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Parse reads the devcontainer.json data found at file in a repository.
// Its errors say what is wrong, at which key.
func Parse(file string, data []byte) (*Config, error) {
	std, err := hujson.Standardize(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not JSON with comments: %w", file, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(std, &raw); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object: %w", file, err)
	}
	c := &Config{File: file}
	dir := path.Dir(file)
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", file, key, fmt.Sprintf(format, args...))
	}
	str := func(key string) (string, error) {
		var s string
		if v, ok := raw[key]; ok {
			if err := json.Unmarshal(v, &s); err != nil {
				return "", bad(key, "want a string")
			}
		}
		return s, nil
	}
	strMap := func(key string) (map[string]string, error) {
		var m map[string]string
		if v, ok := raw[key]; ok {
			if err := json.Unmarshal(v, &m); err != nil {
				return nil, bad(key, "want an object of strings")
			}
		}
		return m, nil
	}
	if c.Image, err = str("image"); err != nil {
		return nil, err
	}
	switch {
	case variable.MatchString(c.Image):
		return nil, bad("image", "%q uses ${...} substitution, which amelia does not do: name the image plainly", c.Image)
	case c.Image != "" && (len(c.Image) > 255 || !imageRef.MatchString(c.Image)):
		return nil, bad("image", "%q is not an image reference (like mcr.microsoft.com/devcontainers/base:bookworm)", c.Image)
	}
	if c.RemoteUser, err = str("remoteUser"); err != nil {
		return nil, err
	}

	// build.dockerfile, or the older top-level dockerFile and context.
	var b struct {
		Dockerfile string            `json:"dockerfile"`
		Context    string            `json:"context"`
		Args       map[string]string `json:"args"`
		Target     string            `json:"target"`
		Options    []string          `json:"options"`
		CacheFrom  json.RawMessage   `json:"cacheFrom"`
	}
	if v, ok := raw["build"]; ok {
		if err := json.Unmarshal(v, &b); err != nil {
			return nil, bad("build", "want an object with dockerfile, and context and args if needed: %v", err)
		}
	}
	if b.Dockerfile == "" {
		if b.Dockerfile, err = str("dockerFile"); err != nil {
			return nil, err
		}
		if b.Context == "" {
			if b.Context, err = str("context"); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case b.Dockerfile != "" && c.Image != "":
		return nil, bad("image", "does not go with build.dockerfile: give one of them")
	case b.Dockerfile != "":
		df, err := inRepo(dir, b.Dockerfile)
		if err != nil {
			return nil, bad("build.dockerfile", "%v", err)
		}
		ctx, err := inRepo(dir, cmp.Or(b.Context, "."))
		if err != nil {
			return nil, bad("build.context", "%v", err)
		}
		c.Build = &Build{Dockerfile: df, Context: ctx, Args: map[string]string{}}
		for _, k := range slices.Sorted(maps.Keys(b.Args)) {
			v := b.Args[k]
			switch {
			case !envName.MatchString(k) || strings.ContainsRune(v, 0):
				return nil, bad("build.args."+k, "is not a build argument (a name of letters, digits and _, and a value without NUL)")
			case variable.MatchString(v):
				c.Ignored = append(c.Ignored, "build.args."+k+" (uses ${...})")
			default:
				c.Build.Args[k] = v
			}
		}
		if b.Target != "" {
			c.Ignored = append(c.Ignored, "build.target")
		}
		if len(b.Options) > 0 {
			c.Ignored = append(c.Ignored, "build.options")
		}
		if len(b.CacheFrom) > 0 {
			c.Ignored = append(c.Ignored, "build.cacheFrom")
		}
	}

	env, err := strMap("containerEnv")
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case !envName.MatchString(k) || strings.ContainsRune(v, 0):
			return nil, bad("containerEnv."+k, "is not an environment variable (a name of letters, digits and _, and a value without NUL)")
		case strings.HasPrefix(k, "AMELIA_"):
			return nil, bad("containerEnv."+k, "variables starting with AMELIA_ are Amelia's own")
		case variable.MatchString(v):
			c.Ignored = append(c.Ignored, "containerEnv."+k+" (uses ${...})")
		default:
			if c.ContainerEnv == nil {
				c.ContainerEnv = map[string]string{}
			}
			c.ContainerEnv[k] = v
		}
	}

	for _, key := range lifecycle {
		v, ok := raw[key]
		if !ok {
			continue
		}
		cmds, err := commands(key, v)
		if err != nil {
			return nil, bad(key, "%v", err)
		}
		c.Commands = append(c.Commands, cmds...)
	}

	for _, k := range slices.Sorted(maps.Keys(raw)) {
		switch {
		case slices.Contains(lifecycle, k), slices.Contains(descriptive, k):
		case k == "image", k == "build", k == "dockerFile", k == "context", k == "containerEnv", k == "remoteUser":
		default:
			c.Ignored = append(c.Ignored, k)
		}
	}
	return c, nil
}

// Environment reports whether c names an environment Amelia can build:
// an image or a Dockerfile (a compose file it cannot).
func (c *Config) Environment() bool { return c.Image != "" || c.Build != nil }

// commands reads a lifecycle command: a string (sh -c), an argv, or an
// object of those, run one after another in the order of their names.
func commands(key string, v json.RawMessage) ([]Command, error) {
	one := func(key string, v json.RawMessage) (Command, error) {
		var s string
		if json.Unmarshal(v, &s) == nil {
			if strings.TrimSpace(s) == "" {
				return Command{}, errors.New("is an empty command")
			}
			return Command{Key: key, Argv: []string{"sh", "-c", s}}, nil
		}
		var argv []string
		if err := json.Unmarshal(v, &argv); err != nil || len(argv) == 0 || argv[0] == "" {
			return Command{}, errors.New("want a command: a string, a non-empty array of strings, or an object of those")
		}
		for _, a := range argv {
			if strings.ContainsRune(a, 0) {
				return Command{}, errors.New("holds a NUL byte")
			}
		}
		return Command{Key: key, Argv: argv}, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) == nil && obj != nil {
		var out []Command
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			c, err := one(key+"."+name, obj[name])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, c)
		}
		return out, nil
	}
	c, err := one(key, v)
	if err != nil {
		return nil, err
	}
	return []Command{c}, nil
}

// inRepo is p, relative to the directory dir of the repository, as a path
// from the repository's top; it must not leave the repository.
func inRepo(dir, p string) (string, error) {
	if path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%q is not a path relative to the devcontainer.json", p)
	}
	full := path.Join(dir, p)
	if full == ".." || strings.HasPrefix(full, "../") {
		return "", fmt.Errorf("%q leads out of the repository", p)
	}
	return full, nil
}
