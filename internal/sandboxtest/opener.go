package sandboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Opener is a sandbox.Opener for tests of what runs above that seam (a
// run, a sweep): each profile's provider is the local provider, served in
// this process. A profile of another provider NAME gets a local provider
// that calls itself NAME, so one test can hold sandboxes of several
// providers. Wrap, when set, wraps each provider (called name), for tests
// that break it or take an optional interface away; the counters say how
// the providers were used.
type Opener struct {
	// Roots are the default roots of the providers, by name ("local"
	// included): where a profile that names no local.root keeps its
	// sandboxes. A provider not in Roots cannot be opened.
	Roots map[string]string
	Wrap  func(name string, p sdk.Provider) sdk.Provider
	// Opened, Closed and Validated count Open, Close and ValidateSettings
	// calls.
	Opened, Closed, Validated atomic.Int32
}

func (o *Opener) Open(ctx context.Context, p *config.Profile, logger *slog.Logger) (*sandbox.Sandbox, error) {
	prov, err := o.Provider(p.Sandbox.Provider)
	if err != nil {
		return nil, err
	}
	return sandbox.New(ctx, p, prov, logger)
}

// Provider is the provider Open gives a profile of provider name.
func (o *Opener) Provider(name string) (sdk.Provider, error) {
	root, ok := o.Roots[name]
	if !ok {
		return nil, fmt.Errorf("no provider %s", name)
	}
	var prov sdk.Provider = local.New(local.Options{Version: "test", DefaultRoot: root, HostEnv: os.Environ()})
	if o.Wrap != nil {
		prov = o.Wrap(name, prov)
	}
	o.Opened.Add(1)
	return counted{Provider: prov, name: name, o: o}, nil
}

// counted is a provider as Opener gives it: called name, counting, and
// passing on the optional interfaces the local provider has, as a plugin
// serves them.
type counted struct {
	sdk.Provider
	name string
	o    *Opener
}

func (c counted) Info(ctx context.Context) (sdk.Info, error) {
	info, err := c.Provider.Info(ctx)
	info.Name = c.name
	return info, err
}

// Close counts, then closes the provider as a plugin's end would: the
// local provider's ends the execs still running.
func (c counted) Close() {
	c.o.Closed.Add(1)
	sandbox.CloseProvider(c.Provider)
}

// Exited passes on the wrapped provider's Exited, as a plugin's client
// has one: a test's provider says with it that its plugin died.
func (c counted) Exited() bool {
	e, ok := c.Provider.(interface{ Exited() bool })
	return ok && e.Exited()
}

func (c counted) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	c.o.Validated.Add(1)
	v, ok := c.Provider.(sdk.SettingsValidator)
	if !ok {
		return nil, sdk.Errorf(sdk.ErrUnsupported, "no ValidateSettings")
	}
	return v.ValidateSettings(ctx, req)
}

func (c counted) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	l, ok := c.Provider.(sdk.Lister)
	if !ok {
		return nil, sdk.Errorf(sdk.ErrUnsupported, "no List")
	}
	return l.List(ctx, req)
}
