// Package sharedtest finds the shared provider plugins (pluginclient.Share) that a
// test's amelia started, and stops them when the test ends: a shared
// plugin outlives the runs that used it, not the test.
package sharedtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Plugins are the running shared plugins whose sockets are under dir.
func Plugins(dir string) []int {
	return Processes(func(_, environ []byte) bool {
		return bytes.Contains(environ, []byte("\x00AMELIA_PROVIDER_SHARED="+filepath.Clean(dir)+"/"))
	})
}

// Processes are the running processes (not zombies) whose command line and
// environment (NUL-separated, each with a NUL in front) match, in order.
func Processes(match func(cmdline, environ []byte) bool) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		environ, err := os.ReadFile(dir + "/environ")
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		if match(append([]byte{0}, cmdline...), append([]byte{0}, environ...)) && Running(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// Running reports whether pid runs (a zombie has ended).
func Running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// WaitGone waits for pid to end, failing the test if it has not within a
// minute.
func WaitGone(t testing.TB, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); Running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) did not end", what, pid)
		}
	}
}

// Stop stops the shared plugins under dir (SIGTERM, as a user would) and
// waits for each to end.
func Stop(t testing.TB, dir string) {
	t.Helper()
	for _, pid := range Plugins(dir) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		WaitGone(t, pid, "a shared provider plugin told to stop")
	}
}
