package sdktest

import (
	"context"
	"testing"
)

// T is what the kit needs of a test: the methods of *testing.T it calls, with
// Run taking a func(T). Run adapts a *testing.T; RunT takes any T, so the
// kit can be driven by something else than `go test` — its own self-tests
// drive it with a recorder, to see that a broken provider fails the case it
// should.
//
// Fatalf and Skipf end the calling goroutine (runtime.Goexit), as they do in
// package testing, and Context ends before the Cleanup functions run.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	Context() context.Context
	TempDir() string
	// Run runs f as a subtest called name and reports whether it passed.
	Run(name string, f func(T)) bool
}

// testingT is a *testing.T as a T.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(T)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}
