// Package builtin is the table of providers the amelia binary serves
// itself: the one package that imports them. main hands it to the CLI, and
// core stays a library that imports no provider.
package builtin

import (
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// Providers are the built-in providers. Each Env is what the provider
// reads from the host's environment beyond what every plugin gets
// (pluginhost's base: PATH, HOME, USER, locale, XDG directories,
// AMELIA_WORKER_DIR...).
func Providers() []pluginhost.Builtin {
	// The proxy and CA variables of Go's HTTP client, for the API clients
	// that may cross a proxy (a tcp:// Docker engine, Daytona's API).
	netEnv := []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"}
	return []pluginhost.Builtin{{
		// local passes commands only PATH, locale and user variables.
		Name:    local.Name,
		Aliases: []string{local.Alias},
		New: func(d pluginhost.BuiltinDeps) sdk.Provider {
			return local.New(local.Options{Version: d.Version, DefaultRoot: d.StateDir, HostEnv: d.Environ, Logger: d.Logger})
		},
	}, {
		Name: docker.Name,
		// plugins/docker/engine.go, and the client library's FromEnv.
		Env: pluginhost.Env{Vars: append([]string{
			"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION",
		}, netEnv...)},
		New: func(d pluginhost.BuiltinDeps) sdk.Provider {
			return docker.New(docker.Options{Version: d.Version, WorkerDirs: d.WorkerDirs, Logger: d.Logger})
		},
	}, {
		Name: ssh.Name,
		// The agent; known_hosts and ~/.ssh/config come from HOME.
		Env: pluginhost.Env{Vars: []string{"SSH_AUTH_SOCK"}},
		New: func(d pluginhost.BuiltinDeps) sdk.Provider {
			return ssh.New(ssh.Options{Version: d.Version, Logger: d.Logger})
		},
	}, {
		Name: daytona.Name,
		// The API key's variable is the profile's daytona.api_key_env.
		Env: pluginhost.Env{Vars: netEnv, Named: []pluginhost.NamedVar{{Key: "api_key_env", Default: "DAYTONA_API_KEY"}}},
		New: func(d pluginhost.BuiltinDeps) sdk.Provider {
			return daytona.New(daytona.Options{
				Version:    d.Version,
				Getenv:     d.Getenv,
				WorkerDirs: d.WorkerDirs,
				StateDir:   d.StateDir,
				Logger:     d.Logger,
			})
		},
	}}
}
