package daytonatest

import (
	"context"
	"io"
)

// backend is where sandboxes live: Docker containers or host directories.
type backend interface {
	// imageExists says whether a Dockerfile's FROM image is available.
	imageExists(ctx context.Context, ref string) (bool, error)
	// prepare sets s.home when the sandbox is made; it is called with the
	// fake's lock held, so it must be quick.
	prepare(s *sandbox) error
	// create makes the sandbox's container, not started; it sets
	// s.container under the fake's lock.
	create(ctx context.Context, s *sandbox) error
	// start starts it (again): the user exists afterwards.
	start(ctx context.Context, s *sandbox) error
	// stop stops it: every process in it dies, files stay.
	stop(ctx context.Context, s *sandbox) error
	// remove removes it and everything running in it.
	remove(ctx context.Context, s *sandbox) error
	// run runs a command in it; see execRequest.
	run(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error)
	// dial opens a TCP connection to host:port as seen from inside the
	// sandbox (from the host, on the host backend).
	dial(ctx context.Context, s *sandbox, host string, port uint32) (io.ReadWriteCloser, error)
	// close kills and removes everything the backend made.
	close(ctx context.Context) error
	// build builds a snapshot's Dockerfile as the image tag; the error is
	// the builder's.
	build(ctx context.Context, tag, dockerfile string) error
	// removeImage removes a snapshot's image.
	removeImage(ctx context.Context, tag string)
}

// execRequest is a command to run as the sandbox user: `sh -c cmd`, the
// leader of its own session and process group unless daemonChild.
type execRequest struct {
	cmd string
	// noCommand runs `/bin/sh` reading its commands from stdin instead
	// (an SSH "shell" without a pty, or an "exec" of an empty command, on
	// Daytona's daemon).
	noCommand bool
	// daemonChild runs the command as Daytona's daemon runs a session's:
	// as a child of a long-lived process of the sandbox (the backend's
	// stand-in for the daemon), in that process's session and process
	// group, with none of its own.
	daemonChild bool
	// signals, when not nil, carries signal names ("TERM") to send to
	// the command's top process (the shell), and to no other; daemonChild
	// only (not for a pty).
	signals <-chan string
	// pty, when not nil, runs an interactive login shell on a new
	// pseudo-terminal (leading its own session, as Daytona's daemon does
	// through creack/pty) instead of cmd; stderr is unused, as everything
	// goes through the terminal.
	pty *ptyRequest
	// dir is the working directory; "" is the user's home.
	dir string
	// env is added to the sandbox's environment (K=V).
	env []string
	// stdin, when not nil, is copied to the command's stdin, which is
	// closed when stdin ends (EOF or error).
	stdin io.Reader
	// stdout and stderr get the command's output. When a write fails, the
	// command's end of that stream is closed (it gets EPIPE/SIGPIPE).
	stdout, stderr io.Writer
	// killable commands are killed (with every process they started) when
	// the context of run ends; others are only cut off from their streams
	// (the host backend kills them all the same).
	killable bool
	// started, when not nil, is called once the command runs, before its
	// output is copied.
	started func()
}

// ptyRequest is a terminal's type and size, and its later sizes.
type ptyRequest struct {
	term       string
	cols, rows uint32
	resize     <-chan windowSize
}

// windowSize is a terminal's size in characters.
type windowSize struct{ cols, rows uint32 }

// pickShell is the shell a pty session runs, chosen as Daytona's daemon
// chooses it: zsh, then bash, when /etc/shells lists them, else $SHELL,
// else sh.
const pickShell = `for s in /usr/bin/zsh /bin/zsh /usr/bin/bash /bin/bash; do
  if grep -qx "$s" /etc/shells 2>/dev/null; then SHELL=$s; export SHELL; exec "$s"; fi
done
exec "${SHELL:-sh}"`

// exitStatus is how a command ended: its exit code, or the signal (name
// without "SIG") that killed it, when the backend knows it.
type exitStatus struct {
	code   int
	signal string
}

// baseEnv is the environment every command in a sandbox gets, besides the
// sandbox's own env.
func baseEnv(user, home string) []string {
	return []string{
		"HOME=" + home,
		"USER=" + user,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
	}
}

// homeOf is a user's home directory in a container.
func homeOf(user string) string {
	if user == "root" {
		return "/root"
	}
	return "/home/" + user
}
