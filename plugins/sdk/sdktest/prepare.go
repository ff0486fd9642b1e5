package sdktest

import (
	"errors"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Preparer group: the optional sdk.Preparer. A provider without one
// answers ErrUnsupported (the host then runs the setup itself), and the
// cases say so as they skip.

// setupLine is a setup that appends a line of its own to ~/setup.log: a
// sandbox made from its kept result holds the line once.
func setupLine(line string) []sdk.SetupCommand {
	return []sdk.SetupCommand{{Name: "append", Argv: []string{"sh", "-c", `echo "$1" >> "$HOME/amelia-sdktest-setup.log"`, "sh", line}}}
}

// prepare runs Prepare of spec, skipping the case when the provider has
// none.
func (k *kit) prepare(t T, spec sdk.Spec) (sdk.Prepared, error) {
	t.Helper()
	res, err := k.p.Prepare(k.ctx(t), spec)
	if errors.Is(err, sdk.ErrUnsupported) {
		t.Skipf("the provider does not implement sdk.Preparer (Prepare: %v): nothing to check", err)
	}
	return res, err
}

// Prepare keeps a setup once: the first call makes it, a second finds it
// up to date under the same Ref; a sandbox EnsureRunning makes with that
// setup names it in Details["setup"] and holds its result once, without
// running it again.
func (k *kit) prepareKeeps(t T) {
	line := freshName("setup")
	spec := k.spec(freshName("prep"))
	spec.Setup = setupLine(line)
	first, err := k.prepare(t, spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if first.UpToDate || first.Ref == "" {
		t.Errorf("first Prepare of a new setup = %+v, want it made (UpToDate false) and named (Ref)", first)
	}
	again, err := k.p.Prepare(k.ctx(t), spec)
	if err != nil || !again.UpToDate || again.Ref != first.Ref {
		t.Errorf("second Prepare = %+v, %v; want %q up to date", again, err, first.Ref)
	}
	sb, err := k.p.EnsureRunning(k.ctx(t), spec)
	if err != nil {
		t.Fatalf("EnsureRunning with the prepared setup: %v", err)
	}
	k.teardownAtEnd(t, sb.Ref)
	if sb.Details["setup"] != first.Ref {
		t.Errorf("the sandbox's Details[\"setup\"] = %q, want %q: a sandbox made from a kept setup names it, or the host runs the setup again", sb.Details["setup"], first.Ref)
	}
	r := k.run(k.ctx(t), t, k.in(sb, sh(`cat "$HOME/amelia-sdktest-setup.log"`)), nil)
	if got := string(r.stdout); got != line+"\n" {
		t.Errorf("the sandbox's ~/amelia-sdktest-setup.log = %q (exit %+v), want the setup's line once", got, r.st)
	}
}

// A setup whose command fails is an error naming the command and its
// exit status, and nothing is kept: preparing it again fails again.
func (k *kit) prepareFailureKeepsNothing(t T) {
	spec := k.spec(freshName("prepfail"))
	spec.Setup = append(setupLine(freshName("setup")), sdk.SetupCommand{Name: "fails", Argv: []string{"sh", "-c", "exit 7"}})
	for i := range 2 {
		_, err := k.prepare(t, spec)
		if err == nil {
			t.Fatalf("Prepare %d of a setup whose command exits 7: no error (was a failed setup kept?)", i+1)
		}
		if msg := err.Error(); !strings.Contains(msg, "setup command 2 (fails)") || !strings.Contains(msg, "exited 7") {
			t.Errorf("Prepare %d of a failing setup: %q, want it to name the command (setup command 2 (fails)) and its exit status (exited 7), as sdk.SetupError says them", i+1, msg)
		}
	}
}
