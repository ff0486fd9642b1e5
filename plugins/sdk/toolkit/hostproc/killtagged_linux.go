package hostproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// KillTagged SIGKILLs every process whose environment holds tag (NAME=value)
// and that this process may signal: what execs left behind in the
// background, in whatever process group or session they ended up. Give
// every exec of a sandbox the tag, and a process of the machine's own
// (a user's shell sitting in the sandbox directory) is safe from it.
//
// A process in the middle of execve briefly shows an empty environment (on
// a loaded machine, for longer than one scan takes), so the scan repeats,
// a little apart, until two passes in a row find nothing to kill.
func KillTagged(tag string) {
	const maxPasses, pause = 20, 10 * time.Millisecond
	want := append([]byte(tag), 0)
	for pass, quiet := 0, 0; pass < maxPasses && quiet < 2; pass++ {
		if pass > 0 {
			time.Sleep(pause)
		}
		killed := 0
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
				if unix.Kill(pid, unix.SIGKILL) == nil {
					killed++
				}
			}
		}
		if killed == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}
