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

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
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

// start runs c's line with sh as a session leader, as sshd starts a
// session's command, and returns its stdout, its control-filtered stderr,
// and its end.
func start(t *testing.T, c shexec.Command) (*bytes.Buffer, *shexec.Control, *bytes.Buffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sh", "-c", c.Line())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	ctl := shexec.NewControl(&errb, c.Tag)
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
	out, ctl, errb, cmd := start(t, shexec.Command{Dir: dir, Env: map[string]string{"GREETING": "it's a b"}, Tag: "t1", Require: dir,
		Argv: []string{"sh", "-c", `printf '%s|%s|%s' "$GREETING" "$(pwd)" "$AMELIA_EXEC_ID"; echo oops >&2; exit 4`}})
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

	_, ctl, _, cmd = start(t, shexec.Command{Dir: "/no/such/dir", Tag: "t2", Argv: []string{"true"}})
	err = cmd.Wait()
	ctl.Finish()
	if !ctl.NoDir() || ctl.NoSandbox() || err == nil {
		t.Errorf("a missing dir: nodir %v nosandbox %v, exit %v", ctl.NoDir(), ctl.NoSandbox(), err)
	}
	marker := filepath.Join(dir, "gone")
	_, ctl, _, cmd = start(t, shexec.Command{Tag: "t3", Require: marker, Argv: []string{"touch", marker}})
	err = cmd.Wait()
	ctl.Finish()
	if _, serr := os.Stat(marker); !ctl.NoSandbox() || err == nil || serr == nil {
		t.Errorf("a missing required file: nosandbox %v, exit %v, and the command ran: %v", ctl.NoSandbox(), err, serr == nil)
	}
}

// Control takes the exec's own control line off stderr, wherever it comes
// among what was written before it (a login shell's rc files), however the
// writes split it; anything else passes whole, in order.
func TestControl(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		pass   string
		pid    int
	}{
		{"alone", []string{"amelia-exec:T:pid=42\n", "err\n"}, "err\n", 42},
		{"split", []string{"amel", "ia-exec:T:p", "id=42", "\nerr"}, "err", 42},
		{"after rc noise", []string{"pyenv: cannot rehash\nmore noise", "\namelia-exec:T:pid=7\nerr\n"}, "pyenv: cannot rehash\nmore noise\nerr\n", 7},
		{"noise like a prefix", []string{"amelia-exec:other:pid=1\n", "amelia-exec:T:pid=9\n"}, "amelia-exec:other:pid=1\n", 9},
		{"forged after", []string{"amelia-exec:T:pid=5\n", "amelia-exec:T:pid=6\n"}, "amelia-exec:T:pid=6\n", 5},
		{"engine error, no control line", []string{"OCI runtime exec failed: ", "unable to find user x\n"}, "OCI runtime exec failed: unable to find user x\n", 0},
		{"unfinished prefix at the end", []string{"amelia-exec:T"}, "amelia-exec:T", 0},
		{"not a number", []string{"amelia-exec:T:pid=x\n"}, "amelia-exec:T:pid=x\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			ctl := shexec.NewControl(&b, "T")
			for _, w := range c.writes {
				if n, err := ctl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			ctl.Finish()
			if b.String() != c.pass || ctl.Pid() != c.pid {
				t.Errorf("passed %q pid %d, want %q pid %d", b.String(), ctl.Pid(), c.pass, c.pid)
			}
			select {
			case <-ctl.Known():
			default:
				t.Error("Known is not closed after Finish")
			}
		})
	}
}

// Stop kills the group and a tagged process that left it (setsid): TERM
// first, KILL after the grace period when TERM is ignored. Its sleeps'
// durations are its own: pgrep sees every test's processes, containers'
// included.
func TestStopKillsGroupAndTagged(t *testing.T) {
	line := shexec.Command{Tag: "t4", Argv: []string{"sh", "-c", `setsid sleep 611 & sleep 612 & trap '' TERM; echo ready; while :; do sleep 0.1; done`}}.Line()
	outR, outW := io.Pipe()
	cmd := exec.Command("sh", "-c", line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ctl := shexec.NewControl(io.Discard, "t4")
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
	if err := exec.Command("pgrep", "-f", "sleep 61[12]").Run(); err == nil {
		out, _ := exec.Command("pgrep", "-af", "sleep 61[12]").Output()
		t.Errorf("processes of the exec survived:\n%s", out)
	}
}
