package sshtransport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// HostKeyPolicy says what to do with a host whose key is not known yet. A
// known host whose key changed is always refused.
type HostKeyPolicy string

const (
	// Strict refuses unknown hosts, naming the line to add.
	Strict HostKeyPolicy = "strict"
	// AcceptNew records an unknown host's key in the known_hosts file and
	// trusts it from then on (OpenSSH's StrictHostKeyChecking=accept-new).
	AcceptNew HostKeyPolicy = "accept-new"
)

// HostKeys verifies host keys against a known_hosts file.
type HostKeys struct {
	file   string
	policy HostKeyPolicy
	db     *knownhosts.HostKeyDB

	mu       sync.Mutex
	accepted map[string]ssh.PublicKey // recorded by this process under accept-new
}

// KnownHosts reads the known_hosts file (a missing one is empty) for a
// policy.
func KnownHosts(file string, policy HostKeyPolicy) (*HostKeys, error) {
	if policy != Strict && policy != AcceptNew {
		return nil, sdk.Errorf(sdk.ErrInvalid, "host key policy %q is not strict or accept-new", policy)
	}
	var files []string
	if _, err := os.Stat(file); err == nil {
		files = append(files, file)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("known hosts %s: %w", file, err)
	}
	db, err := knownhosts.NewDB(files...)
	if err != nil {
		return nil, sdk.Errorf(sdk.ErrInvalid, "known hosts %s: %v", file, err)
	}
	return &HostKeys{file: file, policy: policy, db: db, accepted: map[string]ssh.PublicKey{}}, nil
}

// Algorithms are the host key algorithms to ask addr for: those of its
// known keys, so a host known by its RSA key is not asked for ed25519 and
// then taken for a changed host. Nil lets the client choose.
func (h *HostKeys) Algorithms(addr string) []string {
	return h.db.HostKeyAlgorithms(addr)
}

// Callback verifies the key a host presents when dialled as addr.
func (h *HostKeys) Callback() ssh.HostKeyCallback {
	check := h.db.HostKeyCallback()
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := check(hostname, remote, key)
		switch {
		case err == nil:
			return nil
		case knownhosts.IsHostKeyChanged(err):
			return sdk.Errorf(sdk.ErrPermission, "REMOTE HOST IDENTIFICATION HAS CHANGED: %s offers the %s key %s, but %s holds another one for it; someone may be intercepting the connection. If the host was reinstalled, remove its old line (ssh-keygen -R %s -f %s) and connect again",
				hostname, key.Type(), ssh.FingerprintSHA256(key), h.file, knownhosts.Normalize(hostname), h.file)
		case !knownhosts.IsHostUnknown(err):
			return fmt.Errorf("check the host key of %s: %w", hostname, err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if k, ok := h.accepted[knownhosts.Normalize(hostname)]; ok {
			if string(k.Marshal()) == string(key.Marshal()) {
				return nil
			}
			return sdk.Errorf(sdk.ErrPermission, "REMOTE HOST IDENTIFICATION HAS CHANGED: %s offers the %s key %s, not the one just recorded in %s", hostname, key.Type(), ssh.FingerprintSHA256(key), h.file)
		}
		line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
		if h.policy == Strict {
			return sdk.Errorf(sdk.ErrPermission, "the host key of %s is not known (%s %s): check it, then add this line to %s: %s (or set ssh.host_key_policy: accept-new)",
				hostname, key.Type(), ssh.FingerprintSHA256(key), h.file, line)
		}
		if err := appendLine(h.file, line); err != nil {
			return fmt.Errorf("record the host key of %s in %s: %w", hostname, h.file, err)
		}
		h.accepted[knownhosts.Normalize(hostname)] = key
		return nil
	}
}

// appendLine adds a line to a known_hosts file, creating it (0600, in a
// 0700 directory) when missing.
func appendLine(file, line string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.TrimSuffix(line, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
