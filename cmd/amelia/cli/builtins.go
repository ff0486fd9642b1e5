package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// The providers that come with amelia are linked into amelia-providers
// alone: it serves them (`amelia-providers plugin serve NAME`), and amelia
// hands it the commands that drive one in their own process (handOff).
// The amelia that runs, lists and stops sandboxes links none, so that each
// of many concurrent runs' processes stays small.

// providersBinary is the file name of the executable that links the
// built-in providers, beside amelia.
const providersBinary = "amelia-providers"

// ameliaBeside is the amelia executable for exe: exe itself, or the amelia
// beside it when exe is amelia-providers, so that what amelia-providers
// says and where it looks (workers, plugins) are amelia's.
func ameliaBeside(exe string) string {
	if filepath.Base(exe) != providersBinary {
		return exe
	}
	return filepath.Join(filepath.Dir(exe), "amelia")
}

// linked says whether this binary links the built-in providers.
func (a *app) linked() bool {
	return len(a.builtins) > 0 && a.builtins[0].New != nil
}

// providersExe is the executable that serves the built-in providers: this
// one where it links them, else amelia-providers beside it.
func (a *app) providersExe() string {
	if a.linked() {
		return a.exe
	}
	return filepath.Join(filepath.Dir(a.exe), providersBinary)
}

// handOff runs this command in amelia-providers, which links the
// providers this amelia does not, by replacing this process with it: same
// arguments, environment and streams. Where this binary links them it
// returns nil and the command goes on here; otherwise it returns only
// with the reason it could not.
func (a *app) handOff() error {
	if a.linked() {
		return nil
	}
	exe := a.providersExe()
	if !pluginhost.Executable(exe) {
		return fmt.Errorf("this command needs the built-in providers, which %s serves, and it is missing beside %s: install amelia with make build or make install, which put it there", providersBinary, a.exe)
	}
	err := syscall.Exec(exe, append([]string{exe}, a.args...), a.environ)
	return fmt.Errorf("start %s: %w", exe, err)
}

// builtinProvider builds the built-in provider called name, whose logs go
// to logger; false where there is none by that name, or this binary does
// not link it (call handOff first).
func (a *app) builtinProvider(name string, logger *slog.Logger) (sdk.Provider, bool) {
	for _, b := range a.builtins {
		if b.Name == name && b.New != nil {
			return b.New(pluginhost.BuiltinDeps{
				Version:    buildinfo.Version(),
				StateDir:   filepath.Join(a.stateDir(), "amelia", name),
				WorkerDirs: workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self),
				Getenv:     a.getenv,
				Environ:    a.environ,
				Logger:     logger,
			}), true
		}
	}
	return nil, false
}

// imageBuilder is a built-in provider that builds a sandbox image ahead of
// its sandboxes (`amelia image build`): the docker provider.
type imageBuilder interface {
	BuildImage(ctx context.Context, settings []byte, noCache bool, progress io.Writer) (string, error)
}
