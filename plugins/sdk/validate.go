package sdk

import (
	"regexp"
	"strings"
)

// nameRule is a name's characters; ValidName checks its length apart,
// since a bounded repetition ({0,62}) compiles to as many copies of the
// class, built at every start of every program that links the SDK.
var nameRule = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ValidName reports whether s is a valid sandbox or provider name. Names
// become container names, directory names, labels and binary names, so they
// are limited to lower-case letters, digits, '-' and '_', start with a letter
// or digit, and are at most 63 characters. Profile names follow the same
// rule, since they become sandbox names.
func ValidName(s string) bool { return len(s) <= 63 && nameRule.MatchString(s) }

// ValidateName checks a sandbox name (see ValidName).
func ValidateName(name string) error {
	if !ValidName(name) {
		return Errorf(ErrInvalid, "sandbox name %q is not valid: use 1-63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// validateExec checks what every provider relies on, so a provider never sees
// a request that could not be run safely.
func validateExec(r ExecRequest) error {
	if err := ValidateName(r.Sandbox.Name); err != nil {
		return err
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return Errorf(ErrInvalid, "exec needs a command: argv is empty")
	}
	for _, a := range r.Argv {
		if strings.ContainsRune(a, 0) {
			return Errorf(ErrInvalid, "exec argument %q contains a NUL byte", a)
		}
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return Errorf(ErrInvalid, "exec environment variable %q is not valid: names are non-empty without '=' or NUL, values without NUL", k)
		}
	}
	if strings.ContainsRune(r.Dir, 0) || strings.ContainsRune(r.User, 0) {
		return Errorf(ErrInvalid, "exec dir or user contains a NUL byte")
	}
	if r.CancelGrace < 0 || r.Timeout < 0 {
		return Errorf(ErrInvalid, "exec cancel grace and timeout must not be negative")
	}
	return nil
}

func validateSpec(s Spec) error {
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	for i, c := range s.Setup {
		if len(c.Argv) == 0 || c.Argv[0] == "" {
			return Errorf(ErrInvalid, "setup command %d is empty", i+1)
		}
		for _, a := range c.Argv {
			if strings.ContainsRune(a, 0) {
				return Errorf(ErrInvalid, "setup command %d holds a NUL byte", i+1)
			}
		}
	}
	return validateNetwork(s.Network)
}

func validateNetwork(n NetworkPolicy) error {
	switch n.Mode {
	case NetworkOpen, NetworkAllowlist, NetworkNone:
		return nil
	}
	return Errorf(ErrInvalid, "network mode %q is not one of open, allowlist, none", n.Mode)
}
