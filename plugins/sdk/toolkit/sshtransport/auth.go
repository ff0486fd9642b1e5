package sshtransport

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Auth is how to log in: the keys of an ssh-agent and private key files.
type Auth struct {
	// AgentSocket is the agent's socket (SSH_AUTH_SOCK); empty for none.
	AgentSocket string
	// IdentityFiles are private keys, tried after the agent's. A key with
	// a passphrase must be in the agent: amelia asks for no passphrase.
	IdentityFiles []string
	// Optional marks the identity files as defaults (~/.ssh/id_*): one
	// that does not exist is skipped rather than an error.
	Optional bool
}

// signers loads the keys. The agent's connection is closed by close.
func (a Auth) signers() (signers func() ([]ssh.Signer, error), described []string, close func(), err error) {
	var ag agent.ExtendedAgent
	close = func() {}
	if a.AgentSocket != "" {
		if c, err := net.Dial("unix", a.AgentSocket); err == nil {
			ag = agent.NewClient(c)
			close = func() { c.Close() }
			described = append(described, "the ssh-agent at "+a.AgentSocket)
		}
	}
	var inAgent []ssh.PublicKey
	if ag != nil {
		keys, _ := ag.List()
		for _, k := range keys {
			inAgent = append(inAgent, k)
		}
	}
	var fileSigners []ssh.Signer
	for _, f := range a.IdentityFiles {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) && a.Optional {
			continue
		}
		if err != nil {
			close()
			return nil, nil, nil, sdk.Errorf(sdk.ErrInvalid, "identity file: %v", err)
		}
		s, err := ssh.ParsePrivateKey(b)
		var missing *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &missing):
			if missing.PublicKey != nil && holds(inAgent, missing.PublicKey) {
				continue // the agent signs with it
			}
			close()
			return nil, nil, nil, sdk.Errorf(sdk.ErrPermission, "identity file %s has a passphrase and no ssh-agent holds the key: add it with `ssh-add %s` (and set SSH_AUTH_SOCK); amelia does not ask for passphrases", f, f)
		case err != nil:
			close()
			return nil, nil, nil, sdk.Errorf(sdk.ErrInvalid, "identity file %s: %v", f, err)
		}
		fileSigners = append(fileSigners, s)
		described = append(described, f)
	}
	signers = func() ([]ssh.Signer, error) {
		var all []ssh.Signer
		if ag != nil {
			s, err := ag.Signers()
			if err != nil {
				return nil, fmt.Errorf("ask the ssh-agent for its keys: %w", err)
			}
			all = append(all, s...)
		}
		return append(all, fileSigners...), nil
	}
	return signers, described, close, nil
}

// holds reports whether keys include key.
func holds(keys []ssh.PublicKey, key ssh.PublicKey) bool {
	for _, k := range keys {
		if string(k.Marshal()) == string(key.Marshal()) {
			return true
		}
	}
	return false
}
