package driver

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Installer puts the right amelia-worker into sandboxes. The right one is
// identified by its sha256, so a sandbox that holds an older build, or a
// damaged file, gets the current one; identical builds are shared by every
// amelia version that made them.
//
// An Installer caches the hashes of the host binaries (by path, size and
// modification time), so keep one for the life of the process; it is safe
// for concurrent use.
type Installer struct {
	// Dirs are the host directories holding amelia-worker-linux-ARCH:
	// workerbin.Dirs(os.Getenv("AMELIA_WORKER_DIR"), self).
	Dirs []string
	// Binary, when set, is the host worker to install whatever the
	// sandbox's architecture: for tests and development.
	Binary string
	// Provider is the provider's name, for error messages.
	Provider string
	Logger   *slog.Logger

	sums workerbin.Sums
}

// probeScript prints the machine's architecture and the install directory
// ($1: sdk.WorkerPlace.Dir, else $HOME/.amelia/bin), one per line, then,
// for each further argument, the sha256 of that file, "-" when it cannot
// be read, or "=" when an earlier argument named the same path (each file
// is hashed once), one line each; an argument without a slash names a
// file in the install directory.
//
// An absolute path (a provider's preinstalled worker) is not hashed where
// its stamp (PATH.sha256, workerbin.Stamp) can be trusted instead: the
// file, its stamp and every directory above them are root's and writable
// by no one else, the stamp's size is the file's, and this user is not
// root. Then only root wrote them (the provider, building the image), not
// an agent: agents run as this user or as run users. Hashing an 8 MB
// worker at every run is most of the probe.
const probeScript = `d=${1:-${HOME:+$HOME/.amelia/bin}}
printf '%s\n%s\n' "$(uname -m)" "$d"
shift
me=$(id -u)
stamped() {
	[ "$me" != 0 ] || return 1
	_f=$1 _s=$1` + workerbin.StampSuffix + ` _d=$1
	set -- "$_f" "$_s" /
	while _d=${_d%/*}; [ -n "$_d" ]; do set -- "$@" "$_d"; done
	_bad=$(find "$@" -maxdepth 0 \( ! -user 0 -o -perm /022 -o \( ! -type f ! -type d \) \) -print 2>/dev/null) && [ -z "$_bad" ] || return 1
	read -r _sum _size _rest <"$_s" || return 1
	[ -z "$_rest" ] && [ ${#_sum} = 64 ] || return 1
	case $_sum$_size in *[!0-9a-f]*) return 1 ;; esac
	case $_size in '' | *[!0-9]*) return 1 ;; esac
	[ "$(($(wc -c <"$_f")))" = "$_size" ] || return 1
	printf '%s\n' "$_sum"
}
seen='
'
for f do
	case $f in /*) given=$f ;; */*) given= ;; *) given= f=$d/$f ;; esac
	case $seen in *"
$f
"*) echo =; continue ;; esac
	seen="$seen$f
"
	if [ -n "$given" ] && stamped "$f"; then continue; fi
	if s=$(sha256sum <"$f" 2>/dev/null); then printf '%s\n' "${s%% *}"; else echo -; fi
done`

// hostWorker is the host's worker for one architecture.
type hostWorker struct {
	arch, bin, sum string
	size           int64
}

// EnsureWorker makes sure the worker for the sandbox's architecture is in
// the sandbox and returns its absolute path there: one of
// place.Preinstalled whose sha256 is the host binary's, else
// place.Dir (default $HOME/.amelia/bin)/amelia-worker-<first 16 hex digits
// of its sha256>. It reuses a copy whose sha256 matches and otherwise
// streams the binary in through Exec stdin, which works on every provider.
// Finding a copy there takes one exec: it asks for the sandbox's
// architecture and hashes the copies the host's workers (one per
// architecture) and the provider's would be, at once.
func (in *Installer) EnsureWorker(ctx context.Context, ex sandboxexec.Execer, place sdk.WorkerPlace) (string, error) {
	return in.findWorker(ctx, ex, place, true)
}

// FindWorker is EnsureWorker that installs nothing: "" when the sandbox
// has no copy of this host's worker.
func (in *Installer) FindWorker(ctx context.Context, ex sandboxexec.Execer, place sdk.WorkerPlace) (string, error) {
	return in.findWorker(ctx, ex, place, false)
}

func (in *Installer) findWorker(ctx context.Context, ex sandboxexec.Execer, place sdk.WorkerPlace, install bool) (string, error) {
	start := time.Now()
	workers := in.hostWorkers()
	args := []string{place.Dir}
	for _, w := range workers {
		args = append(args, envelope.WorkerName(w.sum))
	}
	args = append(args, place.Preinstalled...)
	arch, dir, sums, err := in.probe(ctx, ex, args)
	if err != nil {
		return "", err
	}
	bin, err := in.hostBinary(arch)
	if err != nil {
		return "", fmt.Errorf("install amelia-worker on %s: %w", in.provider(), err)
	}
	sum, size, err := in.sums.Sum(bin)
	if err != nil {
		return "", fmt.Errorf("install amelia-worker on %s: %w", in.provider(), err)
	}
	dest := dir + "/" + envelope.WorkerName(sum)
	found := ""
	for i, w := range workers {
		if w.sum == sum && sums[i] == sum {
			found = dest
		}
	}
	for i, p := range place.Preinstalled {
		if found == "" && sums[len(workers)+i] == sum {
			found = p
		}
	}
	log := in.logger().With("provider", in.Provider, "arch", arch)
	if found != "" || !install {
		log.Debug("amelia-worker present", "path", found, "duration", time.Since(start))
		return found, nil
	}
	if err := in.upload(ctx, ex, bin, dir, dest, sum, size); err != nil {
		return "", err
	}
	log.Info("amelia-worker installed", "path", dest, "bytes", size, "duration", time.Since(start))
	return dest, nil
}

// WorkerNames are the file names EnsureWorker gives this host's workers
// in a sandbox's install directory (amelia-worker-<hash>), one for each
// architecture it has a binary for: what amelia gc must not remove.
func (in *Installer) WorkerNames() []string {
	var names []string
	for _, w := range in.hostWorkers() {
		names = append(names, envelope.WorkerName(w.sum))
	}
	return names
}

// hostWorkers are the host's workers, one for each architecture it has a
// binary for (Binary: that one), with their hashes (cached).
func (in *Installer) hostWorkers() []hostWorker {
	var out []hostWorker
	for _, arch := range workerbin.Arches() {
		bin, err := in.hostBinary(arch)
		if err != nil || slices.ContainsFunc(out, func(w hostWorker) bool { return w.bin == bin }) {
			continue
		}
		if sum, size, err := in.sums.Sum(bin); err == nil {
			out = append(out, hostWorker{arch, bin, sum, size})
		}
	}
	return out
}

// probe asks the sandbox, in one exec, for its architecture, its install
// directory and the hashes of the files args[1:] name (probeScript).
func (in *Installer) probe(ctx context.Context, ex sandboxexec.Execer, args []string) (arch, dir string, sums []string, err error) {
	out, err := in.run(ctx, ex, "look for it in the sandbox", append([]string{"sh", "-c", probeScript, "sh"}, args...), nil)
	if err != nil {
		return "", "", nil, err
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2+len(args)-1 {
		return "", "", nil, fmt.Errorf("install amelia-worker on %s: the sandbox answered %d lines to the probe, want %d", in.provider(), len(lines), len(args)+1)
	}
	machine, dir := lines[0], lines[1]
	if arch, err = envelope.GoArch(machine); err != nil {
		return "", "", nil, fmt.Errorf("install amelia-worker on %s: %w", in.provider(), err)
	}
	if !strings.HasPrefix(dir, "/") || strings.ContainsAny(dir, "\n\x00") {
		return "", "", nil, fmt.Errorf("install amelia-worker on %s: the install directory is %q, not an absolute path: the worker goes where the provider says (sdk.WorkerPlace.Dir), else to $HOME/.amelia/bin", in.provider(), dir)
	}
	// A path named twice has its hash on the first line that named it.
	sums = lines[2:]
	paths := make([]string, len(sums))
	for i, a := range args[1:] {
		if paths[i] = a; !strings.Contains(a, "/") {
			paths[i] = dir + "/" + a
		}
		if sums[i] == "=" {
			if j := slices.Index(paths[:i], paths[i]); j >= 0 {
				sums[i] = sums[j]
			}
		}
	}
	return arch, strings.TrimRight(dir, "/"), sums, nil
}

// hostBinary is the host file of the worker for arch.
func (in *Installer) hostBinary(arch string) (string, error) {
	if in.Binary != "" {
		return in.Binary, nil
	}
	return workerbin.Find(in.Dirs, arch)
}

// upload streams the host binary bin (size bytes) into the sandbox as
// dest.
func (in *Installer) upload(ctx context.Context, ex sandboxexec.Execer, bin, dir, dest, sum string, size int64) error {
	f, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("install amelia-worker on %s: %w", in.provider(), err)
	}
	defer f.Close()
	argv := []string{"sh", "-c", envelope.InstallScript, "sh", dir, dest, sum, strconv.FormatInt(size, 10)}
	_, err = in.run(ctx, ex, "upload amelia-worker to "+dest, argv, f)
	return err
}

// run runs argv in the sandbox and returns its stdout; a failure to run or
// a non-zero exit is an error saying what was being done.
func (in *Installer) run(ctx context.Context, ex sandboxexec.Execer, what string, argv []string, stdin io.Reader) (string, error) {
	var stdout bytes.Buffer
	var stderr execreport.Stderr
	eio := sdk.ExecIO{Stdout: &limitedWriter{w: &stdout, n: 64 << 10}, Stderr: &stderr}
	if stdin != nil {
		eio.Stdin = stdin
	}
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: argv}, eio)
	if err != nil {
		return "", fmt.Errorf("install amelia-worker: %s on %s: %w", what, in.provider(), err)
	}
	if st.Code != 0 {
		return "", fmt.Errorf("install amelia-worker: %s on %s: %s%s", what, in.provider(), execreport.Status(st), stderr.Note())
	}
	return stdout.String(), nil
}

func (in *Installer) provider() string     { return providerName(in.Provider) }
func (in *Installer) logger() *slog.Logger { return orDiscard(in.Logger) }

// limitedWriter keeps at most n bytes and discards the rest: the answers
// read from the sandbox are a few lines, and a sandbox cannot make the host
// hold more.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	keep := min(len(p), l.n)
	if keep > 0 {
		if _, err := l.w.Write(p[:keep]); err != nil {
			return 0, err
		}
		l.n -= keep
	}
	return len(p), nil
}

// EnsureTool makes sure the host executable bin (a static Linux binary
// such as a CLI agent) is in the sandbox, where the worker goes (place),
// and returns its absolute path there: NAME-<first 16 hex digits of its
// sha256>, reused when a copy with that sha256 is there already. A
// binary for another architecture than the sandbox's is refused.
func (in *Installer) EnsureTool(ctx context.Context, ex sandboxexec.Execer, place sdk.WorkerPlace, name, bin string) (string, error) {
	sum, size, err := in.sums.Sum(bin)
	if err != nil {
		return "", fmt.Errorf("install %s on %s: %w", name, in.provider(), err)
	}
	file := name + "-" + sum[:16]
	arch, dir, sums, err := in.probe(ctx, ex, []string{place.Dir, file})
	if err != nil {
		return "", err
	}
	if err := checkELF(bin, arch); err != nil {
		return "", fmt.Errorf("install %s on %s: %w", name, in.provider(), err)
	}
	dest := dir + "/" + file
	if sums[0] == sum {
		return dest, nil
	}
	start := time.Now()
	if err := in.upload(ctx, ex, bin, dir, dest, sum, size); err != nil {
		return "", err
	}
	in.logger().Info("installed in the sandbox", "tool", name, "path", dest, "bytes", size, "duration", time.Since(start))
	return dest, nil
}

// checkELF says whether bin is a static Linux executable for the Go
// architecture arch.
func checkELF(bin, arch string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s is not a Linux executable: %w", bin, err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		return fmt.Errorf("%s is for %s, and the sandbox is %s: give one built for linux/%s", bin, f.Machine, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the sandbox may lack its libraries; give a static build (CGO_ENABLED=0 for a Go program)", bin)
		}
	}
	return nil
}
