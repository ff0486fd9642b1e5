// Package linked links the built-in providers: builtin's table with each
// provider's constructor. Only amelia-providers (and tests that serve
// providers from their own binary) import it.
package linked

import (
	"fmt"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// Providers is builtin.Providers with their constructors. It panics if
// the table names a provider this package does not link, which
// TestTablesAgree catches first.
func Providers() []pluginhost.Builtin {
	table := builtin.Providers()
	for i := range table {
		table[i].New = constructor(table[i].Name)
		if table[i].New == nil {
			panic(fmt.Sprintf("linked: built-in provider %q has no constructor", table[i].Name))
		}
	}
	return table
}

// constructor builds the built-in provider called name; nil if none is.
func constructor(name string) func(pluginhost.BuiltinDeps) sdk.Provider {
	switch name {
	case local.Name:
		return func(d pluginhost.BuiltinDeps) sdk.Provider {
			return local.New(local.Options{Version: d.Version, DefaultRoot: d.StateDir, HostEnv: d.Environ, Logger: d.Logger})
		}
	case docker.Name:
		return func(d pluginhost.BuiltinDeps) sdk.Provider {
			return docker.New(docker.Options{Version: d.Version, WorkerDirs: d.WorkerDirs, Logger: d.Logger})
		}
	case ssh.Name:
		return func(d pluginhost.BuiltinDeps) sdk.Provider {
			return ssh.New(ssh.Options{Version: d.Version, Logger: d.Logger})
		}
	case daytona.Name:
		return func(d pluginhost.BuiltinDeps) sdk.Provider {
			return daytona.New(daytona.Options{
				Version:    d.Version,
				Getenv:     d.Getenv,
				WorkerDirs: d.WorkerDirs,
				StateDir:   d.StateDir,
				Logger:     d.Logger,
			})
		}
	case kubernetes.Name:
		return func(d pluginhost.BuiltinDeps) sdk.Provider {
			return kubernetes.New(kubernetes.Options{Version: d.Version, WorkerDirs: d.WorkerDirs, Getenv: d.Getenv, Logger: d.Logger})
		}
	}
	return nil
}
