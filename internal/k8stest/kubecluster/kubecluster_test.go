package kubecluster

import (
	"context"
	"testing"
)

// The module's go.mod points the staging modules at staging/, which its
// zip lacks: they go to the published modules of the same version, and
// the unpublished samples go.
func TestGoModRewrite(t *testing.T) {
	in := `replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/sample-controller => ./staging/src/k8s.io/sample-controller
	k8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
	github.com/x/y => github.com/x/y v1.0.0
)
`
	want := `replace (
	k8s.io/api => k8s.io/api v0.34.4
	k8s.io/client-go => k8s.io/client-go v0.34.4
	github.com/x/y => github.com/x/y v1.0.0
)
`
	got := stagingReplace.ReplaceAllString(sampleReplace.ReplaceAllString(in, ""), "${1}${2} => ${2} v0.34.4")
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{newID(), true},
		{"0123abcd", true},
		{"0123abc", false},
		{"0123abcde", false},
		{"0123ABCD", false},
		{"../../../", false},
	} {
		if got := validID(tc.id); got != tc.want {
			t.Errorf("validID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/tab\011x`: "/tab\tx"} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// The veth's subnet is a /30 of vethRange that no host route or address
// overlaps.
func TestPickSubnet(t *testing.T) {
	p, err := pickSubnet(context.Background())
	if err != nil {
		t.Skipf("no ip command here: %v", err)
	}
	if p.Bits() != 30 || !vethRange.Contains(p.Addr()) || p.Masked() != p {
		t.Errorf("pickSubnet() = %v, want a /30 in %v", p, vethRange)
	}
}
