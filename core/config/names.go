package config

import (
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// nameRule describes sdk.ValidName for messages.
const nameRule = `lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`

// validEnvName reports whether s is a portable environment variable name:
// ^[A-Za-z_][A-Za-z0-9_]*$.
func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// looksLikeSecret reports whether s, given where a variable's name is
// expected, is more likely a token or key: GitHub's token prefixes (whose
// tokens are valid variable names), or 32 or more characters mixing
// lower case, upper case and digits, which names do not.
func looksLikeSecret(s string) bool {
	for _, p := range []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	if len(s) < 32 {
		return false
	}
	var lower, upper, digit bool
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		}
	}
	return lower && upper && digit
}

// sizeUnit returns the bytes in a unit parseSize accepts (lowercased).
func sizeUnit(u string) (int64, bool) {
	switch u {
	case "", "b":
		return 1, true
	case "kb":
		return 1e3, true
	case "mb":
		return 1e6, true
	case "gb":
		return 1e9, true
	case "kib":
		return 1 << 10, true
	case "mib":
		return 1 << 20, true
	case "gib":
		return 1 << 30, true
	}
	return 0, false
}

// parseSize reads a number of bytes: digits, then optionally spaces and a
// unit B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024),
// in any case. A size that does not fit in an int64 is math.MaxInt64.
func parseSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, false
	}
	unit, ok := sizeUnit(strings.ToLower(strings.TrimLeft(s[i:], " ")))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/unit {
		return math.MaxInt64, true // only digits: the number is too large
	}
	return n * unit, true
}

// formatSize writes n bytes with the unit that divides it exactly into
// the smallest number (10MiB, 2GB, 1500), which parseSize reads back.
func formatSize(n int64) string {
	best, unit := n, ""
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if n != 0 && n%u.size == 0 && n/u.size < best {
			best, unit = n/u.size, u.name
		}
	}
	return strconv.FormatInt(best, 10) + unit
}

// validHost reports whether s (already lowercased) is a hostname, a
// "*."-wildcard of one, or an IP address literal (without zone).
func validHost(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Zone() == ""
	}
	return validHostname(strings.TrimPrefix(s, "*."))
}

// validTarget reports whether s (already lowercased) is HOST:PORT for a
// direct TCP connection: a hostname or an IP address (IPv6 in brackets),
// no wildcard, and a port from 1 to 65535.
func validTarget(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.HasPrefix(host, "*.") || !validHost(host) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == port
}

// validHostname checks DNS syntax: dot-separated labels of 1-63 letters,
// digits, "-" (not at either end) and "_", at most 253 characters, and a
// last label that is not all digits (which would be a malformed IP).
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

// isSecretKey reports whether a value stored under key must be masked when
// shown: api_key, apikey, token, secret, password, passphrase, private_key,
// or a key ending in _token, _secret, _password or _key, compared
// case-insensitively with "-" and camelCase read as "_" (so apiKey and
// access-token count). Keys ending in _env name a variable, not a secret.
func isSecretKey(key string) bool {
	k := snakeCase(key)
	if strings.HasSuffix(k, "_env") {
		return false
	}
	switch k {
	case "api_key", "apikey", "token", "secret", "password", "passphrase", "private_key":
		return true
	}
	for _, suf := range []string{"_token", "_secret", "_password", "_key"} {
		if strings.HasSuffix(k, suf) {
			return true
		}
	}
	return false
}

// snakeCase lowercases key, turning "-" and camelCase humps into "_".
func snakeCase(key string) string {
	var b strings.Builder
	rs := []rune(key)
	for i, r := range rs {
		switch {
		case r == '-':
			b.WriteByte('_')
		case unicode.IsUpper(r):
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
