package sdktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The FailClosed group: what the provider did not declare, it refuses with
// the error sdk.Provider's contract names, starting or running nothing.

// refused runs req, which the provider must refuse with an error matching
// kind; what ran instead is reported.
func (k *kit) refused(t T, req sdk.ExecRequest, kind error, what string) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := k.p.Exec(k.ctx(t), req, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	switch {
	case err == nil:
		t.Errorf("%s ran (exit %+v, stdout %q, stderr %q); want it refused with an error matching sdk.%s", what, st, out.String(), errb.String(), errName(kind))
	case !errors.Is(err, kind):
		t.Errorf("%s: %v; want an error matching sdk.%s", what, err, errName(kind))
	}
}

func errName(kind error) string {
	switch kind {
	case sdk.ErrUnsupported:
		return "ErrUnsupported"
	case sdk.ErrInvalid:
		return "ErrInvalid"
	}
	return kind.Error()
}

// A network mode outside Info.EgressModes is refused with ErrUnsupported,
// and no sandbox is left behind.
func (k *kit) undeclaredNetwork(t T) {
	var undeclared []sdk.NetworkMode
	for _, m := range []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone} {
		if !k.info.Supports(m) {
			undeclared = append(undeclared, m)
		}
	}
	if len(undeclared) == 0 {
		t.Skipf("the provider declares every network mode (%v): none to refuse", k.info.EgressModes)
	}
	for _, m := range undeclared {
		spec := k.spec(freshName("net"))
		spec.Network = sdk.NetworkPolicy{Mode: m}
		k.teardownAtEnd(t, spec.SandboxRef) // should it start one anyway
		sb, err := k.p.EnsureRunning(k.ctx(t), spec)
		switch {
		case err == nil:
			t.Errorf("EnsureRunning with network %q, which Info.EgressModes %v does not declare, started sandbox %s; want it refused with an error matching sdk.ErrUnsupported", m, k.info.EgressModes, sb.Ref.Name)
			continue
		case !errors.Is(err, sdk.ErrUnsupported):
			t.Errorf("EnsureRunning with network %q, which Info.EgressModes %v does not declare: %v; want an error matching sdk.ErrUnsupported", m, k.info.EgressModes, err)
		}
		if _, err := k.p.HealthCheck(k.ctx(t), spec.SandboxRef); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("HealthCheck after EnsureRunning refused network %q: %v; want ErrNotFound (nothing started)", m, err)
		}
	}
}

// unknownKey is a settings key no provider has.
const unknownKey = "amelia_sdktest_no_such_key"

// Settings with a key the provider does not know (a profile's typo) are
// refused with ErrInvalid naming the key, before anything starts.
func (k *kit) unknownSettingsKey(t T) {
	settings := k.settingsObject(t)
	settings[unknownKey] = json.RawMessage(`true`)
	k.ensureRefuses(t, settings, unknownKey)
}

// ensureRefuses checks that EnsureRunning refuses settings, which hold
// the unknown key at the path key, with an error matching ErrInvalid that
// names that path; a sandbox it starts anyway is torn down.
func (k *kit) ensureRefuses(t T, settings map[string]json.RawMessage, key string) {
	t.Helper()
	spec := k.spec(freshName("settings"))
	spec.Config, _ = json.Marshal(settings)
	sb, err := k.p.EnsureRunning(k.ctx(t), spec)
	switch {
	case err == nil:
		k.teardownAtEnd(t, sb.Ref)
		t.Errorf("EnsureRunning with the unknown settings key %s started sandbox %s; want it refused with an error matching sdk.ErrInvalid that names the key (sdk.DecodeSettings does this)", key, sb.Ref.Name)
	case !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), key):
		t.Errorf("EnsureRunning with the unknown settings key %s: %v; want an error matching sdk.ErrInvalid that names the key", key, err)
	}
}

// An exec with a TTY is refused when Info does not declare TTY.
func (k *kit) ttyRefused(t T) {
	if k.info.TTY {
		t.Skipf("the provider declares TTY: Capabilities/TTYWhenDeclared checks that it gives one")
	}
	req := k.in(k.sb, sh("if test -t 1; then echo terminal; else echo none; fi"))
	req.TTY, req.Size = true, sdk.TermSize{Rows: 24, Cols: 80}
	k.refused(t, req, sdk.ErrUnsupported, "Exec with TTY, which Info does not declare,")
}

// An exec as root is refused when Info does not declare ExecAsRoot, even
// where the provider's own user happens to be root.
func (k *kit) rootRefused(t T) {
	if k.info.ExecAsRoot {
		t.Skipf("the provider declares ExecAsRoot: Capabilities/RootWhenDeclared checks that it runs as root")
	}
	req := k.in(k.sb, sdk.ExecRequest{Argv: []string{"id", "-u"}, User: "root"})
	k.refused(t, req, sdk.ErrUnsupported, `Exec as User "root", which Info does not declare (ExecAsRoot),`)
}

// whoami is a command printing the user it runs as.
const whoami = "id -un 2>/dev/null || id -u"

// A user asked for is honoured or refused, never ignored: a user the
// sandbox does not have gives an error (or exit 126, the command not run),
// and the sandbox's own user, asked for by name, runs the command as that
// user or gives an error.
func (k *kit) userHonouredOrRefused(t T) {
	const nobody = "amelia-sdktest-nobody"
	req := k.in(k.sb, sh(whoami))
	req.User = nobody
	var out, errb bytes.Buffer
	st, err := k.p.Exec(k.ctx(t), req, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	switch {
	case err != nil:
		t.Logf("User %q, who does not exist, is refused: %v", nobody, err)
	case st.Code == 126:
		// What a transport that only has the exit status can say, as a
		// shell does for a command it cannot run; id(1) exits 0 or 1.
		t.Logf("User %q, who does not exist, is refused with exit 126 (stdout %q, stderr %q); an error saying why would be clearer", nobody, out.String(), errb.String())
	case st.Code == 0:
		t.Errorf("Exec as User %q, who does not exist, ran as %q; want it refused with an error, not the user ignored", nobody, strings.TrimSpace(out.String()))
	default:
		t.Errorf("Exec as User %q, who does not exist: exit %+v, stdout %q, stderr %q; want it refused with an error", nobody, st, out.String(), errb.String())
	}

	who := k.run(k.ctx(t), t, k.in(k.sb, sh(whoami)), nil)
	me := strings.TrimSpace(string(who.stdout))
	if who.st.Code != 0 || me == "" {
		t.Fatalf("%s: exit %+v, stdout %q, stderr %q", whoami, who.st, who.stdout, who.stderr)
	}
	req.User = me
	out.Reset()
	st, err = k.p.Exec(k.ctx(t), req, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	switch got := strings.TrimSpace(out.String()); {
	case err != nil:
		t.Logf("User %q, the sandbox's own user, is refused when asked for by name: %v", me, err)
	case got != me || st.Code != 0:
		t.Errorf("Exec as User %q ran as %q (exit %+v); want it run as %q or refused", me, got, st, me)
	}
}
