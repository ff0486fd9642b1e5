package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// DetailSetup is the key of sdk.Sandbox.Details under which a provider
// that made the sandbox from a kept setup (sdk.Preparer) names it. A
// sandbox without it, of a profile with setup commands, is set up by the
// host itself (see setUp).
const DetailSetup = "setup"

// SetupCommands are the profile's sandbox.setup commands, as the
// provider gets them.
func (s *Sandbox) SetupCommands() []sdk.SetupCommand {
	var out []sdk.SetupCommand
	for _, c := range s.Profile.Sandbox.Setup {
		out = append(out, sdk.SetupCommand{Name: c.Name, Argv: c.Argv})
	}
	return out
}

// Prepared is what Prepare did.
type Prepared struct {
	// UpToDate: nothing needed doing.
	UpToDate bool
	// Ref is what sandboxes start from (an image, a snapshot), when the
	// provider keeps the setup; "" when the host set the sandbox up.
	Ref string
	// Sandbox is the sandbox the host set up, when it did.
	Sandbox *sdk.Sandbox
}

// ErrNoSetup is the error of Prepare for a profile without setup
// commands.
var ErrNoSetup = errors.New("the profile has no sandbox.setup commands")

// Prepare sets the profile's sandbox up ahead of time: a provider that
// keeps setups (sdk.Preparer) makes the image or snapshot its sandboxes
// start from; with another, the sandbox is started (Up) and the host runs
// the commands in it, once.
func (s *Sandbox) Prepare(ctx context.Context) (Prepared, error) {
	if len(s.Profile.Sandbox.Setup) == 0 {
		return Prepared{}, fmt.Errorf("profile %s: %w: add them to prepare (see docs/setup.md)", s.Profile.Name, ErrNoSetup)
	}
	if !s.checked {
		if err := s.Check(ctx); err != nil {
			return Prepared{}, err
		}
	}
	if p, ok := s.Provider.(sdk.Preparer); ok {
		res, err := p.Prepare(ctx, s.Spec())
		switch {
		case err == nil:
			return Prepared{UpToDate: res.UpToDate, Ref: res.Ref}, nil
		case !errors.Is(err, sdk.ErrUnsupported):
			return Prepared{}, fmt.Errorf("prepare the setup of sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
		}
	}
	s.lastSetup = setupNone
	sb, err := s.Up(ctx)
	if err != nil {
		return Prepared{}, err
	}
	return Prepared{UpToDate: s.lastSetup == setupWasDone, Sandbox: &sb}, nil
}

// setupOutcome is what the last Up did about the setup.
type setupOutcome int

const (
	setupNone     setupOutcome = iota
	setupWasDone               // up to date: nothing ran
	setupRan                   // the host ran the commands
	setupProvider              // the provider made the sandbox from its kept setup
)

// setupHash identifies a setup for the marker the host leaves in a
// sandbox it set up.
func setupHash(cmds []sdk.SetupCommand) string {
	h := sha256.New()
	fmt.Fprint(h, "amelia setup v1\x00")
	for _, c := range cmds {
		fmt.Fprintf(h, "command %d\x00", len(c.Argv))
		for _, a := range c.Argv {
			fmt.Fprintf(h, "%d:%s\x00", len(a), a)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// setupScript runs the setup commands (one shell word each, "$2"...) in
// $HOME, unless the marker $HOME/.amelia/setup holds the setup's hash
// ("$1"), under a lock so that two starts at once run them once; it
// writes the marker when all succeeded. A command that fails ends it with
// that command's status, after a last line on stderr naming it.
const setupScript = `h=$1; shift
d="$HOME/.amelia"
mkdir -p "$d" || exit 125
exec 9>>"$d/setup.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ "$(cat "$d/setup" 2>/dev/null)" = "$h" ]; then echo "amelia-setup: done already"; exit 0; fi
rm -f "$d/setup"
cd "$HOME" || exit 125
i=0
for c in "$@"; do
  i=$((i+1))
  echo "amelia-setup: $i/$#"
  (eval "$c") 9>&-
  s=$?
  if [ $s -ne 0 ]; then echo "amelia-setup-failed $i $s" >&2; exit $s; fi
done
printf '%s\n' "$h" >"$d/setup.tmp" && mv -f "$d/setup.tmp" "$d/setup"
`

// shellWords quotes argv for sh.
func shellWords(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// setUp runs the profile's setup commands in sandbox sb unless its
// provider made it from a kept setup or the host set it up already (the
// marker). Their output goes to the log at debug, a line per command as
// progress.
func (s *Sandbox) setUp(ctx context.Context, sb sdk.Sandbox) error {
	cmds := s.SetupCommands()
	if len(cmds) == 0 {
		return nil
	}
	if sb.Details[DetailSetup] != "" {
		s.lastSetup = setupProvider
		return nil
	}
	hash := setupHash(cmds)
	var out bytes.Buffer
	st, err := s.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", `cat "$HOME/.amelia/setup" 2>/dev/null || true`}}, sdk.ExecIO{Stdout: &out})
	if err != nil {
		return fmt.Errorf("sandbox %s: look for its setup marker: %w", s.Ref.Name, err)
	}
	if st.Code == 0 && strings.TrimSpace(out.String()) == hash {
		s.lastSetup = setupWasDone
		return nil
	}
	sdk.Progress(s.logger, fmt.Sprintf("sandbox %s: setting it up (%d commands)", s.Ref.Name, len(cmds)))
	argv := []string{"sh", "-c", setupScript, "sh", hash}
	for _, c := range cmds {
		argv = append(argv, shellWords(c.Argv))
	}
	w := &setupLog{s: s, cmds: cmds}
	st, err = s.Exec(ctx, sdk.ExecRequest{Argv: argv, Traffic: sdk.TrafficBulk}, sdk.ExecIO{Stdout: w, Stderr: w})
	w.flush()
	if err != nil {
		return fmt.Errorf("sandbox %s: run its setup: %w", s.Ref.Name, err)
	}
	if st.Code != 0 || st.Signal != "" {
		i, code := w.failed()
		if i < 0 || i >= len(cmds) {
			return fmt.Errorf("sandbox %s: its setup could not run (exit %d): %s", s.Ref.Name, st.Code, strings.TrimSpace(w.last))
		}
		st.Code = code
		return fmt.Errorf("sandbox %s: %w", s.Ref.Name, &sdk.SetupError{Index: i, Command: cmds[i], Status: st, Tail: w.lastOutput})
	}
	s.lastSetup = setupRan
	return nil
}

// setupLog turns the setup script's output into log records: its own
// lines ("amelia-setup: 2/3") as progress naming the command, the
// commands' at debug; it keeps the last line of each kind.
type setupLog struct {
	mu         sync.Mutex // a provider may write stdout and stderr at once
	s          *Sandbox
	cmds       []sdk.SetupCommand
	part       []byte
	last       string // the last line
	lastOutput string // the last line a command wrote
}

func (w *setupLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			if len(w.part) > 64<<10 {
				w.line(string(w.part))
				w.part = w.part[:0]
			}
			return len(p), nil
		}
		w.line(string(w.part[:i]))
		w.part = w.part[i+1:]
	}
}

func (w *setupLog) flush() {
	if len(w.part) > 0 {
		w.line(string(w.part))
		w.part = nil
	}
}

func (w *setupLog) line(l string) {
	l = strings.TrimRight(l, "\r")
	w.last = l
	if rest, ok := strings.CutPrefix(l, "amelia-setup: "); ok {
		n, _, _ := strings.Cut(rest, "/")
		if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= len(w.cmds) {
			sdk.Progress(w.s.logger, fmt.Sprintf("setup %d/%d: %s", i, len(w.cmds), w.cmds[i-1]))
		}
		return
	}
	if strings.HasPrefix(l, "amelia-setup-failed ") {
		return
	}
	if strings.TrimSpace(l) != "" {
		w.lastOutput = l
	}
	w.s.logger.Debug("setup: " + l)
}

// failed is the failed command's index and exit status, from the
// script's last line; -1 when it did not get to say.
func (w *setupLog) failed() (int, int) {
	f := strings.Fields(w.last)
	if len(f) != 3 || f[0] != "amelia-setup-failed" {
		return -1, 0
	}
	i, err1 := strconv.Atoi(f[1])
	code, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return -1, 0
	}
	return i - 1, code
}
