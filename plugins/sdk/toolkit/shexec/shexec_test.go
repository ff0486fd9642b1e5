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

// With ReportExit, the wrapper reports the command's exit code last, a
// signal's 128+N included, and stays the group's leader through a TERM
// until the command ends.
func TestReportExit(t *testing.T) {
	for _, c := range []struct {
		name string
		argv []string
		term bool
		exit int
	}{
		{"an exit code", []string{"sh", "-c", "echo err >&2; printf more >&2; exit 3"}, false, 3},
		{"success", []string{"true"}, false, 0},
		{"killed by TERM", []string{"sh", "-c", "echo ready; exec sleep 613"}, true, 143},
		{"ends on its own after TERM", []string{"sh", "-c", "trap 'echo bye; exit 7' TERM; echo ready; while :; do :; done"}, true, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", shexec.Command{Tag: "t6", Argv: c.argv, ReportExit: true}.Line())
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			var errb bytes.Buffer
			ctl := shexec.NewExitControl(&errb, "t6")
			cmd.Stderr = ctl
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			if c.term {
				// Signalled once it runs: "ready" on stdout. The pid is
				// read by then (stderr is copied as it comes).
				if _, err := io.ReadFull(out, make([]byte, 6)); err != nil {
					t.Fatal(err)
				}
				<-ctl.Known()
				if err := exec.Command("sh", "-c", shexec.KillLine("TERM", ctl.Pid(), shexec.Entry("t6"))).Run(); err != nil {
					t.Fatal(err)
				}
			}
			io.Copy(io.Discard, out)
			err = cmd.Wait()
			ctl.Finish()
			code, ok := ctl.Exit()
			if !ok || code != c.exit || cmd.ProcessState.ExitCode() != c.exit {
				t.Errorf("reported exit %d %v, the wrapper's %v: want %d", code, ok, err, c.exit)
			}
			if want := map[int]string{3: "err\nmore", 7: ""}[c.exit]; errb.String() != want {
				t.Errorf("stderr %q, want %q", errb.String(), want)
			}
		})
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
		exit   int // -1: none
	}{
		{"alone", []string{"amelia-exec:T:pid=42\n", "err\n"}, "err\n", 42, -1},
		{"split", []string{"amel", "ia-exec:T:p", "id=42", "\nerr"}, "err", 42, -1},
		{"after rc noise", []string{"pyenv: cannot rehash\nmore noise", "\namelia-exec:T:pid=7\nerr\n"}, "pyenv: cannot rehash\nmore noise\nerr\n", 7, -1},
		{"noise like a prefix", []string{"amelia-exec:other:pid=1\n", "amelia-exec:T:pid=9\n"}, "amelia-exec:other:pid=1\n", 9, -1},
		{"forged after", []string{"amelia-exec:T:pid=5\n", "amelia-exec:T:pid=6\n"}, "amelia-exec:T:pid=6\n", 5, -1},
		{"engine error, no control line", []string{"OCI runtime exec failed: ", "unable to find user x\n"}, "OCI runtime exec failed: unable to find user x\n", 0, -1},
		{"unfinished prefix at the end", []string{"amelia-exec:T"}, "amelia-exec:T", 0, -1},
		{"not a number", []string{"amelia-exec:T:pid=x\n"}, "amelia-exec:T:pid=x\n", 0, -1},
		{"exit", []string{"amelia-exec:T:pid=3\nerr\n", "\x1eamelia-exec:T:ex", "it=4\n"}, "err\n", 3, 4},
		{"exit after output without a newline", []string{"amelia-exec:T:pid=3\nerr", "\x1eamelia-exec:T:exit=4\n"}, "err", 3, 4},
		{"exit amid late output", []string{"amelia-exec:T:pid=3\npartial \x1eamelia-exec:T:exit=0\n", "line\n"}, "partial line\n", 3, 0},
		{"the last exit counts", []string{"amelia-exec:T:pid=3\n\x1eamelia-exec:T:exit=0\n\x1eamelia-exec:T:exit=1\n"}, "", 3, 1},
		{"exit before the pid line", []string{"\x1eamelia-exec:T:exit=0\n"}, "\x1eamelia-exec:T:exit=0\n", 0, -1},
		{"exit out of range", []string{"amelia-exec:T:pid=3\n\x1eamelia-exec:T:exit=256\n"}, "\x1eamelia-exec:T:exit=256\n", 3, -1},
		{"exit of another tag", []string{"amelia-exec:T:pid=3\n\x1eamelia-exec:U:exit=1\n"}, "\x1eamelia-exec:U:exit=1\n", 3, -1},
		{"a mark byte before the mark", []string{"amelia-exec:T:pid=3\n\x1e\x1eamelia-exec:T:exit=2\n"}, "\x1e", 3, 2},
		{"the mark's start at the end", []string{"amelia-exec:T:pid=3\nerr\x1eamelia-ex"}, "err\x1eamelia-ex", 3, -1},
		{"many mark bytes", []string{"amelia-exec:T:pid=3\n" + strings.Repeat("\x1e", 1<<20)}, strings.Repeat("\x1e", 1<<20), 3, -1},
		{"a long line like a control line", []string{"amelia-exec:T:pid=3\n", "amelia-exec:T:" + strings.Repeat("x", 200), "\n"}, "amelia-exec:T:" + strings.Repeat("x", 200) + "\n", 3, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			// The exit lines of Command.ReportExit are read too.
			ctl := shexec.NewExitControl(&b, "T")
			for _, w := range c.writes {
				if n, err := ctl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			ctl.Finish()
			if b.String() != c.pass || ctl.Pid() != c.pid {
				t.Errorf("passed %q pid %d, want %q pid %d", b.String(), ctl.Pid(), c.pass, c.pid)
			}
			if code, ok := ctl.Exit(); code != c.exit || ok != (c.exit >= 0) {
				t.Errorf("exit %d %v, want %d", code, ok, c.exit)
			}
			select {
			case <-ctl.Known():
			default:
				t.Error("Known is not closed after Finish")
			}
		})
	}
}

// An exit control holds back only what may begin the exit line: a line
// of stderr is passed on as soon as it comes.
func TestExitControlHoldsOnlyTheMark(t *testing.T) {
	var b bytes.Buffer
	ctl := shexec.NewExitControl(&b, "T")
	for _, step := range []struct{ write, passed string }{
		{"amelia-exec:T:pid=3\nready\n", "ready\n"},
		{"x\x1eamel", "ready\nx"},
		{"ia-exec:T:exit=0\n", "ready\nx"},
		{"late\n", "ready\nxlate\n"},
	} {
		ctl.Write([]byte(step.write))
		if b.String() != step.passed {
			t.Fatalf("after %q, passed %q, want %q", step.write, b.String(), step.passed)
		}
	}
	if code, ok := ctl.Exit(); !ok || code != 0 {
		t.Errorf("exit %d %v, want 0", code, ok)
	}
}

// Only NewExitControl reads exit lines: for any other exec, they are the
// command's.
func TestControlWithoutExits(t *testing.T) {
	var b bytes.Buffer
	ctl := shexec.NewControl(&b, "T")
	in := "amelia-exec:T:pid=3\nerr\n\x1eamelia-exec:T:exit=0\n"
	ctl.Write([]byte(in))
	ctl.Finish()
	if code, ok := ctl.Exit(); ok || b.String() != in[len("amelia-exec:T:pid=3\n"):] {
		t.Errorf("passed %q, exit %d %v", b.String(), code, ok)
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
