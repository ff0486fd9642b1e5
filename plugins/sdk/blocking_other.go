//go:build !unix

package sdk

// setBlocking: no data channel, so no pipe from it, here.
func setBlocking(uintptr) error { return nil }
