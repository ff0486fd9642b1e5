package image

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// bootstrap-base.sh makes its base from BaseCore, which the tests check
// its label against.
func TestBaseCoreAgrees(t *testing.T) {
	m := regexp.MustCompile(`(?m)^core=(\S*)$`).FindSubmatch(Bootstrap)
	if m == nil || !slices.Equal(strings.Split(string(m[1]), ","), BaseCore) {
		t.Errorf("bootstrap-base.sh's core list is %q; image.BaseCore is %q", m, BaseCore)
	}
}

// The toolchain is listed three times: in Go (the default of
// docker.packages), as the Dockerfile's PACKAGES default (a build by hand)
// and in bootstrap-base.sh (the base made without a registry, which must
// hold it so that the build installs nothing). They must not drift.
func TestToolchainListsAgree(t *testing.T) {
	for _, tc := range []struct {
		file, pattern, sep string
		text               []byte
	}{
		{file: "Dockerfile", text: Dockerfile, pattern: `(?m)^ARG PACKAGES="([^"]*)"$`, sep: " "},
		{file: "bootstrap-base.sh", text: Bootstrap, pattern: `(?m)^toolchain=(\S*)$`, sep: ","},
	} {
		m := regexp.MustCompile(tc.pattern).FindSubmatch(tc.text)
		if m == nil {
			t.Errorf("%s: no line matching %s", tc.file, tc.pattern)
			continue
		}
		if got := strings.Split(string(m[1]), tc.sep); !slices.Equal(got, Toolchain) {
			t.Errorf("%s lists the toolchain as %q; image.Toolchain is %q", tc.file, got, Toolchain)
		}
	}
}
