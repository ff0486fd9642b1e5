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
	makeSandbox(t, o, "other", "a", mine("a"))
	makeSandbox(t, o, "other", "b", mine("b"))
	// A removed profile's.
	makeSandbox(t, o, "local", "gone", mine("gone"))
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
			got = append(got, fmt.Sprintf("%s/%s %s orphan=%t ref=%s through=%s", f.Provider, f.Profile, state, f.Orphan, f.Sandbox.Ref.Name, f.Sandbox.Profile.Name))
		})
		return got
	}
	want := []string{
		"local/a ready orphan=false ref=a through=a",
		"local/b absent orphan=false ref=b through=b",
		"local/gone ready orphan=true ref=gone through=a",
		"other/a ready orphan=false ref=a through=a",
		"other/b ready orphan=false ref=b through=b",
	}
	if got := visit(""); !slices.Equal(got, want) {
		t.Errorf("visited:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantA := []string{"local/a ready orphan=false ref=a through=a", "other/a ready orphan=false ref=a through=a"}
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
