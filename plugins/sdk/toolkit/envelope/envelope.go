// Package envelope is the client end of the exec envelope, for providers
// whose transport's own side channels are lossy. Daytona's SSH gateway is
// one: it drops stderr (and hangs once about 2 MiB of it is unread), loses
// the exit status now and then, never sends exit-signal, and leaves
// commands in the daemon's process group, where a cancel cannot find them.
//
// The in-sandbox end is the worker (`amelia-worker exec`, and `amelia-worker
// mux` for many commands over one stream): it runs each command as the
// leader of its own session and speaks frames on its stdin and stdout, the
// one stream every transport carries whole. Run is the client of one
// `exec`; NewMux and Mux the client of a `mux` session, and RunOn runs a
// command on a provider's session, starting the session or reinstalling
// the worker when they are gone. Before the worker is in the sandbox,
// Bootstrap and BootstrapResult run shell scripts with nothing but stdout
// and an exit code, and InstallScript, WorkerName and GoArch put it there.
// The frames are described in docs/protocol.md.
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract. The implementation of both ends is internal to
// Amelia (the worker links the other end); this package is its public
// client.
package envelope

import (
	"context"
	"io"
	"time"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// Command is the start frame: the command and how to run it.
type Command = envelope.Command

// Step is a typed request a worker serves in its own process, in place of
// a command (Command.Step); the workspace's steps are Amelia's own.
type Step = envelope.Step

// IO carries a command's streams: nil Stdin is empty input, nil Stdout or
// Stderr discard.
type IO = envelope.IO

// Result is how a command ended.
type Result = envelope.Result

// Mux runs commands over one `amelia-worker mux` session, each in a
// stream of its own.
type Mux = envelope.Mux

// Sessions is how a provider whose commands all ride one command session
// gives RunOn the worker and the session.
type Sessions = envelope.Sessions

// Errors Run's, Mux's and RunOn's errors match.
var (
	// ErrNoDir: the working directory does not exist; nothing ran.
	ErrNoDir = envelope.ErrNoDir
	// ErrBroken: the stream ended before the command's exit frame, so how
	// it ended is unknown. The worker, its client gone, kills it.
	ErrBroken = envelope.ErrBroken
	// ErrNoWorker: something other than the worker answered and the
	// stream ended (a shell saying there is no such file): nothing ran.
	ErrNoWorker = envelope.ErrNoWorker
	// ErrClosed: the command session is closed.
	ErrClosed = envelope.ErrClosed
	// ErrProtocol: a malformed frame.
	ErrProtocol = envelope.ErrProtocol
)

const (
	// Hello is the first line `amelia-worker exec` writes.
	Hello = envelope.Hello
	// MuxHello is the first line `amelia-worker mux` writes.
	MuxHello = envelope.MuxHello
	// TagEnv carries an exec's tag in its processes' environment, as
	// shexec's does, so that shexec.KillScript finds them too.
	TagEnv = envelope.TagEnv
	// InstallScript reads exactly $4 bytes (the worker's size) from stdin
	// into a temporary file beside $2 in the directory $1, checks that
	// its sha256 is $3, makes it executable and renames it to $2.
	InstallScript = envelope.InstallScript
)

// Run runs cmd through a worker serving the envelope (`amelia-worker
// exec`) on the other end of in and out, with cmd's streams in eio; a
// cancelled ctx stops the command (SIGTERM, SIGKILL after grace).
func Run(ctx context.Context, in io.WriteCloser, out io.Reader, cmd Command, eio IO, grace time.Duration) (Result, error) {
	return envelope.Run(ctx, in, out, cmd, eio, grace)
}

// NewMux is the client of the `amelia-worker mux` session on the other end
// of in and out (MuxLine starts it); a worker that is not there is
// ErrNoWorker.
func NewMux(in io.WriteCloser, out io.Reader) (*Mux, error) { return envelope.NewMux(in, out) }

// MuxLine is the shell command line that starts the worker at path worker
// serving its mux session; a worker that is not there says so on stdout.
func MuxLine(worker string) string { return envelope.MuxLine(worker) }

// RunOn runs cmd on s's command session. A worker found missing is put
// back, and a session found ended before the command started is started
// again, once each: nothing had run. A session that broke once the
// command had started returns ErrBroken, with KillLeft started for what
// it may have left.
func RunOn(ctx context.Context, s Sessions, cmd Command, eio IO, grace time.Duration) (Result, error) {
	return envelope.RunOn(ctx, s, cmd, eio, grace)
}

// Bootstrap is a shell command line, for a transport that may lose both
// stderr and the exit status, that runs script with sh (args as its
// positional parameters), its stderr merged into its stdout, then writes
// a line with its exit code, marked with tag, to stdout. BootstrapResult
// reads what it wrote.
func Bootstrap(tag, script string, args ...string) string {
	return envelope.Bootstrap(tag, script, args...)
}

// BootstrapResult splits what a Bootstrap command tagged tag wrote into
// the script's output and its exit code. ok is false when the exit line
// is missing: the stream was cut, and the script may or may not have run.
func BootstrapResult(tag string, out []byte) (output []byte, code int, ok bool) {
	return envelope.BootstrapResult(tag, out)
}

// WorkerName is the file name of an installed worker: its sha256's (hex)
// first 16 digits name the build.
func WorkerName(sum string) string { return envelope.WorkerName(sum) }

// GoArch maps a sandbox's `uname -m` to the Go architecture of the
// worker it needs.
func GoArch(machine string) (string, error) { return envelope.GoArch(machine) }
