package cli

import (
	"log/slog"
	"path/filepath"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/workerbin"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// The providers amelia serves itself (`amelia plugin serve NAME`).

func builtinNames() []string { return []string{local.Name, docker.Name, ssh.Name, daytona.Name} }

func builtinAliases() map[string]string { return map[string]string{local.Alias: local.Name} }

// builtinEnv is what each built-in provider reads from the host's
// environment beyond what every plugin gets (pluginhost's base: PATH,
// HOME, USER, locale, XDG directories, AMELIA_WORKER_DIR...). local needs
// nothing more: it passes commands only PATH, locale and user variables.
func builtinEnv() map[string]pluginhost.Env {
	// The proxy and CA variables of Go's HTTP client, for the API clients
	// that may cross a proxy (a tcp:// Docker engine, Daytona's API).
	netEnv := []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"}
	return map[string]pluginhost.Env{
		local.Name: {},
		// plugins/docker/engine.go, and the client library's FromEnv.
		docker.Name: {Vars: append([]string{
			"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION",
		}, netEnv...)},
		// The agent; known_hosts and ~/.ssh/config come from HOME.
		ssh.Name: {Vars: []string{"SSH_AUTH_SOCK"}},
		// The API key's variable is the profile's daytona.api_key_env.
		daytona.Name: {Vars: netEnv, Named: []pluginhost.NamedVar{{Key: "api_key_env", Default: "DAYTONA_API_KEY"}}},
	}
}

// builtinProvider builds the built-in provider called name, for a plugin
// process whose logs go to logger.
func (a *app) builtinProvider(name string) (sdk.Provider, bool) {
	switch name {
	case local.Name:
		return local.New(local.Options{
			Version:     buildinfo.Version(),
			DefaultRoot: filepath.Join(a.stateDir(), "amelia", "local"),
			HostEnv:     a.environ,
			Logger:      a.pluginLogger(),
		}), true
	case docker.Name:
		return a.dockerProvider(a.pluginLogger()), true
	case ssh.Name:
		return ssh.New(ssh.Options{Version: buildinfo.Version(), Logger: a.pluginLogger()}), true
	case daytona.Name:
		return daytona.New(daytona.Options{
			Version:    buildinfo.Version(),
			Getenv:     a.getenv,
			WorkerDirs: workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self),
			StateDir:   filepath.Join(a.stateDir(), "amelia", "daytona"),
			Logger:     a.pluginLogger(),
		}), true
	}
	return nil, false
}

// dockerProvider is the Docker provider with this process's environment
// and workers.
func (a *app) dockerProvider(logger *slog.Logger) *docker.Provider {
	return docker.New(docker.Options{
		Version:    buildinfo.Version(),
		WorkerDirs: workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self),
		Logger:     logger,
	})
}
