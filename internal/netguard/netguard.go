// Package netguard finds addresses that the project's tests and benchmarks
// name as connection targets but cannot own: public IP literals and public
// hostnames, and private-range literals that assume someone else's network
// (a Docker default bridge, a LAN). A test may contact only loopback, or an
// address it made itself and found at run time (a listener on a bridge it
// looked up, a container on a network it created), so its files need no
// other literal.
//
// What a file may name:
//   - IP literals: loopback, unspecified, and the documentation ranges
//     (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32), which
//     no network routes;
//   - hostnames as targets (in a URL, HOST:PORT, user@HOST:, /dev/tcp/HOST/,
//     or an argument of a dialling call such as net.Dial or net.LookupHost):
//     single labels, localhost, and names under the reserved .test,
//     .example, .invalid and .localhost (RFC 6761); a name under a real
//     top-level domain (example.com included: it answers) is public.
//
// A file is in scope when tests or benchmarks run it: a _test.go file, a Go
// file of a test-helper package (one whose name ends in "test"), or any file
// under a testdata directory. In Go files only string literals are read,
// not comments.
package netguard

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Finding is a target a file names that no test can own.
type Finding struct {
	Path   string // slash-separated, relative to the scanned root
	Line   int
	Target string // the address or hostname as written
	Reason string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.Path, f.Line, f.Target, f.Reason)
}

// Scan walks root and returns the findings of every file in scope, in
// walk order. Directories named .git, bin or vendor are skipped.
func Scan(root string) ([]Finding, error) {
	var out []Finding
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !underTestdata(rel) && !strings.HasSuffix(rel, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found, err := ScanFile(rel, src)
		if err != nil {
			return err
		}
		out = append(out, found...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s for test targets: %w", root, err)
	}
	return out, nil
}

// ScanFile returns the findings of one file, named by its slash-separated
// path relative to the project's root; nothing for a file out of scope.
func ScanFile(rel string, src []byte) ([]Finding, error) {
	if underTestdata(rel) {
		if bytes.IndexByte(src, 0) >= 0 {
			return nil, nil // binary
		}
		return scanText(rel, 1, string(src), false), nil
	}
	if !strings.HasSuffix(rel, ".go") {
		return nil, nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rel, err)
	}
	if !strings.HasSuffix(rel, "_test.go") && !strings.HasSuffix(f.Name.Name, "test") {
		return nil, nil
	}
	dialled := dialledLiterals(f)
	var out []Finding
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		out = append(out, scanText(rel, fset.Position(lit.Pos()).Line, s, dialled[lit])...)
		return true
	})
	return out, nil
}

// dialCalls are the functions and methods whose string arguments are
// connection targets (or names to resolve) even when they are bare names.
// (Those that take URLs, http.Get and the like, need no entry: a URL is a
// target wherever it is written.)
var dialCalls = map[string]bool{
	"Dial": true, "DialContext": true, "DialTimeout": true, "DialTCP": true, "DialUDP": true,
	"JoinHostPort": true, "LookupHost": true, "LookupIP": true, "LookupIPAddr": true,
	"LookupNetIP": true, "LookupAddr": true, "ResolveTCPAddr": true, "ResolveUDPAddr": true,
	"ResolveIPAddr": true,
}

// dialledLiterals are the string literals passed straight to a dialCall.
func dialledLiterals(f *ast.File) map[*ast.BasicLit]bool {
	m := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var name string
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = fn.Sel.Name
		case *ast.Ident:
			name = fn.Name
		}
		if !dialCalls[name] {
			return true
		}
		for _, a := range call.Args {
			if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				m[lit] = true
			}
		}
		return true
	})
	return m
}

// underTestdata reports whether a slash-separated path is inside a
// testdata directory.
func underTestdata(rel string) bool {
	for dir := path.Dir(rel); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if path.Base(dir) == "testdata" {
			return true
		}
	}
	return false
}

// scanText finds the targets in s, which starts on line first of the file;
// bare says that s as a whole is a host or HOST:PORT (a dialling call's
// argument).
func scanText(rel string, first int, s string, bare bool) []Finding {
	var out []Finding
	report := func(at int, target, reason string) {
		out = append(out, Finding{Path: rel, Line: first + strings.Count(s[:at], "\n"), Target: target, Reason: reason})
	}
	seen := map[int]bool{} // offsets of hosts already judged
	if bare {
		h := s
		if host, _, err := net.SplitHostPort(s); err == nil {
			h = host
		}
		if r := judgeHost(h); r != "" {
			report(0, h, r)
		}
		seen[0] = true
	}
	for _, m := range ipToken.FindAllStringIndex(s, -1) {
		for _, c := range ipCandidates(s[m[0]:m[1]]) {
			if at := m[0] + c.off; !seen[at] {
				if r := judgeIP(c.addr); r != "" {
					report(at, c.text, r)
				}
				seen[at] = true
			}
		}
	}
	for _, re := range hostForms {
		for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
			at := m[2]
			if seen[at] {
				continue
			}
			seen[at] = true
			h := s[m[2]:m[3]]
			if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
				continue // judged as an IP literal
			}
			if r := judgeName(h); r != "" {
				report(at, h, r)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int { return a.Line - b.Line })
	return out
}

// ipToken is a run of the characters an IP literal is written with.
var ipToken = regexp.MustCompile(`[0-9A-Fa-f:.]*[0-9][0-9A-Fa-f:.]*`)

// hostForms are the ways text names a host it connects to; the first group
// is the host.
var hostForms = []*regexp.Regexp{
	// scheme://[user[:password]@]host
	regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://(?:[^/?#@\s"'\x60]*@)?([a-z0-9.-]+)`),
	// HOST:PORT
	regexp.MustCompile(`(?i)(?:^|[^a-z0-9.@/_-])([a-z0-9-]+(?:\.[a-z0-9-]+)+):[0-9]{1,5}\b`),
	// user@HOST: (scp-like git remotes)
	regexp.MustCompile(`(?i)[a-z0-9._-]@([a-z0-9-]+(?:\.[a-z0-9-]+)+):`),
	// bash's /dev/tcp/HOST/PORT
	regexp.MustCompile(`/dev/(?:tcp|udp)/([^/\s"'\x60]+)/`),
}

// candidate is an IP literal within an ipToken.
type candidate struct {
	off  int
	text string
	addr netip.Addr
}

// ipCandidates are the IP literals in a token: the token itself (an IPv6
// literal, perhaps IPv4-mapped), else its colon-separated parts (an IPv4
// HOST:PORT). Dotted runs of another length are versions, not addresses.
func ipCandidates(tok string) []candidate {
	if a, err := netip.ParseAddr(strings.TrimRight(tok, ".")); err == nil && (a.Is6() || strings.Count(tok, ":") == 0) {
		return []candidate{{0, strings.TrimRight(tok, "."), a}}
	}
	var out []candidate
	off := 0
	for part := range strings.SplitSeq(tok, ":") {
		p := strings.TrimRight(part, ".")
		if strings.Count(p, ".") == 3 {
			if a, err := netip.ParseAddr(p); err == nil {
				out = append(out, candidate{off, p, a})
			}
		}
		off += len(part) + 1
	}
	return out
}

// docRanges are reserved for documentation: no network routes them.
var docRanges = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// judgeIP says why a literal address is no test's to contact, or "".
func judgeIP(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() || a.IsUnspecified() {
		return ""
	}
	for _, p := range docRanges {
		if p.Contains(a) {
			return ""
		}
	}
	if a.IsPrivate() || a.IsLinkLocalUnicast() {
		return "a private-range address no test created: find the address the test made at run time (a listener's, a network's gateway), or use a documentation address (192.0.2.0/24, 2001:db8::/32) for one that is never contacted"
	}
	return "a public address: contact a listener the test starts instead, or use a documentation address (192.0.2.0/24, 2001:db8::/32) for one that is never contacted"
}

// judgeHost judges a host that is an IP literal or a name.
func judgeHost(h string) string {
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return judgeIP(a)
	}
	return judgeName(h)
}

// reservedTLDs never resolve on the public internet (RFC 6761).
var reservedTLDs = []string{"test", "example", "invalid", "localhost"}

// judgeName says why a hostname is no test's to contact, or "".
func judgeName(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	i := strings.LastIndexByte(h, '.')
	if i < 0 {
		return "" // a single label: localhost, a container on the test's network
	}
	tld := h[i+1:]
	if slices.Contains(reservedTLDs, tld) {
		return ""
	}
	if _, icann := publicsuffix.PublicSuffix(tld); !icann {
		return "" // not a domain: a file name, a Go field
	}
	return "a public hostname: serve it on loopback and name that, or use a reserved name (.test, .example, .invalid) for one that is never contacted"
}
