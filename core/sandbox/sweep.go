package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Found is a sandbox a Sweep visits.
type Found struct {
	// Profile is the profile the sandbox is for: a configured profile's
	// name, or, for an orphan, its amelia.profile label (else its name).
	Profile string
	// Provider is the provider that holds it (canonical name).
	Provider string
	// Sandbox reaches it, through a provider the sweep keeps open until
	// the visit returns; nil when Err is set.
	Sandbox *Sandbox
	// Listed is what the provider's List said of it; nil when it did not
	// list it (the profile's own sandbox may be absent, or its provider
	// cannot list).
	Listed *sdk.Listed
	// Orphan is true for a sandbox whose profile is not configured (any
	// more): a removed profile's, or a crash's.
	Orphan bool
	// Elsewhere is true for a configured profile's sandbox on a provider
	// other than the profile's own (made by amelia run --sandbox).
	Elsewhere bool
	// Legacy is true for a sandbox named for its profile alone, as
	// versions before Name made them: this config file's by its labels,
	// and never reused (a profile's own is the one Name names).
	Legacy bool
	// Err kept the profile's provider from starting.
	Err error
}

// Sweep finds the sandboxes this host made from one config file, wherever
// they are: each configured profile's own sandbox, then every other
// sandbox that a provider lists with this host's and this config file's
// labels — a profile's on another provider (amelia run --sandbox), and
// orphans. Sandboxes of other hosts or other config files are not its
// business.
type Sweep struct {
	// Opener starts the providers.
	Opener Opener
	// Profiles are the config's profiles, all of them: they tell a
	// profile's sandbox from an orphan.
	Profiles []*config.Profile
	// Providers are the providers to list through besides the profiles'
	// own (the built-in ones), each with every profile's settings for it.
	// A provider that cannot list, or cannot be reached with a profile's
	// settings for it, is passed over.
	Providers []string
	// Only, when set, is the one profile whose sandboxes are visited; its
	// own first. No orphans then.
	Only   string
	Logger *slog.Logger
}

// Visit calls fn for each sandbox found: the configured profiles' own in
// the order of Profiles (or Only's), then the others in the order their
// providers listed them. fn must not keep f.Sandbox.
func (s Sweep) Visit(ctx context.Context, fn func(Found)) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	byName := map[string]*config.Profile{}
	for _, p := range s.Profiles {
		byName[p.Name] = p
	}
	seen := map[string]bool{} // provider + "\x00" + id or name
	key := func(provider string, ref sdk.SandboxRef) string {
		id := ref.ID
		if id == "" {
			id = ref.Name
		}
		return provider + "\x00" + id
	}
	// others are the sandboxes listed that are not a profile's own, to
	// visit once the own ones have been.
	type other struct {
		sb     *Sandbox
		listed sdk.Listed
	}
	var others []other
	var open []*Sandbox
	defer func() {
		for _, sb := range open {
			sb.Close()
		}
	}()
	// listed holds what each place (a provider and a settings block) listed:
	// each is listed once, whichever profiles name it.
	listed := map[string][]sdk.Listed{}
	place := func(provider string, settings []byte) string { return provider + "\x00" + string(settings) }
	// list is what sb's provider lists through sb's settings. A profile's
	// own provider that fails to list is worth a warning; another that a
	// profile has no settings for (ssh without a host) is not.
	list := func(sb *Sandbox, own bool) []sdk.Listed {
		k := place(sb.Info.Name, sb.Ref.Config)
		if l, ok := listed[k]; ok {
			return l
		}
		l, err := sb.Owned(ctx)
		switch {
		case err == nil, errors.Is(err, sdk.ErrUnsupported):
		case own:
			log.Warn("cannot list the sandboxes this host made", "profile", sb.Profile.Name, "provider", sb.Info.Name, "err", err)
		default:
			log.Debug("cannot list the sandboxes this host made", "profile", sb.Profile.Name, "provider", sb.Info.Name, "err", err)
		}
		listed[k] = l
		return l
	}
	profiles := s.Profiles
	if s.Only != "" {
		profiles = slices.DeleteFunc(slices.Clone(profiles), func(p *config.Profile) bool { return p.Name != s.Only })
	}
	for _, p := range profiles {
		sb, err := s.Opener.Open(ctx, p, log)
		if err != nil {
			fn(Found{Profile: p.Name, Provider: p.Sandbox.Provider, Err: err})
			continue
		}
		open = append(open, sb)
		own := Found{Profile: p.Name, Provider: sb.Info.Name, Sandbox: sb}
		seen[key(sb.Info.Name, sb.Ref)] = true
		for _, l := range list(sb, true) {
			if l.Ref.Name == sb.Ref.Name {
				own.Listed = &l
				sb.owned = true
				seen[key(sb.Info.Name, l.Ref)] = true
				continue
			}
			others = append(others, other{sb, l})
		}
		fn(own)
	}
	// The same profiles' blocks for the other providers.
	for _, p := range profiles {
		for _, provider := range s.Providers {
			q := p.WithProvider(provider)
			settings, err := Settings(q)
			if err != nil {
				continue
			}
			if _, done := listed[place(provider, settings)]; done || provider == p.Sandbox.Provider {
				continue
			}
			sb, err := s.Opener.Open(ctx, q, log)
			if err != nil {
				log.Debug("cannot start a provider to list its sandboxes", "provider", provider, "err", err)
				continue
			}
			l := list(sb, false)
			if len(l) == 0 {
				sb.Close() // nothing there: no need to keep it running
				continue
			}
			open = append(open, sb)
			for _, one := range l {
				others = append(others, other{sb, one})
			}
		}
	}
	for _, o := range others {
		k := key(o.sb.Info.Name, o.listed.Ref)
		if seen[k] {
			continue
		}
		seen[k] = true
		profile := o.listed.Labels[LabelProfile]
		if profile == "" {
			profile = o.listed.Ref.Name
		}
		if s.Only != "" && profile != s.Only {
			continue
		}
		l := o.listed
		found := o.sb.Other(l.Ref)
		found.owned = true // listed with this config's labels
		p, configured := byName[profile]
		if configured {
			// Listed through another profile's block: it is this one's.
			found.Profile = p.WithProvider(found.Info.Name)
		}
		fn(Found{Profile: profile, Provider: found.Info.Name, Sandbox: found, Listed: &l, Orphan: !configured,
			Elsewhere: configured && found.Info.Name != p.Sandbox.Provider, Legacy: l.Ref.Name == profile})
	}
}
