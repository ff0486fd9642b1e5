package gitcredential

import (
	"bytes"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Message
		err      string
	}{
		{name: "blank line ends it", in: "protocol=https\nhost=github.com\n\nignored=1\n",
			want: Message{{"protocol", "https"}, {"host", "github.com"}}},
		{name: "EOF ends it", in: "host=github.com", want: Message{{"host", "github.com"}}},
		{name: "CRLF", in: "host=github.com\r\npath=a/b\r\n\r\n", want: Message{{"host", "github.com"}, {"path", "a/b"}}},
		{name: "value with =", in: "password=a=b\n", want: Message{{"password", "a=b"}}},
		{name: "repeated keys kept in order", in: "wwwauth[]=Basic\nwwwauth[]=Bearer\n",
			want: Message{{"wwwauth[]", "Basic"}, {"wwwauth[]", "Bearer"}}},
		{name: "empty", in: "", want: nil},
		{name: "no =", in: "host\n", err: `malformed credential line "host"`},
		{name: "empty key", in: "=x\n", err: "malformed"},
		{name: "NUL", in: "host=a\x00b\n", err: "malformed"},
		{name: "lone CR", in: "host=a\rb\n", err: "malformed"},
		{name: "too long", in: "password=" + strings.Repeat("x", MaxMessage) + "\n", err: "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Read(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !equal(got, tc.want) {
				t.Fatalf("Read(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct{ in, protocol, host string }{
		{"protocol=https\nhost=GitHub.com\n", "https", "github.com"},
		{"protocol=http\nhost=127.0.0.1:8080\n", "http", "127.0.0.1:8080"},
		{"url=https://Host.example:8443/org/repo.git\n", "https", "host.example:8443"},
		{"path=org/repo\n", "", ""},
	} {
		m, err := Read(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if p, h := m.Target(); p != tc.protocol || h != tc.host {
			t.Errorf("Target of %q = %q, %q; want %q, %q", tc.in, p, h, tc.protocol, tc.host)
		}
	}
}

func equal(a, b Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzRead: Read never panics, accepts only well-formed attributes, and
// what it accepts reads back the same from its rendering.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"protocol=https\nhost=github.com\npath=org/repo.git\n\n",
		"url=https://x@host.example/\n", "a=\r\n", "=\n", "x", "\x00=\n", "k=v\n\nk2=v2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Read(bytes.NewReader(in))
		if err != nil {
			return
		}
		for _, a := range m {
			if a.Key == "" || strings.ContainsAny(a.Key, "=\n\r\x00") || strings.ContainsAny(a.Value, "\n\r\x00") {
				t.Fatalf("accepted bad attribute %q=%q from %q", a.Key, a.Value, in)
			}
		}
		again, err := Read(bytes.NewReader(m.Bytes()))
		if err != nil || !equal(again, m) {
			t.Fatalf("round trip of %q: %v, %v; want %v", in, again, err, m)
		}
		m.Target() // must not panic
	})
}
