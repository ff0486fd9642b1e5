package benchtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// every Linux the kernel's ABI allows).
const userHZ = 100

// CPUMeter reads the CPU time (user+sys) spent by this process, by its
// children that have been waited for, and by other processes it was told
// about (a plugin this process started but has not reaped yet) with their
// own waited-for children. Read before and after a piece of work, it tells
// what the work cost the whole tree, whichever process did it: a baseline
// that runs a child (a pipe, the docker CLI, ssh) and a plugin path that runs
// the same command under a plugin are measured alike.
type CPUMeter struct {
	pids []int
}

// NewCPUMeter measures this process and its reaped children, and pids
// with theirs.
func NewCPUMeter(pids ...int) *CPUMeter { return &CPUMeter{pids: pids} }

// Now is the CPU time spent so far.
func (m *CPUMeter) Now(b testing.TB) time.Duration {
	b.Helper()
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatalf("getrusage: %v", err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, pid := range m.pids {
		t, err := procCPU(pid)
		if err != nil {
			b.Fatalf("CPU time of process %d: %v", pid, err)
		}
		total += t
	}
	return total
}

// procCPU is utime+stime+cutime+cstime of pid, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// fields 14-17 (utime, stime, cutime, cstime) follow field 3, the
	// first after it.
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// CPUPerGiB reports the CPU time ours and base took for b.N runs of n
// bytes each, per GiB moved, as <ours>-cpu-s/GiB and <base>-cpu-s/GiB,
// and what ours costs beyond base as extra-cpu-s/GiB.
func CPUPerGiB(b *testing.B, n int64, ours, base time.Duration, oursName, baseName string) {
	gib := float64(b.N) * float64(n) / (1 << 30)
	b.ReportMetric(ours.Seconds()/gib, oursName+"-cpu-s/GiB")
	b.ReportMetric(base.Seconds()/gib, baseName+"-cpu-s/GiB")
	b.ReportMetric((ours-base).Seconds()/gib, "extra-cpu-s/GiB")
}

// Zeros reads as N zero bytes.
type Zeros struct{ N int64 }

func (z *Zeros) Read(p []byte) (int, error) {
	if z.N <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), z.N)]
	clear(p)
	z.N -= int64(len(p))
	return len(p), nil
}

// Feed runs cmd, writes n zero bytes to its stdin as a pipe would be
// written, closes it, and fails the benchmark unless cmd ends well.
func Feed(b *testing.B, cmd *exec.Cmd, n int64) {
	b.Helper()
	pipe, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	written, err := io.CopyBuffer(pipe, &Zeros{N: n}, make([]byte, 128<<10))
	if err != nil || written != n {
		b.Fatalf("%s: wrote %d bytes, %v; want %d", cmd, written, err, n)
	}
	if err := pipe.Close(); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%s: %v", cmd, err)
	}
}

// Transfer measures side by side the runs of ours and of base that each
// move N bytes: wall time and CPU time (by Meter) for each, reported by
// Report as Throughput and CPUPerGiB do.
type Transfer struct {
	N     int64
	Meter *CPUMeter

	oursWall, baseWall, oursCPU, baseCPU time.Duration
}

// Ours runs one run of ours and adds what it took.
func (t *Transfer) Ours(b *testing.B, run func()) {
	b.Helper()
	wall, cpu := t.measure(b, run)
	t.oursWall += wall
	t.oursCPU += cpu
}

// Base runs one run of the baseline and adds what it took.
func (t *Transfer) Base(b *testing.B, run func()) {
	b.Helper()
	wall, cpu := t.measure(b, run)
	t.baseWall += wall
	t.baseCPU += cpu
}

func (t *Transfer) measure(b *testing.B, run func()) (wall, cpu time.Duration) {
	b.Helper()
	c0, w0 := t.Meter.Now(b), time.Now()
	run()
	return time.Since(w0), t.Meter.Now(b) - c0
}

// Report reports throughput, ratio and CPU per GiB of ours and base.
func (t *Transfer) Report(b *testing.B, oursName, baseName string) {
	Throughput(b, t.N, t.oursWall, t.baseWall, oursName, baseName)
	CPUPerGiB(b, t.N, t.oursCPU, t.baseCPU, oursName, baseName)
}
