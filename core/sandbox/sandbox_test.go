package sandbox_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// loadProfiles loads a config file of local profiles.
func loadProfiles(t *testing.T, yaml string) (*config.Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.Options{Path: path, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return c, path
}

func profiles(t *testing.T, c *config.Config) []*config.Profile {
	t.Helper()
	var ps []*config.Profile
	for _, name := range c.ProfileNames() {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// make starts a sandbox named name through provider with labels, as
// another run (or another host) would have.
func makeSandbox(t *testing.T, o *sandboxtest.Opener, provider, name string, labels map[string]string) {
	t.Helper()
	p := local.New(local.Options{Version: "test", DefaultRoot: o.Roots[provider], HostEnv: os.Environ()})
	if _, err := p.EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
		Labels:     labels,
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSweep(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir(), "other": t.TempDir()}}
	c, path := loadProfiles(t, `default_profile: a
profiles:
  a: {sandbox: {provider: local}}
  b: {sandbox: {provider: local}}
`)
	ps := profiles(t, c)
	a := ps[0]
	sb, err := o.Open(t.Context(), a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	mine := func(profile string) map[string]string {
		return map[string]string{sandbox.LabelProfile: profile, sandbox.LabelOwner: sandbox.Owner(), sandbox.LabelConfig: path}
	}
	// a's and b's sandboxes on the other provider (amelia run --sandbox
	// other); both profiles have the same (no) settings for it, so it is
	// listed once, through a's.
	b := ps[1]
	makeSandbox(t, o, "other", sandbox.Name(a, sandbox.Owner()), mine("a"))
	makeSandbox(t, o, "other", sandbox.Name(b, sandbox.Owner()), mine("b"))
	// A removed profile's, and b's named by an older version.
	makeSandbox(t, o, "local", "gone", mine("gone"))
	makeSandbox(t, o, "local", "b", mine("b"))
	// Another host's, and another config file's.
	other := mine("x")
	other[sandbox.LabelOwner] = "another-host"
	makeSandbox(t, o, "local", "x", other)
	elsewhere := mine("y")
	elsewhere[sandbox.LabelConfig] = "/elsewhere/config.yaml"
	makeSandbox(t, o, "other", "y", elsewhere)

	visit := func(only string) []string {
		var got []string
		sandbox.Sweep{Opener: o, Profiles: ps, Providers: []string{"local", "other"}, Only: only}.Visit(t.Context(), func(f sandbox.Found) {
			if f.Err != nil {
				t.Errorf("visit %s: %v", f.Profile, f.Err)
				return
			}
			state := "absent"
			if f.Listed != nil {
				state = string(f.Listed.State)
			}
			got = append(got, fmt.Sprintf("%s/%s %s orphan=%t elsewhere=%t legacy=%t ref=%s through=%s",
				f.Provider, f.Profile, state, f.Orphan, f.Elsewhere, f.Legacy, f.Sandbox.Ref.Name, f.Sandbox.Profile.Name))
		})
		return got
	}
	an, bn := sandbox.Name(a, sandbox.Owner()), sandbox.Name(b, sandbox.Owner())
	want := []string{
		"local/a ready orphan=false elsewhere=false legacy=false ref=" + an + " through=a",
		"local/b absent orphan=false elsewhere=false legacy=false ref=" + bn + " through=b",
		"local/b ready orphan=false elsewhere=false legacy=true ref=b through=b",
		"local/gone ready orphan=true elsewhere=false legacy=true ref=gone through=a",
		"other/a ready orphan=false elsewhere=true legacy=false ref=" + an + " through=a",
		"other/b ready orphan=false elsewhere=true legacy=false ref=" + bn + " through=b",
	}
	if got := visit(""); !slices.Equal(got, want) {
		t.Errorf("visited:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantA := []string{want[0], want[4]}
	if got := visit("a"); !slices.Equal(got, wantA) {
		t.Errorf("visited with only a:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantA, "\n"))
	}
}

// A profile whose provider cannot start is visited with the error; the
// others still are.
func TestSweepProviderThatCannotStart(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir()}}
	c, _ := loadProfiles(t, `default_profile: a
profiles:
  a: {sandbox: {provider: local}}
  z: {sandbox: {provider: nosuch}}
`)
	var got []string
	sandbox.Sweep{Opener: o, Profiles: profiles(t, c)}.Visit(t.Context(), func(f sandbox.Found) {
		got = append(got, fmt.Sprintf("%s err=%v", f.Profile, f.Err))
	})
	want := []string{"a err=<nil>", "z err=no provider nosuch"}
	if !slices.Equal(got, want) {
		t.Errorf("visited %q, want %q", got, want)
	}
}

// The profile's network policy is checked against what the provider can
// enforce before anything starts.
func TestUpFailsClosed(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir()}}
	c, _ := loadProfiles(t, `default_profile: a
profiles:
  a: {sandbox: {provider: local, network: none}}
`)
	sb, err := o.Open(t.Context(), profiles(t, c)[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.Up(t.Context())
	var ve *config.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), `profiles.a.sandbox.network: provider local cannot enforce "none"`) {
		t.Fatalf("Up: %v, want a refusal of network none", err)
	}
	if l, _ := sb.Owned(t.Context()); len(l) != 0 {
		t.Errorf("a refused Up left sandboxes: %+v", l)
	}
}

// A sandbox carries the labels that let a later sweep find it.
func TestSpecLabels(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir()}}
	c, path := loadProfiles(t, `default_profile: a
profiles:
  a: {sandbox: {provider: local}}
`)
	sb, err := o.Open(t.Context(), profiles(t, c)[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	l := sb.Spec().Labels
	if l[sandbox.LabelProfile] != "a" || l[sandbox.LabelConfig] != path || l[sandbox.LabelOwner] != sandbox.Owner() || l[sandbox.LabelCreated] == "" {
		t.Errorf("labels %v", l)
	}
}

// Problems are what the provider tells of the profile before anything
// starts, as problems of the config file; Up refuses them all.
func TestProblems(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir(), "other": t.TempDir()}}
	// Provider other cannot check its settings.
	o.Wrap = func(name string, p sdk.Provider) sdk.Provider {
		if name == "other" {
			return struct{ sdk.Provider }{p}
		}
		return p
	}
	c, path := loadProfiles(t, `default_profile: ok
profiles:
  ok: {sandbox: {provider: local}}
  typo: {sandbox: {provider: local, network: none, none: {rooot: /tmp/x}}}
  other: {sandbox: {provider: other, other: {anything: 1}}}
`)
	for _, tc := range []struct {
		profile   string
		want      []string
		unchecked bool
	}{
		{profile: "ok"},
		{profile: "typo", want: []string{
			`profiles.typo.sandbox.network: provider local cannot enforce "none" (it can enforce: open); pick another provider or network mode`,
			`profiles.typo.sandbox.none.rooot: unknown key, did you mean root? (known: root)`,
		}},
		// A provider without ValidateSettings: EnsureRunning refuses its
		// settings.
		{profile: "other", unchecked: true},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			p, err := c.Profile(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := o.Open(t.Context(), p, nil)
			if err != nil {
				t.Fatal(err)
			}
			problems, err := sb.Problems(t.Context())
			if unchecked := errors.Is(err, sandbox.ErrSettingsUnchecked); unchecked != tc.unchecked || (err != nil && !unchecked) {
				t.Errorf("err = %v; want unchecked: %v", err, tc.unchecked)
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			_, err = sb.Up(t.Context())
			var ve *config.ValidationError
			switch {
			case len(tc.want) > 0 && (!errors.As(err, &ve) || ve.File != path || len(ve.Problems) != len(tc.want)):
				t.Errorf("Up: %v; want a ValidationError of %s with every problem", err, path)
			case tc.unchecked && (errors.As(err, &ve) || !errors.Is(err, sdk.ErrInvalid)):
				t.Errorf("Up: %v; want EnsureRunning's refusal of the unknown key", err)
			case len(tc.want) == 0 && !tc.unchecked && err != nil:
				t.Errorf("Up: %v", err)
			}
		})
	}
}

// Names are the profile's, told apart by a digest of the host, the config
// file and the profile: valid for every provider, never the same for two
// config files, two hosts or two long profile names that start alike.
func TestName(t *testing.T) {
	long := strings.Repeat("p", 60)
	yaml := "default_profile: dev\nprofiles:\n  dev: {sandbox: {provider: local}}\n  " + long + "a: {sandbox: {provider: local}}\n  " + long + "b: {sandbox: {provider: local}}\n"
	c1, _ := loadProfiles(t, yaml)
	c2, _ := loadProfiles(t, yaml)
	get := func(c *config.Config, name string) *config.Profile {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	dev1, dev2 := get(c1, "dev"), get(c2, "dev")
	seen := map[string]string{}
	for what, name := range map[string]string{
		"dev of config 1":            sandbox.Name(dev1, "host"),
		"dev of config 2":            sandbox.Name(dev2, "host"),
		"dev of config 1, elsewhere": sandbox.Name(dev1, "another-host"),
		"long a":                     sandbox.Name(get(c1, long+"a"), "host"),
		"long b":                     sandbox.Name(get(c1, long+"b"), "host"),
	} {
		if !sdk.ValidName(name) {
			t.Errorf("%s: %q is not a valid sandbox name", what, name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%s and %s are both %q", what, other, name)
		}
		seen[name] = what
	}
	if n := sandbox.Name(dev1, "host"); !strings.HasPrefix(n, "dev-") || len(n) != len("dev-")+8 || n != sandbox.Name(dev1, "host") {
		t.Errorf("Name = %q, want dev- and 8 hex digits, the same each time", n)
	}
}

// Two config files with a profile of the same name, side by side on one
// provider: each sees, reuses and removes its own sandbox only. A
// sandbox that is not a config's own, reached by its name (a run's
// record), is neither reused, reported on nor removed.
func TestTwoConfigsSameProfile(t *testing.T) {
	o := &sandboxtest.Opener{Roots: map[string]string{"local": t.TempDir()}}
	yaml := "default_profile: dev\nprofiles:\n  dev: {sandbox: {provider: local}}\n"
	ca, _ := loadProfiles(t, yaml)
	cb, _ := loadProfiles(t, yaml)
	open := func(c *config.Config) *sandbox.Sandbox {
		sb, err := o.Open(t.Context(), profiles(t, c)[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sb.Close)
		return sb
	}
	a, b := open(ca), open(cb)
	if a.Ref.Name == b.Ref.Name {
		t.Fatalf("both configs' dev sandboxes are named %s", a.Ref.Name)
	}
	if s, err := a.Up(t.Context()); err != nil || !s.Created {
		t.Fatalf("A's Up: %+v, %v", s, err)
	}
	// B's own is absent; removing it leaves A's.
	if _, err := b.Health(t.Context()); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("B's Health: %v, want its own absent", err)
	}
	if err := b.Down(t.Context()); err != nil {
		t.Errorf("B's Down of its absent sandbox: %v", err)
	}
	visit := func(c *config.Config) []string {
		var got []string
		sandbox.Sweep{Opener: o, Profiles: profiles(t, c), Providers: []string{"local"}}.Visit(t.Context(), func(f sandbox.Found) {
			if f.Listed != nil {
				got = append(got, f.Sandbox.Ref.Name)
			}
		})
		return got
	}
	if got := visit(cb); len(got) != 0 {
		t.Errorf("B's sweep found %v, want none of A's", got)
	}
	// A's sandbox reached by name from B: refused everywhere.
	stray := b.Other(sdk.SandboxRef{Name: a.Ref.Name, Config: b.Ref.Config})
	if _, err := stray.Health(t.Context()); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("B's Health of A's sandbox: %v, want ErrNotOwned", err)
	}
	if _, err := stray.Up(t.Context()); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("B's Up of A's sandbox: %v, want ErrNotOwned", err)
	}
	if err := stray.Down(t.Context()); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("B's Down of A's sandbox: %v, want ErrNotOwned", err)
	}
	if _, err := a.Health(t.Context()); err != nil {
		t.Errorf("A's sandbox after B's attempts: %v", err)
	}
	// B gets its own; A's sweep sees only A's.
	if s, err := b.Up(t.Context()); err != nil || !s.Created {
		t.Fatalf("B's Up: %+v, %v", s, err)
	}
	if got := visit(ca); !slices.Equal(got, []string{a.Ref.Name}) {
		t.Errorf("A's sweep found %v, want only %s", got, a.Ref.Name)
	}
	if err := a.Down(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Health(t.Context()); err != nil {
		t.Errorf("B's sandbox after A's Down: %v", err)
	}
}
