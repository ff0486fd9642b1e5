//go:build unix && !linux

package local

// killTagged is a no-op without /proc: only the execs still running are
// killed on Teardown.
func killTagged(string) {}
