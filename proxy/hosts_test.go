package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMatchHost(t *testing.T) {
	patterns := []string{"github.com", "*.githubusercontent.com", "pypi.org.", "192.0.2.5", "2001:db8::1", "*.Example.NET"}
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"github.com", true},
		{"GitHub.COM", true},
		{"github.com.", true},
		{"api.github.com", false},
		{"github.com.evil.test", false},
		{"evilgithub.com", false},
		{"raw.githubusercontent.com", true},
		{"a.b.githubusercontent.com", true},
		{"githubusercontent.com", false},
		{"xgithubusercontent.com", false},
		{"pypi.org", true},
		{"www.example.net", true},
		{"192.0.2.5", true},
		{"::ffff:192.0.2.5", true},
		{"192.0.2.6", false},
		{"2001:db8:0:0::1", true},
		{"2001:db8::1%eth0", false},
		{"127.0.0.1", false},
		{"2130706433", false},
		{"0x7f.1", false},
		{"", false},
		{"github.com:443", false},
		{"*.githubusercontent.com", false},
		{"git hub.com", false},
	} {
		if got := MatchHost(tc.host, patterns); got != tc.want {
			t.Errorf("MatchHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
	if MatchHost("203.0.113.4", []string{"*.4"}) || MatchHost("4", []string{"*.4"}) {
		t.Error("a wildcard matched an IP address")
	}
}

// FuzzMatchHost checks what a match may mean, whatever the inputs: the
// host is exactly an allowed name, a subdomain of a wildcard's domain, or
// an allowed IP address; a name that merely starts with an allowed one
// never matches; and case does not matter.
func FuzzMatchHost(f *testing.F) {
	for _, s := range [][2]string{
		{"github.com", "github.com"}, {"a.b.c", "*.b.c"}, {"b.c", "*.b.c"}, {"github.com.evil.test", "github.com"},
		{"::ffff:203.0.113.4", "203.0.113.4"}, {"203.0.113.4", "*.113.4"}, {"x.", "x"}, {"A.B", "a.b"}, {"", "*."},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, host, pattern string) {
		got := MatchHost(host, []string{pattern})
		if got != MatchHost(strings.ToUpper(host), []string{pattern}) && strings.ToUpper(host) != host {
			// Upper-casing may change non-ASCII bytes, which are never
			// valid; only compare when the host was ASCII.
			if isASCII(host) {
				t.Fatalf("MatchHost(%q, %q) depends on case", host, pattern)
			}
		}
		if !got {
			return
		}
		h, ok := normalizeHost(host)
		if !ok {
			t.Fatalf("MatchHost(%q, %q) = true for an invalid host", host, pattern)
		}
		p := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(pattern)), ".")
		if hip, err := netip.ParseAddr(h); err == nil {
			pip, err := netip.ParseAddr(p)
			if err != nil || pip.Unmap() != hip.Unmap() {
				t.Fatalf("IP %q matched %q", host, pattern)
			}
			return
		}
		if suffix, ok := strings.CutPrefix(p, "*."); ok {
			if !strings.HasSuffix(h, "."+suffix) || h == suffix {
				t.Fatalf("%q matched wildcard %q", host, pattern)
			}
			return
		}
		if h != p {
			t.Fatalf("%q matched %q", host, pattern)
		}
		if MatchHost(host+".evil.test", []string{pattern}) {
			t.Fatalf("%q.evil.test matched %q", host, pattern)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
