package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// Daytona revokes every SSH access token of a sandbox when it makes a new
// one (sandbox.service.ts createSshAccess). Two amelia processes on one
// sandbox (a `sandbox exec` beside a run, two runs) that each minted
// their own would lock each other out at every mint and renewal. So the
// processes of a host share the sandbox's token through a file: one per
// sandbox id, in a directory only the user can read, locked (flock)
// around reading it, minting when needed and writing it back.

// tokenCache holds the SSH access tokens of sandboxes, shared by the
// processes that use the same directory.
type tokenCache struct {
	dir    string
	logger *slog.Logger

	warnOnce sync.Once
}

// defaultStateDir is where the provider keeps its state when
// Options.StateDir is empty: $XDG_STATE_HOME (or ~/.local/state) +
// /amelia/daytona; "" when neither is known.
func defaultStateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "amelia", "daytona")
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".local", "state", "amelia", "daytona")
}

// newTokenCache keeps tokens under stateDir/ssh-tokens ("" stateDir: in
// each process's memory only).
func newTokenCache(stateDir string, logger *slog.Logger) *tokenCache {
	c := &tokenCache{logger: logger}
	if stateDir != "" {
		c.dir = filepath.Join(stateDir, "ssh-tokens")
	}
	return c
}

// tokenRequest is what token needs to pick a token for a sandbox.
type tokenRequest struct {
	sandboxID string
	// current is the token the caller has (zero: none).
	current api.SSHAccess
	// refused is a token the gateway just refused a login with: it is
	// not used again. "" when there is none.
	refused string
	// margin is how long before its expiry a token is no longer used.
	margin func(api.SSHAccess) time.Duration
	// mint makes a new token (revoking the sandbox's others).
	mint func(context.Context) (api.SSHAccess, error)
}

// usable reports whether a token may log in: known, not refused, and not
// expiring within the margin.
func (r tokenRequest) usable(a api.SSHAccess) bool {
	return a.Token != "" && a.Token != r.refused && time.Until(a.ExpiresAt) > r.margin(a)
}

// token returns the token to log in with: the cached one when it is
// usable (another process may have minted it), else a new one, which is
// cached. Minting happens only when the cached token is missing, expiring
// or the one just refused. Without a usable cache, it keeps to the
// caller's token while that is usable.
func (c *tokenCache) token(ctx context.Context, r tokenRequest) (api.SSHAccess, error) {
	if c.dir != "" && validCacheKey.MatchString(r.sandboxID) {
		a, err := c.shared(ctx, r)
		if err == nil || ctx.Err() != nil || !errors.Is(err, errNoCache) {
			return a, err
		}
		c.warnOnce.Do(func() {
			c.logger.Warn("cannot share SSH gateway tokens with other amelia processes: they may revoke each other's", "dir", c.dir, "error", err)
		})
	}
	if r.usable(r.current) {
		return r.current, nil
	}
	return r.mint(ctx)
}

// validCacheKey is what a sandbox id must look like to name a file.
var validCacheKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// errNoCache marks a cache that cannot be used (its directory or file),
// as opposed to a failed mint.
var errNoCache = errors.New("token cache unusable")

// shared is token through the cache file, locked for its whole length.
func (c *tokenCache) shared(ctx context.Context, r tokenRequest) (api.SSHAccess, error) {
	f, err := c.lock(ctx, r.sandboxID, true)
	if err != nil {
		return api.SSHAccess{}, err
	}
	defer f.Close() // and so unlocked
	cached, err := readToken(f)
	if err != nil {
		// A torn or foreign file: overwritten below.
		c.logger.Debug("unreadable SSH gateway token cache; replacing it", "sandbox", r.sandboxID, "error", err)
	}
	switch {
	case r.usable(cached):
		return cached, nil
	case r.usable(r.current):
		// Not cached yet (or dropped): share the one in hand rather than
		// revoke it with a new one.
		if err := writeToken(f, r.current); err != nil {
			c.logger.Warn("cache the SSH gateway token", "sandbox", r.sandboxID, "error", err)
		}
		return r.current, nil
	}
	a, err := r.mint(ctx)
	if err != nil {
		return api.SSHAccess{}, err
	}
	if err := writeToken(f, a); err != nil {
		c.logger.Warn("cache the SSH gateway token", "sandbox", r.sandboxID, "error", err)
	}
	c.prune(ctx, r.sandboxID)
	return a, nil
}

// staleAfter is how long a cache file may go unwritten before prune looks
// at it: a token in use is renewed more often than that.
const staleAfter = 24 * time.Hour

// prune removes the files of tokens that expired long ago (sandboxes
// deleted elsewhere, or no longer used here), so that the directory does
// not grow without end. It runs when a token is minted, which is rare.
func (c *tokenCache) prune(ctx context.Context, except string) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || id == except || !validCacheKey.MatchString(id) {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < staleAfter {
			continue
		}
		f, err := c.lock(ctx, id, false) // held: in use, so not stale
		if err != nil {
			continue
		}
		if a, err := readToken(f); err != nil || time.Since(a.ExpiresAt) > staleAfter {
			_ = os.Remove(f.Name())
		}
		f.Close()
	}
}

// drop removes the cached token of a sandbox when it is token (whatever
// it is, when token is ""): the token was revoked.
func (c *tokenCache) drop(ctx context.Context, sandboxID, token string) {
	if c.dir == "" || !validCacheKey.MatchString(sandboxID) {
		return
	}
	f, err := c.lock(ctx, sandboxID, true)
	if err != nil {
		c.logger.Debug("drop the cached SSH gateway token", "sandbox", sandboxID, "error", err)
		return
	}
	defer f.Close()
	if cached, _ := readToken(f); token == "" || cached.Token == token {
		// Removed while locked: lock re-opens a file that was removed
		// under it, so no one writes to this one after.
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.logger.Debug("drop the cached SSH gateway token", "sandbox", sandboxID, "error", err)
		}
	}
}

// errLocked is lock's error when it may not wait.
var errLocked = errors.New("locked by another process")

// lock opens the sandbox's cache file (made 0600, in a 0700 directory)
// and takes its exclusive lock, waiting (when wait is set) while another
// process holds it, as long as ctx allows. A file removed or replaced
// while it waited is opened again.
func (c *tokenCache) lock(ctx context.Context, sandboxID string, wait bool) (*os.File, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoCache, err)
	}
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoCache, err)
	}
	path := filepath.Join(c.dir, sandboxID+".json")
	pause := 5 * time.Millisecond
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNoCache, err)
		}
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %w", errNoCache, err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil && samefile(f, path) {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("%w: lock %s: %w", errNoCache, path, err)
		}
		if err != nil && !wait {
			return nil, errLocked
		}
		// Held by another process (which may be minting: a few
		// seconds at most), or replaced: try again.
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for the SSH gateway token cache %s: %w", path, ctx.Err())
		case <-t.C:
		}
		pause = min(pause*2, 200*time.Millisecond)
	}
}

// samefile reports whether the open file is still the one at path (it
// was not removed, or replaced, before the lock was taken).
func samefile(f *os.File, path string) bool {
	open, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(open, now)
}

// readToken reads the cached token: zero when the file is empty.
func readToken(f *os.File) (api.SSHAccess, error) {
	var a api.SSHAccess
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil || len(data) == 0 {
		return a, err
	}
	return a, json.Unmarshal(data, &a)
}

// writeToken replaces the file's content with the token.
func writeToken(f *os.File, a api.SSHAccess) error {
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	return f.Sync()
}
