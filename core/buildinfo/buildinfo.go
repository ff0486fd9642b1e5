// Package buildinfo says which build of amelia is running.
package buildinfo

import "runtime/debug"

// version is set at link time by the Makefile:
// -ldflags "-X github.com/amelia-sandbox/amelia/core/buildinfo.version=v1.2.3".
var version string

// Version is the release version, or "dev" plus the VCS revision when built
// from a checkout without one.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}
