package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// minter counts the tokens it makes: t1, t2... each live for an hour.
type minter struct{ n atomic.Int32 }

func (m *minter) mint(context.Context) (api.SSHAccess, error) {
	n := m.n.Add(1)
	now := time.Now()
	return api.SSHAccess{Token: fmt.Sprintf("t%d", n), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, nil
}

func margin(api.SSHAccess) time.Duration { return 5 * time.Minute }

// access is a token expiring in d.
func access(token string, d time.Duration) api.SSHAccess {
	return api.SSHAccess{Token: token, CreatedAt: time.Now().Add(-time.Minute), ExpiresAt: time.Now().Add(d)}
}

// cacheFile writes a token as the cache file of sandbox id.
func cacheFile(t *testing.T, dir, id string, a api.SSHAccess) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(a)
	path := filepath.Join(dir, id+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenCache(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cached  *api.SSHAccess
		current api.SSHAccess
		refused string
		want    string // the token given
		mints   int32
	}{
		{name: "nothing cached: minted", want: "t1", mints: 1},
		{name: "cached and live: taken", cached: ptr(access("other", time.Hour)), want: "other"},
		{name: "cached but expiring: minted", cached: ptr(access("other", time.Minute)), want: "t1", mints: 1},
		{name: "cached and refused: minted", cached: ptr(access("other", time.Hour)), refused: "other", want: "t1", mints: 1},
		{name: "another process replaced the refused one: taken", cached: ptr(access("newer", time.Hour)), refused: "older", want: "newer"},
		{name: "nothing cached, one in hand: shared", current: access("mine", time.Hour), want: "mine"},
		{name: "cached beats the one in hand", cached: ptr(access("shared", time.Hour)), current: access("mine", time.Hour), want: "shared"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			c := newTokenCache(state, slog.New(slog.DiscardHandler))
			if tt.cached != nil {
				cacheFile(t, c.dir, "sb-1", *tt.cached)
			}
			var m minter
			got, err := c.token(t.Context(), tokenRequest{sandboxID: "sb-1", current: tt.current, refused: tt.refused, margin: margin, mint: m.mint})
			if err != nil {
				t.Fatal(err)
			}
			if got.Token != tt.want || m.n.Load() != tt.mints {
				t.Errorf("got %s after %d mints, want %s after %d", got.Token, m.n.Load(), tt.want, tt.mints)
			}
			// What it gave is what the next process finds.
			data, err := os.ReadFile(filepath.Join(c.dir, "sb-1.json"))
			var a api.SSHAccess
			if err != nil || json.Unmarshal(data, &a) != nil || a.Token != tt.want {
				t.Errorf("cache file holds %s (%v), want %s", data, err, tt.want)
			}
			for path, want := range map[string]os.FileMode{c.dir: 0o700, filepath.Join(c.dir, "sb-1.json"): 0o600} {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Processes that need a token at once (here: caches of their own over one
// directory, each with its own file and so its own lock) mint one
// between them.
func TestTokenCacheMintsOnceForAll(t *testing.T) {
	state := t.TempDir()
	var m minter
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newTokenCache(state, slog.New(slog.DiscardHandler))
			a, err := c.token(t.Context(), tokenRequest{sandboxID: "sb-1", margin: margin, mint: m.mint})
			if err != nil {
				t.Error(err)
			}
			got[i] = a.Token
		}()
	}
	wg.Wait()
	if m.n.Load() != 1 {
		t.Errorf("%d mints, want 1", m.n.Load())
	}
	for i, tok := range got {
		if tok != "t1" {
			t.Errorf("process %d got %q", i, tok)
		}
	}
}

// A process holding the lock (minting) is waited for, as long as the
// context allows.
func TestTokenCacheWaitsForTheLock(t *testing.T) {
	c := newTokenCache(t.TempDir(), slog.New(slog.DiscardHandler))
	held, err := c.lock(t.Context(), "sb-1", true)
	if err != nil {
		t.Fatal(err)
	}
	var m minter
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	other := newTokenCache(filepath.Dir(c.dir), slog.New(slog.DiscardHandler))
	if _, err := other.token(ctx, tokenRequest{sandboxID: "sb-1", margin: margin, mint: m.mint}); !errors.Is(err, context.DeadlineExceeded) || m.n.Load() != 0 {
		t.Errorf("token while the lock is held: %v after %d mints", err, m.n.Load())
	}
	cacheFile(t, c.dir, "sb-1", access("minted-meanwhile", time.Hour))
	held.Close()
	if a, err := other.token(t.Context(), tokenRequest{sandboxID: "sb-1", margin: margin, mint: m.mint}); err != nil || a.Token != "minted-meanwhile" || m.n.Load() != 0 {
		t.Errorf("token once released: %s, %v after %d mints", a.Token, err, m.n.Load())
	}
}

// drop removes the cached token when it is the one revoked (or all were).
func TestTokenCacheDrop(t *testing.T) {
	c := newTokenCache(t.TempDir(), slog.New(slog.DiscardHandler))
	path := cacheFile(t, c.dir, "sb-1", access("live", time.Hour))
	c.drop(t.Context(), "sb-1", "another")
	if _, err := os.Stat(path); err != nil {
		t.Errorf("dropping another token removed the cache: %v", err)
	}
	c.drop(t.Context(), "sb-1", "live")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the revoked token is still cached: %v", err)
	}
	cacheFile(t, c.dir, "sb-1", access("live", time.Hour))
	c.drop(t.Context(), "sb-1", "")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("revoking all left the token cached: %v", err)
	}
}

// Files of tokens long expired go when a token is minted; others stay.
func TestTokenCachePrunes(t *testing.T) {
	c := newTokenCache(t.TempDir(), slog.New(slog.DiscardHandler))
	old := time.Now().Add(-3 * staleAfter)
	gone := cacheFile(t, c.dir, "gone", api.SSHAccess{Token: "x", ExpiresAt: old})
	kept := cacheFile(t, c.dir, "renewing", access("y", time.Hour))
	recent := cacheFile(t, c.dir, "recent", api.SSHAccess{Token: "z", ExpiresAt: old})
	for _, p := range []string{gone, kept} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	var m minter
	if _, err := c.token(t.Context(), tokenRequest{sandboxID: "sb-1", margin: margin, mint: m.mint}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a long-expired token's file was kept: %v", err)
	}
	for _, p := range []string{kept, recent} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was pruned: %v", p, err)
		}
	}
}

// Without a usable directory, a process keeps to its own token while it
// lives, and says once that it cannot share.
func TestTokenCacheUnusable(t *testing.T) {
	state := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs sdktest.Buffer
	c := newTokenCache(state, slog.New(slog.NewTextHandler(&logs, nil)))
	var m minter
	a, err := c.token(t.Context(), tokenRequest{sandboxID: "sb-1", current: access("mine", time.Hour), margin: margin, mint: m.mint})
	if err != nil || a.Token != "mine" || m.n.Load() != 0 {
		t.Errorf("with a live token: %s, %v after %d mints", a.Token, err, m.n.Load())
	}
	a, err = c.token(t.Context(), tokenRequest{sandboxID: "sb-1", current: access("mine", time.Hour), refused: "mine", margin: margin, mint: m.mint})
	if err != nil || a.Token != "t1" || m.n.Load() != 1 {
		t.Errorf("with the token refused: %s, %v after %d mints", a.Token, err, m.n.Load())
	}
	if n := count(&logs, "cannot share SSH gateway tokens"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, logs.String())
	}
}

// count is how often s was logged.
func count(b *sdktest.Buffer, s string) int { return strings.Count(b.String(), s) }
