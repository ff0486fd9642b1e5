package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// killTagged SIGKILLs every process whose environment holds tag (NAME=value):
// the background processes a sandbox's execs left behind, in whatever process
// group or session they ended up. Only processes started by the sandbox carry
// the tag, so a user's own shell sitting in the sandbox directory is safe.
//
// A process in the middle of execve briefly shows an empty environment, so
// the scan runs twice: whatever one pass could not read, the next one can.
func killTagged(tag string) {
	want := append([]byte(tag), 0)
	for range 2 {
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, proc := range procs {
			pid, err := strconv.Atoi(filepath.Base(proc))
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join(proc, "environ"))
			if err != nil {
				continue // gone, or not ours to read
			}
			if bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...)) {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}
