//go:build unix

package sdktest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
)

// The kit's self-tests: the reference provider passes every group, and
// each broken variant of it fails the case that checks the rule it breaks.

func TestReferencePassesEveryGroup(t *testing.T) {
	sdktest.Run(t, sdktest.Config{Provider: newReference(t), Settings: settingsFor(t.TempDir())})
}

// Each variant breaks one rule of the contract; the kit must fail it in
// the case named, and nowhere else on the way there.
func TestBrokenProvidersFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken func(*reference) sdk.Provider
		config func(*sdktest.Config)
		fails  string // the case, as Group/Case
	}{
		{"CreatedEveryTime", func(r *reference) sdk.Provider { return alwaysCreated{r} }, nil, "Lifecycle/EnsureRunningIdempotent"},
		{"CreatesTwiceWhenRaced", func(r *reference) sdk.Provider { return &checkThenCreate{reference: r} }, nil, "Lifecycle/ConcurrentEnsureRunningConverges"},
		{"GivesUpWhileAnotherCreates", func(r *reference) sdk.Provider { return &givesUpWhileCreating{reference: r} }, nil, "Lifecycle/ConcurrentEnsureRunningConverges"},
		{"TeardownDoesNothing", func(r *reference) sdk.Provider { return teardownNothing{r} }, nil, "Lifecycle/TeardownThenExecIsNotFound"},
		{"TeardownLeavesFiles", func(r *reference) sdk.Provider { return teardownLeavesFiles{r} }, nil, "Lifecycle/EnsureAfterTeardown"},
		{"MergesStderrIntoStdout", func(r *reference) sdk.Provider { return mergesStderr{r} }, nil, "Exec/ExitCodeAndStreamsKeptApart"},
		{"WrongExitCode", func(r *reference) sdk.Provider { return wrongExitCode{r} }, nil, "Exec/ExitCodeAndStreamsKeptApart"},
		{"ExitAsError", func(r *reference) sdk.Provider { return exitAsError{r} }, nil, "Exec/NonZeroExitIsAStatus"},
		{"UnknownCommandInPlumbing", func(r *reference) sdk.Provider { return plumbingWords{r, "exec failed: exit status 127"} }, nil, "Exec/UnknownCommandExits127"},
		{"KillsWhatTheExecLeft", func(r *reference) sdk.Provider { return killsLeftovers{r} }, nil, "Exec/DetachedOutlivesItsExec"},
		{"SignalWithPrefix", func(r *reference) sdk.Provider { return signalWithPrefix{r} }, nil, "Exec/KilledBySignalIsNamed"},
		{"WrongSignal", func(r *reference) sdk.Provider { return wrongSignal{r} }, nil, "Exec/KilledBySignalIsNamed"},
		{"DropsSignal", func(r *reference) sdk.Provider { return dropsSignal{r} }, nil, "Cancel/CancelGraceThenKill"},
		{"IgnoresCancel", func(r *reference) sdk.Provider { return ignoresCancel{r} }, nil, "Cancel/CancelKillsProcessTree"},
		{"HangsOnCancel", func(r *reference) sdk.Provider { return hangsOnCancel{r} }, nil, "Cancel/CancelKillsProcessTree"},
		{"CancelLeavesTree", func(r *reference) sdk.Provider { return leavesTree{r} }, nil, "Cancel/CancelKillsProcessTree"},
		{"KillsWithoutTerm", func(r *reference) sdk.Provider { return killsWithoutTerm{r} }, nil, "Cancel/CancelSendsTermFirst"},
		{"AcceptsUndeclaredNetwork", func(r *reference) sdk.Provider { return anyNetwork{r} }, nil, "FailClosed/UndeclaredNetworkModeRefused"},
		{"IgnoresUnknownSettings", func(r *reference) sdk.Provider { return lenientSettings{r} }, nil, "FailClosed/UnknownSettingsKeyRefused"},
		{"IgnoresTTY", func(r *reference) sdk.Provider { return ignoresTTY{r} }, nil, "FailClosed/TTYRefusedWhenNotDeclared"},
		{"RunsRootWhenNotDeclared", func(r *reference) sdk.Provider { return acceptsRoot{r} }, nil, "FailClosed/RootRefusedWhenNotDeclared"},
		{"IgnoresUser", func(r *reference) sdk.Provider { return ignoresUser{r} }, nil, "FailClosed/UserHonouredOrRefused"},
		{"DeclaresTTYWithoutOne", func(r *reference) sdk.Provider { return claimsTTY{ignoresTTY{r}} }, nil, "Capabilities/TTYWhenDeclared"},
		{"DeclaresRootWithoutIt", claimsRoot, nil, "Capabilities/RootWhenDeclared"},
		{"DeclaresRunUsersWithoutThem", func(r *reference) sdk.Provider { return claimsRunUsers{ignoresUser{r}} }, nil, "Capabilities/RunUsers"},
		{"DeclaresLimitsWithoutThem", func(r *reference) sdk.Provider { return claimsLimits{r} }, func(c *sdktest.Config) { c.PidsLimit = 24 }, "Capabilities/PidsLimit"},
		{"ForwarderNeverConnects", func(r *reference) sdk.Provider { return forwardsNowhere{r} }, nil, "Forwarder/ForwardReachesTarget"},
		{"ForwarderOutlivesContext", func(r *reference) sdk.Provider { return &forwardsForever{reference: r} }, nil, "Forwarder/ForwardStopsWithContext"},
		{"ListerMissesLabels", func(r *reference) sdk.Provider { return listsWithoutLabels{r} }, nil, "Lister/ListedWithLabels"},
		{"ListerKeepsTornDown", func(r *reference) sdk.Provider { return &listsTornDown{reference: r} }, nil, "Lister/NotListedAfterTeardown"},
		{"ValidatorFindsFault", func(r *reference) sdk.Provider { return faultFinder{r} }, nil, "Settings/GoodSettingsHaveNoProblems"},
		{"ValidatorAcceptsUnknownKey", func(r *reference) sdk.Provider { return lenientValidator{r} }, nil, "Settings/UnknownKeyIsAProblem"},
		{"ValidatorLosesThePath", func(r *reference) sdk.Provider { return shortPaths{r} }, nil, "Settings/NestedUnknownKeyIsAProblem"},
		{"ValidatorMisnamesTheProblem", func(r *reference) sdk.Provider { return vagueValidator{r} }, nil, "Settings/UnknownKeyIsAProblem"},
		{"EnsureRunningLosesThePath", func(r *reference) sdk.Provider { return shortRefusals{r} }, nil, "Settings/NestedUnknownKeyIsAProblem"},
		{"ValidatorStricterThanEnsureRunning", func(r *reference) sdk.Provider { return lenientSettings{r} }, nil, "Settings/NestedUnknownKeyIsAProblem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sdktest.Config{Provider: tc.broken(newReference(t)), Settings: settingsFor(t.TempDir())}
			if tc.config != nil {
				tc.config(&cfg)
			}
			got := runKit(t, cfg, tc.fails)
			o, ran := got[tc.fails]
			switch {
			case !ran:
				t.Fatalf("the kit never ran %s:\n%s", tc.fails, got)
			case !o.failed:
				t.Errorf("the kit passed %s for a provider that breaks its rule:\n%s", tc.fails, got)
			}
			for path, o := range got {
				if o.failed && path != "" && !strings.HasPrefix(tc.fails, path) {
					t.Errorf("the kit failed %s too, on the way to %s:\n%s", path, tc.fails, got)
				}
			}
			t.Logf("%s failed, as it should:\n%s", tc.fails, o.log)
		})
	}
}

// A provider that ignores cancel fails the first Cancel case, and the
// others at once, saying why, rather than each waiting for it again.
func TestIgnoringCancelFailsTheGroupOnce(t *testing.T) {
	got := runKit(t, sdktest.Config{Provider: hangsOnCancel{newReference(t)}, Settings: settingsFor(t.TempDir())}, "Cancel")
	if o := got["Cancel/CancelKillsProcessTree"]; !o.failed || !strings.Contains(o.log, "rule: when Exec's ctx ends") {
		t.Errorf("Cancel/CancelKillsProcessTree: %+v; want it failed naming the rule", o)
	}
	for _, c := range []string{"CancelSendsTermFirst", "CancelGraceThenKill", "CancelWhileStdinIsBlocked", "Timeout"} {
		if o := got["Cancel/"+c]; !o.failed || !strings.Contains(o.log, "not run: an earlier Cancel case") {
			t.Errorf("Cancel/%s: %+v; want it failed at once, for the earlier case", c, o)
		}
	}
}

// What real shells and execs say of a command they cannot find passes.
func TestUnknownCommandWordingsPass(t *testing.T) {
	for _, says := range []string{
		"bash: line 1: NAME: command not found", // bash
		"sh: 1: NAME: not found",                // dash
		"sh: NAME: not found",                   // busybox
		`OCI runtime exec failed: exec failed: unable to start container process: exec: "NAME": executable file not found in $PATH: unknown`, // runc
		"env: 'NAME': No such file or directory",                     // env
		"nsenter: failed to execute NAME: No such file or directory", // nsenter
	} {
		got := runKit(t, sdktest.Config{Provider: plumbingWords{newReference(t), says}, Settings: settingsFor(t.TempDir())}, "Exec/UnknownCommandExits127")
		if o := got["Exec/UnknownCommandExits127"]; o.failed || o.skipped {
			t.Errorf("stderr %q: the kit did not pass it:\n%s", says, got)
		}
	}
}

// A skip without a reason, or of a case that does not exist, fails before
// anything runs.
func TestSkipsNeedAReasonAndACase(t *testing.T) {
	for _, tc := range []struct {
		skip map[string]string
		want string
	}{
		{map[string]string{"Timeout": ""}, `case "Timeout" has no reason`},
		{map[string]string{"Timeout": "  "}, `case "Timeout" has no reason`},
		{map[string]string{"NoSuchCase": "it does not apply"}, `no case "NoSuchCase"`},
	} {
		got := runKit(t, sdktest.Config{Provider: newReference(t), Settings: settingsFor(t.TempDir()), Skip: tc.skip}, "")
		if root := got[""]; !root.failed || !strings.Contains(root.log, tc.want) {
			t.Errorf("Skip %q: the kit said %q; want it to fail saying %q", tc.skip, root.log, tc.want)
		}
		if len(got) != 1 {
			t.Errorf("Skip %q: the kit ran cases:\n%s", tc.skip, got)
		}
	}
}

// A case named in Skip is reported as skipped, with its reason.
func TestSkipIsReportedWithItsReason(t *testing.T) {
	const reason = "the sandbox's clock cannot be trusted"
	got := runKit(t, sdktest.Config{Provider: newReference(t), Settings: settingsFor(t.TempDir()), Skip: map[string]string{"Timeout": reason}}, "Cancel/Timeout")
	o := got["Cancel/Timeout"]
	if !o.skipped || o.failed || !strings.Contains(o.log, reason) {
		t.Errorf("Cancel/Timeout: %+v; want it skipped saying %q", o, reason)
	}
}

// Config.Groups runs the groups it names; the others are reported as
// skipped, running nothing.
func TestGroupsRunsTheGroupsNamed(t *testing.T) {
	got := runKit(t, sdktest.Config{Provider: newReference(t), Settings: settingsFor(t.TempDir()), Groups: []sdktest.Group{sdktest.Lister}}, "")
	for _, g := range sdktest.AllGroups() {
		o, ran := got[string(g)]
		switch {
		case !ran:
			t.Errorf("group %s is not reported", g)
		case g == sdktest.Lister && (o.failed || o.skipped):
			t.Errorf("group %s: %+v; want it run and passed", g, o)
		case g != sdktest.Lister && (!o.skipped || !strings.Contains(o.log, "not in Config.Groups")):
			t.Errorf("group %s: %+v; want it skipped as not in Config.Groups", g, o)
		}
	}
	for path := range got {
		if strings.Contains(path, "/") && !strings.HasPrefix(path, string(sdktest.Lister)+"/") {
			t.Errorf("ran %s, outside the groups asked for", path)
		}
	}
	if _, ran := got["Lister/NotListedAfterTeardown"]; !ran {
		t.Errorf("did not run Lister/NotListedAfterTeardown:\n%s", got)
	}
}

func TestAllGroups(t *testing.T) {
	want := []sdktest.Group{sdktest.Lifecycle, sdktest.Exec, sdktest.Cancel, sdktest.FailClosed, sdktest.Capabilities, sdktest.Forwarder, sdktest.Lister, sdktest.Settings, sdktest.Preparer}
	if got := sdktest.AllGroups(); !slices.Equal(got, want) {
		t.Errorf("AllGroups() = %v, want %v", got, want)
	}
}

// The broken variants. Each embeds the reference and breaks one rule.

// alwaysCreated says every EnsureRunning created the sandbox.
type alwaysCreated struct{ *reference }

func (b alwaysCreated) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	sb, err := b.reference.EnsureRunning(ctx, spec)
	sb.Created = true
	return sb, err
}

// togetherPrefix starts the names of the sandboxes the kit ensures from
// several callers at once. The variants that lose that race make sure
// they do there, and behave elsewhere, where no other call comes.
const togetherPrefix = "sdktest-together-"

// pair is where the first of two concurrent calls waits for the second.
type pair struct {
	mu   sync.Mutex
	n    int
	both chan struct{}
}

// arrive reports whether this call is the first; the first waits until a
// second arrives (or ctx ends).
func (p *pair) arrive(ctx context.Context) (bool, error) {
	p.mu.Lock()
	if p.both == nil {
		p.both = make(chan struct{})
	}
	p.n++
	first := p.n == 1
	if p.n == 2 {
		close(p.both)
	}
	p.mu.Unlock()
	if !first {
		return false, nil
	}
	select {
	case <-p.both:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// checkThenCreate looks for the sandbox, then creates it if it was not
// there, without making sure that no other call created it meanwhile:
// calls that come together each create it (the second over the first)
// and each say so. The first caller waits for a second, so that they do.
type checkThenCreate struct {
	*reference
	race pair
}

func (b *checkThenCreate) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if _, _, err := b.existing(spec.SandboxRef); err == nil || !strings.HasPrefix(spec.Name, togetherPrefix) {
		return b.reference.EnsureRunning(ctx, spec)
	}
	if _, err := b.race.arrive(ctx); err != nil {
		return sdk.Sandbox{}, err
	}
	dir, _, _ := b.paths(spec.SandboxRef)
	_ = os.Remove(filepath.Join(dir, markerName)) // creates it anew
	sb, err := b.reference.EnsureRunning(ctx, spec)
	sb.Created = true
	return sb, err
}

// givesUpWhileCreating refuses to go on while another call is creating
// the sandbox, as a look-and-act loop bounded by a count of tries does:
// the second of two calls that come together fails.
type givesUpWhileCreating struct {
	*reference
	race pair
}

func (b *givesUpWhileCreating) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if _, _, err := b.existing(spec.SandboxRef); err == nil || !strings.HasPrefix(spec.Name, togetherPrefix) {
		return b.reference.EnsureRunning(ctx, spec)
	}
	first, err := b.race.arrive(ctx)
	switch {
	case err != nil:
		return sdk.Sandbox{}, err
	case !first:
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrConflict, "sandbox %s keeps changing under us (another process creating it?)", spec.Name)
	}
	return b.reference.EnsureRunning(ctx, spec)
}

// teardownNothing leaves the sandbox as it is.
type teardownNothing struct{ *reference }

func (teardownNothing) Teardown(context.Context, sdk.SandboxRef) error { return nil }

// teardownLeavesFiles forgets the sandbox but keeps its files.
type teardownLeavesFiles struct{ *reference }

func (b teardownLeavesFiles) Teardown(_ context.Context, ref sdk.SandboxRef) error {
	dir, _, err := b.paths(ref)
	if err != nil {
		return err
	}
	b.kill(dir)
	if err := os.Remove(filepath.Join(dir, markerName)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// mergesStderr writes stderr into stdout.
type mergesStderr struct{ *reference }

func (b mergesStderr) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	eio.Stderr = eio.Stdout
	return b.reference.Exec(ctx, req, eio)
}

// wrongExitCode reports every failure as exit code 1.
type wrongExitCode struct{ *reference }

func (b wrongExitCode) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	if st.Code != 0 {
		st.Code = 1
	}
	return st, err
}

// exitAsError returns a non-zero exit as an error, as an *exec.ExitError
// passed on does.
type exitAsError struct{ *reference }

func (b exitAsError) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	if err == nil && st.Code != 0 {
		return sdk.ExitStatus{}, fmt.Errorf("exit status %d", st.Code)
	}
	return st, err
}

// plumbingWords says what it was told on stderr, in place of what a
// command that exits 127 wrote there.
type plumbingWords struct {
	*reference
	says string
}

func (b plumbingWords) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	stderr := eio.Stderr
	var buf strings.Builder
	eio.Stderr = &buf
	st, err := b.reference.Exec(ctx, req, eio)
	if stderr != nil {
		msg := buf.String()
		if st.Code == 127 {
			msg = strings.ReplaceAll(b.says, "NAME", req.Argv[0]) + "\n"
		}
		_, _ = io.WriteString(stderr, msg)
	}
	return st, err
}

// killsLeftovers kills what an exec left running in the sandbox when it
// returns.
type killsLeftovers struct{ *reference }

func (b killsLeftovers) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	if dir, _, derr := b.paths(req.Sandbox); derr == nil {
		hostproc.KillTagged(sandboxTag(dir))
	}
	return st, err
}

// signalWithPrefix names a killing signal with its "SIG".
type signalWithPrefix struct{ *reference }

func (b signalWithPrefix) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	if st.Signal != "" {
		st.Signal = "SIG" + st.Signal
	}
	return st, err
}

// wrongSignal names TERM whatever signal killed the process.
type wrongSignal struct{ *reference }

func (b wrongSignal) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	if st.Signal != "" {
		st.Signal = "TERM"
	}
	return st, err
}

// dropsSignal reports the exit code of a killed process and not its
// signal's name.
type dropsSignal struct{ *reference }

func (b dropsSignal) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := b.reference.Exec(ctx, req, eio)
	st.Signal = ""
	return st, err
}

// ignoresCancel stops waiting when the exec is cancelled, and leaves the
// process running.
type ignoresCancel struct{ *reference }

func (b ignoresCancel) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	type result struct {
		st  sdk.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := b.reference.Exec(context.WithoutCancel(ctx), req, eio)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		return r.st, r.err
	case <-ctx.Done():
		return sdk.ExitStatus{}, nil
	}
}

// hangsOnCancel does not look at its context at all: a cancelled exec
// goes on until its command ends by itself.
type hangsOnCancel struct{ *reference }

func (b hangsOnCancel) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	return b.reference.Exec(context.WithoutCancel(ctx), req, eio)
}

// leavesTree says a cancelled exec was cancelled, and leaves its process
// tree running: only the check for live processes can catch it.
type leavesTree struct{ *reference }

func (b leavesTree) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := ignoresCancel(b).Exec(ctx, req, eio)
	if err == nil && ctx.Err() != nil {
		st.Canceled = true
	}
	return st, err
}

// killsWithoutTerm SIGKILLs a cancelled exec at once.
type killsWithoutTerm struct{ *reference }

func (b killsWithoutTerm) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	dir, _, err := b.existing(req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	stop := context.AfterFunc(ctx, func() { b.kill(dir) })
	defer stop()
	return b.reference.Exec(context.WithoutCancel(ctx), req, eio)
}

// anyNetwork starts a sandbox whatever network it is asked for.
type anyNetwork struct{ *reference }

func (b anyNetwork) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	spec.Network.Mode = sdk.NetworkOpen
	return b.reference.EnsureRunning(ctx, spec)
}

// lenientSettings starts a sandbox with the settings keys it does not
// know, at any depth, dropped; its ValidateSettings reports them.
type lenientSettings struct{ *reference }

func (b lenientSettings) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	var s referenceSettings
	_ = json.Unmarshal(spec.Config, &s)
	spec.Config, _ = json.Marshal(s)
	return b.reference.EnsureRunning(ctx, spec)
}

// faultFinder finds a problem in any settings.
type faultFinder struct{ *reference }

func (faultFinder) ValidateSettings(context.Context, sdk.ValidateRequest) ([]sdk.Problem, error) {
	return []sdk.Problem{{Key: "root", Message: "looks wrong"}}, nil
}

// lenientValidator finds no problem in any settings, though EnsureRunning
// refuses some.
type lenientValidator struct{ *reference }

func (lenientValidator) ValidateSettings(context.Context, sdk.ValidateRequest) ([]sdk.Problem, error) {
	return nil, nil
}

// shortPaths reports a problem at its last key only, as encoding/json's
// errors name it.
type shortPaths struct{ *reference }

func (b shortPaths) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	problems, err := b.reference.ValidateSettings(ctx, req)
	for i, p := range problems {
		problems[i].Key = p.Key[strings.LastIndex(p.Key, ".")+1:]
	}
	return problems, err
}

// vagueValidator reports each problem at its key, without saying what is
// wrong there.
type vagueValidator struct{ *reference }

func (b vagueValidator) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	problems, err := b.reference.ValidateSettings(ctx, req)
	for i := range problems {
		problems[i].Message = "looks odd"
	}
	return problems, err
}

// shortRefusals refuses settings naming the last key of the path only.
type shortRefusals struct{ *reference }

func (b shortRefusals) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	sb, err := b.reference.EnsureRunning(ctx, spec)
	if err != nil {
		return sb, sdk.Errorf(sdk.ErrInvalid, "%s", strings.ReplaceAll(err.Error(), "dirs.", ""))
	}
	return sb, nil
}

// ignoresTTY runs an exec asking for a terminal without one.
type ignoresTTY struct{ *reference }

func (b ignoresTTY) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.TTY = false
	return b.reference.Exec(ctx, req, eio)
}

// acceptsRoot runs an exec asking for root as its own user, without
// declaring ExecAsRoot.
type acceptsRoot struct{ *reference }

func (b acceptsRoot) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.User == "root" {
		req.User = ""
	}
	return b.reference.Exec(ctx, req, eio)
}

// ignoresUser runs every exec as its own user.
type ignoresUser struct{ *reference }

func (b ignoresUser) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.User = ""
	return b.reference.Exec(ctx, req, eio)
}

// claimsRunUsers declares RunUsers, and runs every exec as its own user.
type claimsRunUsers struct{ ignoresUser }

func (b claimsRunUsers) Info(ctx context.Context) (sdk.Info, error) {
	info, err := b.reference.Info(ctx)
	info.RunUsers = true
	return info, err
}

// claimsTTY declares TTY, and runs without a terminal.
type claimsTTY struct{ ignoresTTY }

func (b claimsTTY) Info(ctx context.Context) (sdk.Info, error) {
	info, err := b.reference.Info(ctx)
	info.TTY = true
	return info, err
}

// claimsRoot declares ExecAsRoot, and runs an exec asking for root as an
// unprivileged user: its own, or nobody when that is root.
func claimsRoot(r *reference) sdk.Provider {
	if os.Geteuid() == 0 {
		r.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	return claimsRootProvider{acceptsRoot{r}}
}

type claimsRootProvider struct{ acceptsRoot }

func (b claimsRootProvider) Info(ctx context.Context) (sdk.Info, error) {
	info, err := b.reference.Info(ctx)
	info.ExecAsRoot = true
	return info, err
}

// claimsLimits declares ResourceLimits, and enforces none.
type claimsLimits struct{ *reference }

func (b claimsLimits) Info(ctx context.Context) (sdk.Info, error) {
	info, err := b.reference.Info(ctx)
	info.ResourceLimits = true
	return info, err
}

// forwardsNowhere announces a forward whose connections go nowhere.
type forwardsNowhere struct{ *reference }

func (forwardsNowhere) Forward(ctx context.Context, _ sdk.ForwardRequest, listening func(addr string)) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = lis.Close() })
	defer stop()
	listening(lis.Addr().String())
	for {
		c, err := lis.Accept()
		if err != nil {
			return nil
		}
		_ = c.Close()
	}
}

// forwardsForever returns when its context ends, and goes on forwarding
// until the provider closes.
type forwardsForever struct {
	*reference
	mu    sync.Mutex
	stops []context.CancelFunc
}

func (b *forwardsForever) Forward(ctx context.Context, req sdk.ForwardRequest, listening func(addr string)) error {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.mu.Lock()
	b.stops = append(b.stops, cancel)
	b.mu.Unlock()
	announced := make(chan struct{})
	go func() {
		_ = b.reference.Forward(fctx, req, func(addr string) { listening(addr); close(announced) })
	}()
	<-announced
	<-ctx.Done()
	return nil
}

func (b *forwardsForever) Close() error {
	b.mu.Lock()
	for _, stop := range b.stops {
		stop()
	}
	b.mu.Unlock()
	return b.reference.Close()
}

// listsWithoutLabels lists the right sandboxes without their labels.
type listsWithoutLabels struct{ *reference }

func (b listsWithoutLabels) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	found, err := b.reference.List(ctx, req)
	for i := range found {
		found[i].Labels = nil
	}
	return found, err
}

// listsTornDown remembers every sandbox it listed, and lists them still.
type listsTornDown struct {
	*reference
	mu   sync.Mutex
	seen map[string]sdk.Listed
}

func (b *listsTornDown) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	found, err := b.reference.List(ctx, req)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]sdk.Listed{}
	}
	for _, l := range found {
		b.seen[l.Ref.Name] = l
	}
	found = found[:0]
	for _, l := range b.seen {
		found = append(found, l)
	}
	return found, nil
}

// runKit runs the kit against cfg under a recorder, as `go test -run only`
// would (only "" runs everything), and returns what each test did, by
// path ("" for the kit's own top level).
func runKit(t *testing.T, cfg sdktest.Config, only string) outcomes {
	t.Helper()
	res := &record{got: outcomes{}}
	root := &recorder{only: only, res: res}
	root.start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer root.finish()
		sdktest.RunT(root, cfg)
	}()
	<-done
	return res.got
}

// outcome is what one test did.
type outcome struct {
	failed, skipped bool
	log             string
}

type outcomes map[string]outcome

func (o outcomes) String() string {
	var b strings.Builder
	for _, path := range slices.Sorted(maps.Keys(o)) {
		r := o[path]
		state := "ok"
		switch {
		case r.failed:
			state = "FAIL"
		case r.skipped:
			state = "SKIP"
		}
		fmt.Fprintf(&b, "--- %s %q\n%s", state, path, r.log)
	}
	return b.String()
}

type record struct {
	mu  sync.Mutex
	got outcomes
}

// recorder is a sdktest.T that records what each test does instead of
// reporting it, so that a self-test can expect a case to fail. As in
// package testing, Fatalf and Skipf end the test's goroutine, subtests run
// one at a time, each in a goroutine of its own, and a test's context ends
// before its cleanups run.
type recorder struct {
	path string
	only string
	res  *record

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	failed   bool
	skipped  bool
	log      strings.Builder
	cleanups []func()
}

func (r *recorder) start() {
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

// finish runs the cleanups, last first, and records the outcome.
func (r *recorder) finish() {
	r.cancel()
	r.mu.Lock()
	cleanups := r.cleanups
	r.mu.Unlock()
	for _, f := range slices.Backward(cleanups) {
		f()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.mu.Lock()
	defer r.res.mu.Unlock()
	r.res.got[r.path] = outcome{failed: r.failed, skipped: r.skipped, log: r.log.String()}
}

func (r *recorder) Helper() {}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.log, "    "+format+"\n", args...)
}

func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.Logf(format, args...)
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) Context() context.Context { return r.ctx }

func (r *recorder) TempDir() string {
	dir, err := os.MkdirTemp("", "sdktest-self-")
	if err != nil {
		r.Fatalf("TempDir: %v", err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Run runs f as the subtest name, unless it is neither on the way to
// r.only nor under it.
func (r *recorder) Run(name string, f func(sdktest.T)) bool {
	path := name
	if r.path != "" {
		path = r.path + "/" + name
	}
	if r.only != "" && !strings.HasPrefix(r.only+"/", path+"/") && !strings.HasPrefix(path+"/", r.only+"/") {
		return true
	}
	sub := &recorder{path: path, only: r.only, res: r.res}
	sub.start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sub.finish()
		f(sub)
	}()
	<-done
	if sub.Failed() {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
	return !sub.Failed()
}

// The recorder must be a T; the compiler checks it here.
var _ sdktest.T = (*recorder)(nil)
