package proxy

import (
	"net/netip"
	"strings"
)

// normalizeHost lower-cases a host (no port) and drops one trailing dot.
// It reports false for anything that is neither an IP address (without a
// zone) nor a DNS name: letters, digits, "-" and "_" in dot-separated
// labels, the last one not all digits (so "2130706433" or "0x7f.1" are not
// taken for names).
func normalizeHost(host string) (string, bool) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String(), ip.Zone() == ""
	}
	if h == "" || len(h) > 253 {
		return "", false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", false
	}
	return h, true
}

// MatchHost reports whether host (a name or an IP address, without a port)
// is allowed by patterns: a pattern is an exact name, "*.domain" (any name
// ending in ".domain", not domain itself), or an IP address, which matches
// only that address. Names never match IP patterns and IP addresses never
// match wildcards. Case and one trailing dot are ignored.
func MatchHost(host string, patterns []string) bool {
	h, ok := normalizeHost(host)
	if !ok {
		return false
	}
	_, ipErr := netip.ParseAddr(h)
	for _, p := range patterns {
		p = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(p)), ".")
		if suffix, ok := strings.CutPrefix(p, "*."); ok {
			if ipErr == nil || suffix == "" {
				continue
			}
			if strings.HasSuffix(h, "."+suffix) {
				return true
			}
			continue
		}
		if pip, err := netip.ParseAddr(p); err == nil {
			if ipErr == nil && pip.Unmap().String() == h {
				return true
			}
			continue
		}
		if ipErr != nil && h == p {
			return true
		}
	}
	return false
}
