package shexec_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/shexec"
)

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":       "plain",
		"a/b.c=d:e@f": "a/b.c=d:e@f",
		"":            "''",
		"a b":         "'a b'",
		"it's":        `'it'\''s'`,
		"$HOME;rm":    "'$HOME;rm'",
		"new\nline":   "'new\nline'",
	} {
		if got := shexec.Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// start runs line with sh as a session leader, as sshd starts a session's
// command, and returns its stdout, its control-filtered stderr, and its end.
func start(t *testing.T, line string) (*bytes.Buffer, *shexec.Control, *bytes.Buffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	ctl := shexec.NewControl(&errb)
	cmd.Stdout, cmd.Stderr = &out, ctl
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return &out, ctl, &errb, cmd
}

// The command line runs argv in dir with env, and reports the pid on
// stderr, which Control takes off before the command's own stderr.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	line := shexec.Command{Dir: dir, Env: map[string]string{"GREETING": "it's a b"}, Tag: "t1", Require: dir, Argv: []string{"sh", "-c", `printf '%s|%s|%s' "$GREETING" "$(pwd)" "$AMELIA_EXEC_ID"; echo oops >&2; exit 4`}}.Line()
	out, ctl, errb, cmd := start(t, line)
	err := cmd.Wait()
	ctl.Finish()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Errorf("exit: %v, want 4", err)
	}
	if want := "it's a b|" + dir + "|t1"; out.String() != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if errb.String() != "oops\n" || ctl.Pid() != cmd.Process.Pid || ctl.NoDir() {
		t.Errorf("stderr %q pid %d (want %d) nodir %v", errb, ctl.Pid(), cmd.Process.Pid, ctl.NoDir())
	}

	_, ctl, _, cmd = start(t, shexec.Command{Dir: "/no/such/dir", Tag: "t2", Argv: []string{"true"}}.Line())
	err = cmd.Wait()
	ctl.Finish()
	if !ctl.NoDir() || ctl.NoSandbox() || err == nil {
		t.Errorf("a missing dir: nodir %v nosandbox %v, exit %v", ctl.NoDir(), ctl.NoSandbox(), err)
	}
	marker := filepath.Join(dir, "gone")
	out, ctl, _, cmd = start(t, shexec.Command{Tag: "t3", Require: marker, Argv: []string{"touch", marker}}.Line())
	err = cmd.Wait()
	ctl.Finish()
	if _, serr := os.Stat(marker); !ctl.NoSandbox() || err == nil || serr == nil {
		t.Errorf("a missing required file: nosandbox %v, exit %v, and the command ran: %v", ctl.NoSandbox(), err, serr == nil)
	}
}

// Output before the wrapper ran has no control line: it passes whole,
// split across writes or not, and so does a long first line.
func TestControlPassesOtherStderr(t *testing.T) {
	for _, writes := range [][]string{
		{"OCI runtime exec failed: ", "unable to find user x\n"},
		{"no newline at all"},
		{strings.Repeat("x", 100) + "\n", "more\n"},
		{"amelia-exec:pid=notanumber\n"},
	} {
		var b bytes.Buffer
		c := shexec.NewControl(&b)
		for _, w := range writes {
			c.Write([]byte(w))
		}
		c.Finish()
		if want := strings.Join(writes, ""); b.String() != want || c.Pid() != 0 {
			t.Errorf("writes %q: passed %q pid %d, want all of it", writes, b.String(), c.Pid())
		}
		select {
		case <-c.Known():
		default:
			t.Errorf("writes %q: Known is not closed after Finish", writes)
		}
	}
}

// Stop kills the group and a tagged process that left it (setsid): TERM
// first, KILL after the grace period when TERM is ignored.
func TestStopKillsGroupAndTagged(t *testing.T) {
	line := shexec.Command{Tag: "t4", Argv: []string{"sh", "-c", `setsid sleep 601 & sleep 602 & trap '' TERM; echo ready; while :; do sleep 0.1; done`}}.Line()
	outR, outW := io.Pipe()
	cmd := exec.Command("sh", "-c", line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ctl := shexec.NewControl(io.Discard)
	cmd.Stdout, cmd.Stderr = outW, ctl
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	ended := make(chan error, 1)
	go func() { err := cmd.Wait(); ctl.Finish(); outW.Close(); ended <- err }()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("read %q %v", buf, err)
	}
	go io.Copy(io.Discard, outR)
	var sent []string
	stopped := time.Now()
	last, err := shexec.Stopper{
		Control: ctl,
		Ended:   ended,
		Signal: func(sig string, pgid int) error {
			sent = append(sent, sig)
			return exec.Command("sh", "-c", shexec.KillLine(sig, pgid, shexec.Entry("t4"))).Run()
		},
		Cut: func() { cmd.Process.Kill() },
	}.Stop(300*time.Millisecond, func(sig string, err error) { t.Errorf("signal %s: %v", sig, err) })
	if last != "KILL" || strings.Join(sent, ",") != "TERM,KILL" || time.Since(stopped) < 300*time.Millisecond {
		t.Errorf("Stop sent %v (last %s) after %v: want TERM, then KILL after the grace period; end %v", sent, last, time.Since(stopped), err)
	}
	if err := exec.Command("pgrep", "-f", "sleep 60[12]").Run(); err == nil {
		out, _ := exec.Command("pgrep", "-af", "sleep 60[12]").Output()
		t.Errorf("processes of the exec survived:\n%s", out)
	}
}
