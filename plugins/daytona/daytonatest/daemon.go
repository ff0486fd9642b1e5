package daytonatest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// A container's stand-in for Daytona's daemon. Daytona's daemon forks a
// session's command itself, so the command is its child, in its session
// and process group; `docker exec` instead makes every process it starts
// the leader of a new session and group (its parent outside the
// container). So the fake starts, whenever a container starts, a small
// long-lived Perl program as the sandbox user (daemonScript), and runs
// each session command through `docker exec` of a bridge (bridgeScript)
// that asks the daemon to run it: the daemon forks `/bin/sh -c CMD` with
// the bridge's environment and directory and the bridge's own stdin,
// stdout and stderr (reopened through /proc, so they are Docker's pipes
// of the exec and its stream works as usual), reports how it ended on its
// own stdout, and lets the bridge go. The daemon also forwards signals,
// read from its stdin, to a command's shell. Perl because perl-base is in
// every Debian-based image, and its core has all this needs.

// daemonSocket is where a container's daemon listens for bridges.
const daemonSocket = "/tmp/.daytonatest-daemon.sock"

// daemonScript is the daemon. Its stdin takes "NONCE SIGNUM" lines; its
// stdout says "ready" once listening, then "NONCE x CODE" or
// "NONCE s SIGNUM" as commands end.
const daemonScript = `use strict;
use IO::Socket::UNIX;
use IO::Select;
use POSIX ();
my $path = shift;
unlink $path;
my $ln = IO::Socket::UNIX->new(Type => Socket::SOCK_STREAM(), Local => $path, Listen => 128)
  or die "listen on $path: $!\n";
pipe(my $wake_r, my $wake_w) or die "pipe: $!\n";
$wake_w->autoflush(1);
$SIG{CHLD} = sub { syswrite($wake_w, "x") };
$| = 1;
print "ready\n";
my (%run, %pid);
my $sel = IO::Select->new($ln, $wake_r, \*STDIN);
my $in = '';
while (1) {
  for my $fh ($sel->can_read(1)) {
    if ($fh == $ln) {
      spawn($ln->accept);
    } elsif ($fh == $wake_r) {
      sysread($wake_r, my $b, 512);
    } else {
      sysread(STDIN, $in, 4096, length $in) or exit 0;
      while ($in =~ s/^(\S+) (\d+)\n//) { kill($2, $pid{$1}) if $pid{$1} }
    }
  }
  while ((my $p = waitpid(-1, POSIX::WNOHANG())) > 0) {
    my $st = $?;
    my $r = delete $run{$p} or next;
    delete $pid{$r->[0]};
    if (POSIX::WIFSIGNALED($st)) { print "$r->[0] s " . POSIX::WTERMSIG($st) . "\n" }
    else { print "$r->[0] x " . POSIX::WEXITSTATUS($st) . "\n" }
    close $r->[1];
  }
}
sub spawn {
  my $c = shift or return;
  my $req = do { local $/; <$c> };
  my ($bp, $nonce, $mode, $cmd) = split /\0/, $req, 4;
  my $p = fork;
  if (!defined $p) { print STDERR "fork: $!\n"; close $c; return }
  if ($p == 0) {
    $SIG{CHLD} = $SIG{PIPE} = 'DEFAULT';
    POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new);
    open(my $e, '<', "/proc/$bp/environ") or fail("read the environment of $bp");
    my $env = do { local $/; <$e> };
    %ENV = map { /^([^=]*)=(.*)$/s ? ($1, $2) : () } split /\0/, $env;
    chdir("/proc/$bp/cwd") or fail("enter the directory of $bp");
    for my $fd (0, 1, 2) {
      my $f = POSIX::open("/proc/$bp/fd/$fd", $fd ? POSIX::O_WRONLY() : POSIX::O_RDONLY());
      defined $f or fail("open descriptor $fd of $bp");
      if ($f != $fd) { POSIX::dup2($f, $fd); POSIX::close($f) }
    }
    exec { '/bin/sh' } '/bin/sh', ($mode eq 'c' ? ('-c', $cmd) : ());
    fail("run /bin/sh");
  }
  $run{$p} = [$nonce, $c];
  $pid{$nonce} = $p;
}
sub fail { print STDERR "$_[0]: $!\n"; POSIX::_exit(127) }
`

// bridgeScript asks the daemon to run a command (argv: socket, nonce,
// mode "c" for `sh -c CMD` or "s" for `sh` on stdin, CMD), then waits
// until the daemon lets it go, when the command has ended. It exits 126
// when it cannot reach the daemon.
const bridgeScript = `use strict;
use Socket;
my ($path, $nonce, $mode, $cmd) = @ARGV;
my $s;
socket($s, AF_UNIX, SOCK_STREAM, 0) && connect($s, pack_sockaddr_un($path))
  or do { print STDERR "reach the sandbox's daemon at $path: $!\n"; exit 126 };
syswrite($s, join("\0", $$, $nonce, $mode, $cmd));
shutdown($s, 1);
1 while sysread($s, my $b, 512);
exit 0;
`

// relayScript connects to argv's host and port and copies between the
// connection and stdin/stdout until either ends: a direct-tcpip channel's
// far end, dialled from inside the sandbox. It exits 1, having written
// nothing, when it cannot connect.
const relayScript = `use strict;
use IO::Socket::IP;
use IO::Select;
my $s = IO::Socket::IP->new(PeerHost => $ARGV[0], PeerPort => $ARGV[1], Type => Socket::SOCK_STREAM()) or exit 1;
my $sel = IO::Select->new(\*STDIN, $s);
while (1) {
  for my $fh ($sel->can_read) {
    my $n = sysread($fh, my $buf, 65536);
    exit 0 unless $n;
    my $out = $fh == $s ? \*STDOUT : $s;
    while (length $buf) {
      my $w = syswrite($out, $buf);
      exit 0 unless $w;
      substr($buf, 0, $w, '');
    }
  }
}
`

// containerDaemon is the fake's end of a container's daemon.
type containerDaemon struct {
	conn client.HijackedResponse
	wmu  sync.Mutex // serializes writes to conn
	gone chan struct{}

	mu    sync.Mutex
	waits map[string]chan exitStatus // by nonce
}

// startDaemon starts the daemon in a sandbox's container (started, with
// its user) and waits until it listens.
func (d *dockerBackend) startDaemon(ctx context.Context, s *sandbox, target string) error {
	_, att, err := d.attach(ctx, target, client.ExecCreateOptions{
		User:         s.user,
		Cmd:          []string{"perl", "-e", daemonScript, daemonSocket},
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return fmt.Errorf("start the daemon of sandbox %s: %w", s.id, err)
	}
	cd := &containerDaemon{conn: att.HijackedResponse, gone: make(chan struct{}), waits: map[string]chan exitStatus{}}
	ready := make(chan struct{})
	var stderr limited
	stderr.n = 4 << 10
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(cd.gone)
		first := true
		out := &lineWriter{line: func(l string) {
			if first {
				first = false
				if l == "ready" {
					close(ready)
				}
				return
			}
			cd.report(l)
		}}
		errs := &lineWriter{line: func(l string) {
			stderr.Write([]byte(l + "\n"))
			d.logger.Warn("daytonatest: sandbox daemon", "sandbox", s.id, "says", l)
		}}
		_, _ = stdcopy.StdCopy(out, errs, cd.conn.Reader)
	}()
	select {
	case <-ready:
	case <-cd.gone:
		cd.conn.Close()
		return fmt.Errorf("start the daemon of sandbox %s: it ended (the realistic gateway needs perl in the sandbox's image; Options.IdealGateway does not): %s", s.id, strings.TrimSpace(stderr.b.String()))
	case <-ctx.Done():
		cd.conn.Close()
		return fmt.Errorf("start the daemon of sandbox %s: %w", s.id, ctx.Err())
	}
	d.mu.Lock()
	old := d.daemons[s.id]
	d.daemons[s.id] = cd
	d.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	return nil
}

// report delivers a "NONCE x CODE" or "NONCE s SIGNUM" line.
func (cd *containerDaemon) report(l string) {
	f := strings.Fields(l)
	if len(f) != 3 {
		return
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return
	}
	st := exitStatus{code: n}
	if f[1] == "s" {
		st = exitStatus{code: 128 + n, signal: strings.TrimPrefix(unix.SignalName(syscall.Signal(n)), "SIG")}
	}
	cd.mu.Lock()
	ch := cd.waits[f[0]]
	cd.mu.Unlock()
	if ch != nil {
		ch <- st
	}
}

// expect registers a command before it runs; the channel gets how it
// ended.
func (cd *containerDaemon) expect(nonce string) <-chan exitStatus {
	ch := make(chan exitStatus, 1)
	cd.mu.Lock()
	cd.waits[nonce] = ch
	cd.mu.Unlock()
	return ch
}

func (cd *containerDaemon) forget(nonce string) {
	cd.mu.Lock()
	delete(cd.waits, nonce)
	cd.mu.Unlock()
}

// signal asks the daemon to send sig to a command's shell.
func (cd *containerDaemon) signal(nonce string, sig syscall.Signal) {
	cd.wmu.Lock()
	defer cd.wmu.Unlock()
	_, _ = fmt.Fprintf(cd.conn.Conn, "%s %d\n", nonce, int(sig))
}

// lineWriter calls line with every complete line written to it.
type lineWriter struct {
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
