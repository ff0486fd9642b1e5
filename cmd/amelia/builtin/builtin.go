// Package builtin is the table of the providers that come with amelia:
// their names, aliases and what each reads from the host's environment. It
// imports no provider, so the amelia binary that runs, lists and stops
// sandboxes links none of them; the binary that serves them,
// amelia-providers, adds their constructors (package linked).
package builtin

import "github.com/amelia-sandbox/amelia/core/pluginhost"

// Providers are the built-in providers, without their constructors. Each
// Env is what the provider reads from the host's environment beyond what
// every plugin gets (pluginhost's base: PATH, HOME, USER, locale, XDG
// directories, AMELIA_WORKER_DIR...).
func Providers() []pluginhost.Builtin {
	// The proxy and CA variables of Go's HTTP client, for the API clients
	// that may cross a proxy (a tcp:// Docker engine, Daytona's API).
	netEnv := []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"}
	return []pluginhost.Builtin{{
		// local passes commands only PATH, locale and user variables.
		Name:    "local",
		Aliases: []string{"none"},
	}, {
		Name: "docker",
		// plugins/docker/engine.go, and the client library's FromEnv.
		Env: pluginhost.Env{Vars: append([]string{
			"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION",
		}, netEnv...)},
	}, {
		Name: "ssh",
		// The agent; known_hosts and ~/.ssh/config come from HOME.
		Env: pluginhost.Env{Vars: []string{"SSH_AUTH_SOCK"}},
	}, {
		Name: "daytona",
		// The API key's variable is the profile's daytona.api_key_env.
		Env: pluginhost.Env{Vars: netEnv, Named: []pluginhost.NamedVar{{Key: "api_key_env", Default: "DAYTONA_API_KEY"}}},
	}, {
		Name: "kubernetes",
		// client-go's kubeconfig rules (~/.kube/config comes from
		// HOME); inside a pod, the service account's API server.
		Env: pluginhost.Env{Vars: append([]string{
			"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
		}, netEnv...)},
	}}
}
