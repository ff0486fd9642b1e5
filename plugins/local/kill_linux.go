package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// killTagged SIGKILLs every process whose environment holds tag (NAME=value):
// the background processes a sandbox's execs left behind, in whatever
// process group they ended up.
func killTagged(tag string) {
	want := append([]byte(tag), 0)
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range paths {
		env, err := os.ReadFile(p)
		if err != nil {
			continue // gone, or not ours to read
		}
		if !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
