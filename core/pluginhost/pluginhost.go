// Package pluginhost finds and starts sandbox provider plugins.
//
// Built-in providers are served by amelia-providers, the amelia CLI with
// them linked in, started as `amelia-providers plugin serve NAME`; the
// amelia that runs sandboxes links none of them. Third-party providers are executables named
// amelia-provider-NAME on the plugin search path. Either way the host talks to
// them over go-plugin gRPC (pluginclient.Launch), never in-process. The runs of one
// profile on this host share a plugin process when Options.Share says
// where (pluginclient.Share).
package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// BinaryPrefix starts the file name of a third-party provider plugin.
const BinaryPrefix = "amelia-provider-"

// Plugin is a provider plugin that can be started.
type Plugin struct {
	Name string
	// Path is the executable: the plugin binary, or amelia-providers for
	// built-ins.
	Path string
	// Args follow Path on the command line.
	Args []string
	// Builtin is true for the providers that come with amelia.
	Builtin bool
}

// missingServer says so when p is a built-in whose server is not there to
// start: amelia installed without amelia-providers beside it.
func (p Plugin) missingServer() error {
	if !p.Builtin || Executable(p.Path) {
		return nil
	}
	return fmt.Errorf("the built-in provider %s is served by %s, which is missing or not executable: install amelia with make build or make install, which put amelia-providers beside amelia", p.Name, p.Path)
}

// Source says where the plugin comes from, for listings.
func (p Plugin) Source() string {
	if p.Builtin {
		return "built-in"
	}
	return p.Path
}

// Options configure a Host.
type Options struct {
	// Server is the executable that serves the built-ins
	// (`Server plugin serve NAME`): amelia-providers.
	Server string
	// Builtins are the providers Server serves: their names, aliases and
	// what each reads from the host's environment beyond the base.
	Builtins []Builtin
	// Dirs is the search path for amelia-provider-NAME binaries, in order.
	Dirs []string
	// Environ is the host's environment (os.Environ()), which plugins'
	// environments are drawn from (see Environment).
	Environ []string
	Logger  *slog.Logger
	// Share, when set, has Start share plugin processes (see Start); nil
	// starts a process for each Start.
	Share *Sharing
}

// Sharing is where and how long shared plugins live (pluginclient.ShareOptions).
type Sharing struct {
	// Dir holds their sockets, locks and logs: this user's alone
	// (pluginclient.ShareDir).
	Dir string
	// Idle is how long one outlives its last host; zero is
	// pluginclient.DefaultIdle.
	Idle time.Duration
}

// Host finds and starts provider plugins.
type Host struct {
	opts Options
	// Derived from opts.Builtins.
	builtins []string          // names, in order
	aliases  map[string]string // alternative name → canonical ("none" → "local")
	env      map[string]Env    // by name
}

// New returns a Host.
func New(opts Options) *Host {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Host{opts: opts, aliases: map[string]string{}, env: map[string]Env{}}
	for _, b := range opts.Builtins {
		h.builtins = append(h.builtins, b.Name)
		h.env[b.Name] = b.Env
		for _, a := range b.Aliases {
			h.aliases[a] = b.Name
		}
	}
	return h
}

// Builtins are the names of the providers amelia serves itself, in order.
func (h *Host) Builtins() []string { return h.builtins }

// SearchPath is the plugin search path: the directories of pluginPath
// (AMELIA_PLUGIN_PATH, colon-separated), then configDir/amelia/plugins, then
// the directory holding the amelia executable self.
func SearchPath(pluginPath, configDir, self string) []string {
	var dirs []string
	for _, d := range filepath.SplitList(pluginPath) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	if configDir != "" {
		dirs = append(dirs, filepath.Join(configDir, "amelia", "plugins"))
	}
	if self != "" {
		dirs = append(dirs, filepath.Dir(self))
	}
	return dirs
}

// Canonical resolves an alias to the provider's own name ("none" → "local").
func (h *Host) Canonical(name string) string {
	if c, ok := h.aliases[name]; ok {
		return c
	}
	return name
}

// Find returns the plugin called name. Built-ins come first and cannot be
// shadowed; among binaries the first on the search path wins.
func (h *Host) Find(name string) (Plugin, error) {
	name = h.Canonical(name)
	if slices.Contains(h.builtins, name) {
		p := h.builtin(name)
		return p, p.missingServer()
	}
	if !sdk.ValidName(name) {
		return Plugin{}, fmt.Errorf("%q is not a valid provider name (lower-case letters, digits, '-' and '_')", name)
	}
	for _, dir := range h.opts.Dirs {
		path := filepath.Join(dir, BinaryPrefix+name)
		if Executable(path) {
			return Plugin{Name: name, Path: path}, nil
		}
	}
	return Plugin{}, fmt.Errorf("no provider named %q: built in are %s; no %s%s was found in %s",
		name, strings.Join(h.builtins, ", "), BinaryPrefix, name, h.describeDirs())
}

func (h *Host) describeDirs() string {
	if len(h.opts.Dirs) == 0 {
		return "the plugin path (set AMELIA_PLUGIN_PATH)"
	}
	return strings.Join(h.opts.Dirs, ", ") + " (set AMELIA_PLUGIN_PATH to add directories)"
}

func (h *Host) builtin(name string) Plugin {
	return Plugin{Name: name, Path: h.opts.Server, Args: []string{"plugin", "serve", name}, Builtin: true}
}

// Ignored is a plugin binary that List skipped, and why.
type Ignored struct {
	Path   string
	Reason string
}

// List returns every plugin that Find would start, built-ins first, then the
// others by name, and the binaries it skipped (shadowed or misnamed).
func (h *Host) List() ([]Plugin, []Ignored) {
	var plugins []Plugin
	for _, name := range h.builtins {
		plugins = append(plugins, h.builtin(name))
	}
	seen := map[string]string{}
	var ignored []Ignored
	var found []Plugin
	for _, dir := range h.opts.Dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				ignored = append(ignored, Ignored{Path: dir, Reason: err.Error()})
			}
			continue
		}
		for _, e := range entries {
			name, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
			path := filepath.Join(dir, e.Name())
			switch {
			case !ok || !Executable(path):
				continue
			case !sdk.ValidName(name):
				ignored = append(ignored, Ignored{path, fmt.Sprintf("%q is not a valid provider name", name)})
			case slices.Contains(h.builtins, h.Canonical(name)):
				ignored = append(ignored, Ignored{path, fmt.Sprintf("%q is a built-in provider", name)})
			case seen[name] != "":
				ignored = append(ignored, Ignored{path, "shadowed by " + seen[name]})
			default:
				seen[name] = path
				found = append(found, Plugin{Name: name, Path: path})
			}
		}
	}
	slices.SortFunc(found, func(a, b Plugin) int { return strings.Compare(a.Name, b.Name) })
	return append(plugins, found...), ignored
}

// Environment is the environment plugin p starts with when started for
// prof (nil: for no profile, as `plugin ls` does): the host's PATH, HOME,
// USER, locale, TZ, TMPDIR, XDG directories, Go runtime settings and
// AMELIA_WORKER_DIR, the variables p's provider declares (Options.Env),
// and those prof grants. A variable that holds one of prof's secrets is
// refused with an error naming it and the key it came from.
func (h *Host) Environment(p Plugin, prof *Profile) ([]string, error) {
	return environment(h.opts.Environ, p.Name, h.env[p.Name], prof)
}

// Start launches the plugin with its Environment for prof (nil: no
// profile). The caller closes it.
//
// With Options.Share, a plugin started for a profile is shared: the
// profile's runs on this host use one process, started by the first and
// stopped when none has used it for a while (pluginclient.Share). Plugins of two
// profiles, or of one profile whose provider settings or environment
// changed, are never the same process. A profile with OwnPlugin, a plugin
// that cannot be shared and one started for no profile (plugin ls) get a
// process of their own, as does any Start whose sharing failed.
func (h *Host) Start(p Plugin, prof *Profile) (*pluginclient.Plugin, error) {
	if err := p.missingServer(); err != nil {
		return nil, err
	}
	env, err := h.Environment(p, prof)
	if err != nil {
		return nil, err
	}
	shared := h.opts.Share != nil && prof != nil && !prof.OwnPlugin
	h.opts.Logger.Debug("starting provider plugin", "plugin", p.Name, "path", p.Path, "args", p.Args, "env", names(env), "shared", shared)
	if shared {
		pl, err := h.share(p, prof, env)
		if err == nil {
			return pl, nil
		}
		level := slog.LevelWarn
		if errors.Is(err, pluginclient.ErrNotShareable) {
			level = slog.LevelDebug
		}
		h.opts.Logger.Log(context.Background(), level, "the provider plugin is not shared: starting one of this run's own", "plugin", p.Name, "reason", err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = env // never nil: with nil, the plugin would get the host's environment
	return pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: p.Name, Logger: h.opts.Logger})
}

// share connects to the shared plugin p of prof, whose environment is
// env, starting it if need be.
func (h *Host) share(p Plugin, prof *Profile, env []string) (*pluginclient.Plugin, error) {
	settings, err := json.Marshal(prof.Settings) // map keys sorted: the same settings, the same scope
	if err != nil {
		return nil, fmt.Errorf("share provider plugin %q: encode its settings: %w", p.Name, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = env
	pl, err := pluginclient.Share(cmd, pluginclient.ShareOptions{
		LaunchOptions: pluginclient.LaunchOptions{Name: p.Name, Logger: h.opts.Logger},
		Dir:           h.opts.Share.Dir,
		Scope:         prof.ID + "\x00" + string(settings),
		Idle:          h.opts.Share.Idle,
	})
	if err != nil {
		return nil, err
	}
	h.opts.Logger.Debug("provider plugin shared", "plugin", p.Name, "pid", pl.Pid(), "dir", h.opts.Share.Dir)
	return pl, nil
}

// Open finds the provider called name and starts it for prof (nil: no
// profile).
func (h *Host) Open(name string, prof *Profile) (*pluginclient.Plugin, error) {
	p, err := h.Find(name)
	if err != nil {
		return nil, err
	}
	return h.Start(p, prof)
}

// Executable says whether path is a regular file this user may run.
func Executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Builtin is a provider that comes with amelia, served by Options.Server
// (`amelia-providers plugin serve NAME`). The composition roots
// (cmd/amelia, cmd/amelia-providers) hand the table of them to the CLI;
// core imports none. The host's table has no New: only the server's links
// the providers.
type Builtin struct {
	Name string
	// Aliases are other names a profile may give it ("none" for local).
	Aliases []string
	// Env is what it reads from the host's environment beyond the base.
	Env Env
	// New builds it, in the plugin process; nil where the provider is not
	// linked.
	New func(BuiltinDeps) sdk.Provider
}

// BuiltinDeps is what the amelia process serving a built-in provider gives
// it.
type BuiltinDeps struct {
	// Version is amelia's.
	Version string
	// StateDir is the provider's own directory for state it keeps on the
	// host ($XDG_STATE_HOME/amelia/NAME); it may not exist yet.
	StateDir string
	// WorkerDirs hold the amelia-worker-linux-ARCH binaries
	// (workerbin.Dirs).
	WorkerDirs []string
	// Getenv and Environ are the plugin process's environment, which the
	// host scrubbed to what the provider declared (Env).
	Getenv  func(string) string
	Environ []string
	// Logger is the plugin's log, which the host reads back.
	Logger *slog.Logger
}
