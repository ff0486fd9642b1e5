package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dockercontext "github.com/docker/cli/cli/context/docker"
	"github.com/docker/cli/cli/context/store"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// pingTimeout bounds the first request to an engine, which tells whether it
// answers at all.
const pingTimeout = 15 * time.Second

// engine is a connection to one Docker engine.
type engine struct {
	cli  *client.Client
	host string // for messages: unix:///var/run/docker.sock

	archMu sync.Mutex
	arch   string // cached once known

	sessions sessions // command sessions into its containers (session.go)
}

// endpoint is how to reach an engine: the client options and a name for it.
type endpoint struct {
	key  string // identifies the engine among cached ones
	host string
	opts []client.Opt
}

// resolveEndpoint finds the engine as the docker CLI does, from the
// plugin's environment (amelia's own): the profile's docker.host or
// docker.context first, then DOCKER_HOST (with DOCKER_TLS_VERIFY and
// DOCKER_CERT_PATH), then DOCKER_CONTEXT, then the current context of the
// docker CLI's config ($DOCKER_CONFIG or ~/.docker), then the default
// socket.
func resolveEndpoint(set Settings) (endpoint, error) {
	if set.Host != "" {
		return endpoint{key: "host=" + set.Host, host: set.Host, opts: []client.Opt{client.WithHost(set.Host)}}, nil
	}
	if set.Context != "" {
		return contextEndpoint(set.Context)
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return envEndpoint(h), nil
	}
	name := os.Getenv("DOCKER_CONTEXT")
	if name == "" {
		name = currentContext()
	}
	if name != "" && name != "default" {
		return contextEndpoint(name)
	}
	return envEndpoint(client.DefaultDockerHost), nil
}

// envEndpoint is the default context: DOCKER_HOST, DOCKER_API_VERSION and
// the TLS variables, read by the client library.
func envEndpoint(host string) endpoint {
	return endpoint{key: "env=" + host, host: host, opts: []client.Opt{client.FromEnv}}
}

// dockerConfigDir is the docker CLI's configuration directory.
func dockerConfigDir() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".docker")
}

// currentContext is the docker CLI's current context ("" when none is set).
func currentContext() string {
	b, err := os.ReadFile(filepath.Join(dockerConfigDir(), "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	_ = json.Unmarshal(b, &cfg)
	return cfg.CurrentContext
}

// contextEndpoint reads a docker context from the docker CLI's context
// store: its engine address and TLS material.
func contextEndpoint(name string) (endpoint, error) {
	st := store.New(filepath.Join(dockerConfigDir(), "contexts"), store.NewConfig(
		func() any { return new(map[string]any) },
		store.EndpointTypeGetter(dockercontext.DockerEndpoint, func() any { return new(dockercontext.EndpointMeta) }),
	))
	meta, err := st.GetMetadata(name)
	if err != nil {
		return endpoint{}, sdk.Errorf(sdk.ErrInvalid, "docker context %q: %v (see `docker context ls`)", name, err)
	}
	epMeta, err := dockercontext.EndpointFromContext(meta)
	if err != nil {
		return endpoint{}, sdk.Errorf(sdk.ErrInvalid, "docker context %q: %v", name, err)
	}
	ep, err := dockercontext.WithTLSData(st, name, epMeta)
	if err != nil {
		return endpoint{}, sdk.Errorf(sdk.ErrInvalid, "docker context %q: %v", name, err)
	}
	opts, err := ep.ClientOpts()
	if err != nil {
		return endpoint{}, sdk.Errorf(sdk.ErrInvalid, "docker context %q: %v", name, err)
	}
	return endpoint{key: "context=" + name, host: ep.Host, opts: opts}, nil
}

// engine returns the connection to the engine the settings name, opening
// it (and checking that the engine answers) on first use.
func (p *Provider) engine(ctx context.Context, set Settings) (*engine, error) {
	ep, err := resolveEndpoint(set)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.engines[ep.key]; ok {
		return e, nil
	}
	cli, err := client.New(ep.opts...)
	if err != nil {
		return nil, sdk.Errorf(sdk.ErrInvalid, "docker engine %s: %v", ep.host, err)
	}
	e := &engine{cli: cli, host: ep.host}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = cli.Close()
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, sdk.Errorf(sdk.ErrUnavailable, "cannot reach the Docker engine at %s: no answer within %v — is Docker running?", e.host, pingTimeout)
		}
		return nil, e.wrap(err, "reach the Docker engine")
	}
	p.engines[ep.key] = e
	return e, nil
}

// architecture is the engine's CPU architecture as Go names it (amd64).
func (e *engine) architecture(ctx context.Context) (string, error) {
	e.archMu.Lock()
	defer e.archMu.Unlock()
	if e.arch == "" {
		v, err := e.cli.ServerVersion(ctx, client.ServerVersionOptions{})
		if err != nil {
			return "", e.wrap(err, "ask the Docker engine its version")
		}
		e.arch = v.Arch
	}
	return e.arch, nil
}

// wrap turns an engine error into one that says what was being done and
// matches the SDK's sentinels. An engine that cannot be reached gets the
// message users need: where amelia looked, why it failed, what to check.
func (e *engine) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case client.IsErrConnectionFailed(err):
		if errors.Is(err, fs.ErrPermission) || strings.Contains(err.Error(), "permission denied") {
			return sdk.Errorf(sdk.ErrPermission, "cannot reach the Docker engine at %s: permission denied — is your user in the docker group?", e.host)
		}
		return sdk.Errorf(sdk.ErrUnavailable, "cannot reach the Docker engine at %s: %s — is Docker running?", e.host, connectCause(err))
	case cerrdefs.IsNotFound(err):
		return sdk.Errorf(sdk.ErrNotFound, "%s: %v", what, err)
	case cerrdefs.IsConflict(err):
		return sdk.Errorf(sdk.ErrConflict, "%s: %v", what, err)
	case cerrdefs.IsInvalidArgument(err):
		return sdk.Errorf(sdk.ErrInvalid, "%s: %v", what, err)
	case cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err):
		return sdk.Errorf(sdk.ErrPermission, "%s: %v", what, err)
	case cerrdefs.IsUnavailable(err):
		return sdk.Errorf(sdk.ErrUnavailable, "%s: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// connectCause is the network error under a failed connection ("dial unix
// /var/run/docker.sock: connect: no such file or directory"); the client
// keeps it for some failures only.
func connectCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return "nothing answers there"
}

// relook is how long a wait for a container's next event lasts at most:
// some changes come with no event (a create that fails gives its name back
// silently), and an event stream can break.
const relook = time.Second

// watch follows the engine's events about one container name, so that a
// process waiting for another's change to the container wakes when the
// change happens.
type watch struct {
	events <-chan events.Message
	errs   <-chan error
	stop   context.CancelFunc
}

// watch starts following the lifecycle events of the container name (its
// creation, start, death, removal, unpause, rename) from now on.
func (e *engine) watch(ctx context.Context, name string) *watch {
	ctx, cancel := context.WithCancel(ctx)
	f := make(client.Filters).Add("type", "container").Add("container", name)
	for _, ev := range []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionDestroy, events.ActionUnPause, events.ActionRename} {
		f.Add("event", string(ev))
	}
	res := e.cli.Events(ctx, client.EventsListOptions{Filters: f})
	return &watch{events: res.Messages, errs: res.Err, stop: cancel}
}

// next waits for the container's next event, or relook, or until ctx
// ends. It reports whether an event woke it.
func (w *watch) next(ctx context.Context) (bool, error) {
	t := time.NewTimer(relook)
	defer t.Stop()
	for {
		select {
		case <-w.events:
			return true, nil
		case <-w.errs:
			// The stream ended: from now on only the timer wakes.
			w.events, w.errs = nil, nil
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
