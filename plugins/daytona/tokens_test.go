package daytona_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Daytona revokes a sandbox's other SSH access tokens when it makes one;
// the amelia processes of a host (here: providers sharing the test's
// state directory) share one token instead of locking each other out.

// tokenFile is where the providers of a test cache a sandbox's token.
func tokenFile(id string) string {
	return filepath.Join(os.Getenv("XDG_STATE_HOME"), "amelia", "daytona", "ssh-tokens", id+".json")
}

// Two processes on one sandbox mint one token between them, and neither
// is refused a login after their connections drop.
func TestTokensShared(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{}, nil)
	a, b := newProvider(t), newProvider(t)
	sb, err := a.EnsureRunning(t.Context(), spec("shared", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureRunning(t.Context(), spec("shared", cfg, sdk.NetworkOpen)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []sdk.Provider{a, b, a} {
		if out, _, err := run(t, p, sb.Ref, "echo hi"); err != nil || out != "hi\n" {
			t.Fatalf("exec: %q, %v", out, err)
		}
	}
	f.DropConnections()
	for _, p := range []sdk.Provider{b, a} {
		if out, _, err := run(t, p, sb.Ref, "echo again"); err != nil || out != "again\n" {
			t.Fatalf("exec after the drop: %q, %v", out, err)
		}
	}
	if s := f.Stats(); s.TokensIssued != 1 || s.RefusedLogins != 0 {
		t.Errorf("%d tokens issued, %d logins refused; want 1 token, no refusal", s.TokensIssued, s.RefusedLogins)
	}
	path := tokenFile(sb.Ref.ID)
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, fi, err, want)
		}
	}

	// Revoking on teardown still works, and the cache forgets the token.
	if err := a.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.TokensRevoked == 0 {
		t.Error("teardown revoked no token")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the revoked token is still cached: %v", err)
	}
}

// When the gateway refuses the shared token (here: Daytona expired it),
// the processes that log in at once mint one new token between them: the
// first to be refused mints it, the others find it in the cache.
func TestRefusedTokenIsReplacedOnce(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{}, nil)
	var ps []sdk.Provider
	var sb sdk.Sandbox
	for range 3 {
		p := newProvider(t)
		s, err := p.EnsureRunning(t.Context(), spec("refused", cfg, sdk.NetworkOpen))
		if err != nil {
			t.Fatal(err)
		}
		ps, sb = append(ps, p), s
	}
	issued := f.Stats().TokensIssued
	f.ExpireTokens()
	f.DropConnections()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, _, err := run(t, p, sb.Ref, "echo back"); err != nil || out != "back\n" {
				t.Errorf("exec after the token expired: %q, %v", out, err)
			}
		}()
	}
	wg.Wait()
	if got := f.Stats().TokensIssued - issued; got != 1 {
		t.Errorf("%d tokens minted after the refusal, want 1", got)
	}
}

// The renewal goes through the cache too: processes renewing the same
// token take the one the first renewed, so together they mint as one
// process would, and none revokes another's.
func TestRenewalShared(t *testing.T) {
	const ttl = 2 * time.Second
	f, cfg := startWith(t, daytonatest.Options{TokenTTL: ttl}, nil)
	a, b := newProvider(t), newProvider(t)
	sb, err := a.EnsureRunning(t.Context(), spec("renewed", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureRunning(t.Context(), spec("renewed", cfg, sdk.NetworkOpen)); err != nil {
		t.Fatal(err)
	}
	start, issued := time.Now(), f.Stats().TokensIssued
	var wg sync.WaitGroup
	for _, p := range []sdk.Provider{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Outlives the token twice over: both renew it meanwhile.
			if out, _, err := run(t, p, sb.Ref, "sleep 5; echo done"); err != nil || out != "done\n" {
				t.Errorf("long exec: %q, %v", out, err)
			}
		}()
	}
	wg.Wait()
	f.DropConnections()
	for _, p := range []sdk.Provider{a, b} {
		if out, _, err := run(t, p, sb.Ref, "echo after"); err != nil || out != "after\n" {
			t.Fatalf("exec after the renewals: %q, %v", out, err)
		}
	}
	s := f.Stats()
	// One chain of renewals mints a token every 3/4 of a token's life;
	// two processes each renewing their own would mint twice as many.
	if most := int(time.Since(start)/(ttl*3/4)) + 2; s.TokensIssued-issued > most {
		t.Errorf("%d tokens minted in %s, want at most %d: the processes renewed each their own", s.TokensIssued-issued, time.Since(start), most)
	}
	// A login may race the other process's renewal (its token is read,
	// then revoked before the gateway checks it): it is refused once and
	// takes the new token from the cache. More means they do not share.
	if s.RefusedLogins > 2 {
		t.Errorf("%d logins refused: renewals revoked another process's token", s.RefusedLogins)
	}
}
