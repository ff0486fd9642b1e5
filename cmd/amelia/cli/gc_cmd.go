package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/gc"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// exports are the bundles amelia gc exported kept work to.
func (a *app) exports() *runstore.Exports {
	return runstore.NewExports(filepath.Join(a.stateDir(), "amelia", "exports"))
}

func (a *app) gcCommand() *cobra.Command {
	var (
		olderThan string
		dry       bool
	)
	cmd := &cobra.Command{
		Use:   "gc [--older-than D] [--dry-run]",
		Short: "Tidy stale work beyond the profiles' retention, exporting kept work to the host first",
		Long: `Tidy what runs left behind once it is older than the profile's retention
(retention, default 14d; --older-than sets it for this gc): the checkouts of
runs kept in the sandboxes, whose work is exported to a bundle on the host
first ($XDG_STATE_HOME/amelia/exports; amelia results brings it back), the
checkouts of delivered and discarded runs, the records of runs whose sandbox
is gone, run logs and audit logs, orphan sandboxes that hold nothing,
worker binaries of other versions and parked checkouts in the sandboxes,
and the setups (images, snapshots) providers kept for a profile that no
profile starts from any more. A run whose agent may be running is never
touched, and nothing holding work that is on no host is removed: an orphan
sandbox that may hold some is said, with what to do. One line per item says what was done (with --dry-run: what would
be, and nothing changes); a failure does not stop the rest, and the exit
code is 1 if any failed. --profile tidies that profile's alone.`,
		Example: `  amelia gc --dry-run
  amelia gc --older-than 30d
  amelia gc --profile dev --older-than 36h`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var override time.Duration
			if olderThan != "" {
				d, err := config.ParseDuration(olderThan)
				if err != nil || d <= 0 {
					return usageError{fmt.Errorf("--older-than %q: give a positive duration, like 36h or 14d", olderThan)}
				}
				override = d
			}
			c, err := a.loadConfig()
			if err != nil {
				return err
			}
			if a.profile != "" {
				if _, err := c.Profile(a.profile); err != nil {
					return err
				}
			}
			g := &collector{a: a, c: c, override: override, dry: dry, now: time.Now(),
				out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr()}
			return g.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "tidy what is older than this (like 36h, 14d; default: each profile's retention)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "say what would be done, and change nothing")
	return cmd
}

// collector is one amelia gc.
type collector struct {
	a        *app
	c        *config.Config
	override time.Duration // --older-than, else 0
	dry      bool
	now      time.Time
	out      io.Writer
	errw     io.Writer

	recs   []runstore.Record // this config's runs (of --profile's profile)
	all    []runstore.Record // every run this host recorded
	items  int               // lines said
	failed int
}

// retention is how old what profile left must be for gc to tidy it.
func (g *collector) retention(profile string) time.Duration {
	if g.override > 0 {
		return g.override
	}
	if p, ok := g.c.Profiles[profile]; ok && p.Retention > 0 {
		return p.Retention
	}
	return config.DefaultRetention
}

// unlisted says that what of kind in where could not be listed.
func (g *collector) unlisted(kind gc.Kind, where string, err error) {
	g.items++
	g.failed++
	fmt.Fprintf(g.errw, "amelia: gc: %s\n", oneLine(gc.Unlisted(kind, where, err)))
}

// say prints what was (or would be) done with it, or how it failed.
func (g *collector) say(it gc.Item, err error) {
	g.items++
	if err != nil {
		g.failed++
		fmt.Fprintf(g.errw, "amelia: gc: %s\n", oneLine(gc.Line(it, g.dry, err)))
		return
	}
	fmt.Fprintln(g.out, gc.Line(it, g.dry, nil))
}

func (g *collector) run(ctx context.Context) error {
	all, err := g.a.runs().All()
	if err != nil {
		return err
	}
	g.all = all
	for _, r := range all {
		if (g.a.profile == "" || r.Profile == g.a.profile) && ofThisConfig(g.c, r) == nil {
			g.recs = append(g.recs, r)
		}
	}
	g.runs(ctx)
	g.logs()
	g.audits()
	g.sandboxes(ctx)
	if g.failed > 0 {
		return exitError{1}
	}
	if g.items == 0 {
		what := "each profile's retention"
		if g.override > 0 {
			what = config.FormatDays(g.override)
		}
		fmt.Fprintf(g.out, "nothing to tidy: nothing is older than %s\n", what)
	}
	return nil
}

// runs tidies the runs' records and their checkouts.
func (g *collector) runs(ctx context.Context) {
	store := g.a.runs()
	for _, r := range g.recs {
		updated, err := store.Updated(r.Profile, r.Workflow)
		if err != nil {
			g.unlisted(gc.Run, "the record of "+r.Profile+"/"+r.Workflow, err)
			continue
		}
		exportPath, _ := g.a.exports().Path(r.Profile, r.Workflow)
		in := gc.RunInput{Record: r, Age: g.now.Sub(updated), Retention: g.retention(r.Profile), Sandbox: gc.Up, Export: exportPath}
		it, ok := gc.PlanRun(in)
		if !ok {
			continue
		}
		if it.Action == gc.Leave {
			g.say(it, nil)
			continue
		}
		// What becomes of it depends on its sandbox: ask.
		st, state, why := g.openRecorded(ctx, r)
		in.Sandbox, in.SandboxWhy = state, why
		it, _ = gc.PlanRun(in)
		if it.Action == gc.Leave || g.dry {
			if st != nil {
				st.Close(context.WithoutCancel(ctx))
			}
			g.say(it, nil)
			continue
		}
		err = g.doRun(ctx, st, it)
		if st != nil {
			st.Close(context.WithoutCancel(ctx))
		}
		g.say(it, err)
	}
}

// openRecorded starts the provider of r's sandbox, without starting the
// sandbox, and says how the sandbox is.
func (g *collector) openRecorded(ctx context.Context, r runstore.Record) (*stack.Stack, gc.SandboxState, string) {
	p, err := g.a.recordedProfile(r)
	if err != nil {
		return nil, gc.Unknown, oneLine(err.Error())
	}
	st, err := stack.Open(ctx, g.a.stackHost(), p, r.SandboxName())
	if err != nil {
		return nil, gc.Unknown, oneLine(err.Error())
	}
	row := g.a.sandboxState(ctx, st.Sandbox())
	switch row.State {
	case string(sdk.HealthReady):
		return st, gc.Up, ""
	case string(sdk.HealthStopped):
		return st, gc.Down, ""
	case "absent":
		return st, gc.Gone, ""
	}
	return st, gc.Unknown, strings.TrimSpace(row.State + " " + row.Message)
}

// doRun does what it says with a run: exports its kept work and removes
// its checkout, removes a checkout with nothing to keep, or forgets a
// run whose sandbox is gone.
func (g *collector) doRun(ctx context.Context, st *stack.Stack, it gc.Item) error {
	r := it.Record
	// Another command may have taken the run on meanwhile (results,
	// attach): gc acts only on the record as it planned with.
	cur, err := g.a.runs().Get(r.Profile, r.Workflow)
	switch {
	case err != nil:
		return fmt.Errorf("the run changed meanwhile (%w): run amelia gc again", err)
	case cur.State != r.State:
		return fmt.Errorf("the run changed meanwhile (it is %s now): run amelia gc again", cur.State)
	}
	if it.Action == gc.Forget {
		return g.a.runs().Delete(r.Profile, r.Workflow)
	}
	// Up to the workflow's uid, as amelia results goes.
	err = st.Up(ctx)
	if err == nil {
		err = st.InstallWorker(ctx)
	}
	if err == nil {
		err = st.OpenWorkspace(workspace.Options{})
	}
	if err == nil {
		err = st.As(ctx, r.Workflow, nil)
	}
	if err != nil {
		return err
	}
	if it.Action == gc.Remove {
		return g.a.forgetRun(ctx, st.Workspace, r)
	}
	return g.export(ctx, st.Workspace, r)
}

// export exports r's kept work to a bundle on the host, records the run
// as exported, and only then removes its checkout from the sandbox.
func (g *collector) export(ctx context.Context, ws *workspace.Workspace, r runstore.Record) error {
	if _, err := ws.CommitAll(ctx, r.Workflow, ""); err != nil {
		return err
	}
	data, err := ws.ExportResult(ctx, r.Workflow, workspace.Base{Branch: r.BaseBranch, Commit: r.BaseCommit}, workspace.ResultOptions{})
	if errors.Is(err, workspace.ErrNoChanges) {
		// Nothing to keep: the checkout goes as a discarded one's.
		return g.a.forgetRun(ctx, ws, r)
	}
	if err != nil {
		return err
	}
	p, err := g.a.exports().Write(r.Profile, r.Workflow, data)
	if err != nil {
		return err
	}
	r.State, r.Export = runstore.Exported, p
	if err := g.a.runs().Put(r); err != nil {
		return err
	}
	// The work is on the host now: the sandbox's copy can go.
	if err := ws.Retire(ctx, r.Workflow, r.RunDir); err != nil {
		return fmt.Errorf("exported to %s, but removing its checkout failed: %w", p, err)
	}
	return nil
}

// inUse says whether a file of workflow (or run id) belongs to a run that
// may be running or starting.
func (g *collector) inUse(match func(runstore.Record) bool) bool {
	return slices.ContainsFunc(g.all, func(r runstore.Record) bool {
		return (r.State.AgentMayRun() || r.State.Preparing()) && match(r)
	})
}

// logs tidies this host's copies of what runs showed.
func (g *collector) logs() {
	dir := filepath.Join(g.a.stateDir(), "amelia", "logs")
	for _, profile := range subdirNames(dir) {
		if g.a.profile != "" && profile != g.a.profile {
			continue
		}
		g.files(gc.Log, filepath.Join(dir, profile), g.retention(profile), func(name string) bool {
			return g.inUse(func(r runstore.Record) bool {
				return r.Profile == profile && (name == r.Workflow+".jsonl" || strings.HasPrefix(name, "."+r.Workflow+"."))
			})
		}, ".jsonl", ".partial")
	}
}

// audits tidies the proxy's audit logs, in every directory the profiles
// put them (the longest retention of the profiles sharing one holds).
func (g *collector) audits() {
	dirs := map[string]time.Duration{}
	var order []string
	for _, name := range g.c.ProfileNames() {
		if g.a.profile != "" && name != g.a.profile {
			continue
		}
		dir := g.c.Profiles[name].Proxy.AuditDir
		if dir == "" {
			dir = g.a.auditDir()
		}
		if _, ok := dirs[dir]; !ok {
			order = append(order, dir)
		}
		dirs[dir] = max(dirs[dir], g.retention(name))
	}
	for _, dir := range order {
		g.files(gc.Audit, dir, dirs[dir], func(name string) bool {
			return g.inUse(func(r runstore.Record) bool { return r.RunID != "" && name == r.RunID+".jsonl" })
		}, ".jsonl")
	}
}

// files tidies the regular files in dir ending in one of exts.
func (g *collector) files(kind gc.Kind, dir string, retention time.Duration, inUse func(name string) bool, exts ...string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			g.unlisted(kind, dir, err)
		}
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !slices.ContainsFunc(exts, func(x string) bool { return strings.HasSuffix(e.Name(), x) }) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		p := filepath.Join(dir, e.Name())
		it, ok := gc.PlanFile(gc.FileInput{Kind: kind, Path: p, Age: g.now.Sub(info.ModTime()), Retention: retention, InUse: inUse(e.Name())})
		if !ok {
			continue
		}
		var rmErr error
		if it.Action == gc.Remove && !g.dry {
			if rmErr = os.Remove(p); errors.Is(rmErr, fs.ErrNotExist) {
				rmErr = nil
			}
		}
		g.say(it, rmErr)
	}
}

// subdirNames lists the directories in dir, by name.
func subdirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// sandboxes tidies the orphan sandboxes; and, of the configured
// profiles' own, the setups their providers kept that they no longer
// start from, the parked checkouts and the worker binaries of other
// versions in them.
func (g *collector) sandboxes(ctx context.Context) {
	err := g.a.eachSandbox(ctx, g.a.profile, func(f sandbox.Found) {
		if f.Err != nil {
			return // a profile whose provider cannot start holds nothing gc could reach
		}
		if f.Orphan {
			g.orphan(ctx, f)
			return
		}
		if !f.Elsewhere && !f.Legacy {
			g.setups(ctx, f)
			g.parked(ctx, f)
		}
		g.workers(ctx, f)
	})
	if err != nil {
		g.unlisted(gc.Sandbox, "this config", err)
	}
}

// orphan removes an orphan sandbox that provably holds nothing.
func (g *collector) orphan(ctx context.Context, f sandbox.Found) {
	in := gc.OrphanInput{Name: f.Sandbox.Ref.Name, Profile: f.Profile, Provider: f.Provider, Retention: g.retention(f.Profile)}
	if f.Listed != nil {
		if !f.Listed.Created.IsZero() {
			in.Age = max(g.now.Sub(f.Listed.Created), time.Nanosecond)
		}
		in.Up = f.Listed.State == sdk.HealthReady
	}
	all, _ := g.a.runs().Of(f.Profile)
	for _, r := range all {
		if recordedIn(r, f.Sandbox) {
			in.Recorded = append(in.Recorded, r.Workflow)
		}
	}
	if in.Up && in.Age > in.Retention && len(in.Recorded) == 0 {
		wctx, cancel := context.WithTimeout(ctx, sdk.HealthCheckTimeout)
		ids, err := workspace.Workflows(wctx, f.Sandbox)
		cancel()
		in.Workflows, in.Listed = ids, err == nil
	}
	it, ok := gc.PlanOrphan(in)
	if !ok {
		return
	}
	var err error
	if it.Action == gc.Remove && !g.dry {
		err = f.Sandbox.Down(ctx)
	}
	g.say(it, err)
}

// setups has the provider of a configured profile remove the setups it
// kept for it (images, snapshots) that no profile of this config starts
// from any more, past the profile's retention.
func (g *collector) setups(ctx context.Context, f sandbox.Found) {
	var others []*config.Profile
	for _, name := range g.c.ProfileNames() {
		others = append(others, g.c.Profiles[name])
	}
	res, err := f.Sandbox.PruneSetups(ctx, others, g.retention(f.Profile), g.dry)
	if errors.Is(err, sandbox.ErrNoPruner) {
		return
	}
	for _, ps := range res {
		g.say(gc.PlanSetup(gc.SetupInput{Ref: ps.Ref, Profile: f.Profile, Provider: f.Provider, Age: ps.Age, Left: ps.Left}), nil)
	}
	if err != nil {
		g.unlisted(gc.Setup, "profile "+f.Profile, err)
	}
}

// parked removes, from a running sandbox of a configured profile whose
// runs have uids of their own (the only ones that park), the checkouts
// parked for reuse past the profile's retention. They hold no work.
func (g *collector) parked(ctx context.Context, f sandbox.Found) {
	p, ok := g.c.Profiles[f.Profile]
	if !ok || f.Listed == nil || f.Listed.State != sdk.HealthReady || !f.Sandbox.Info.RunUsers {
		return // not running: not started to tidy
	}
	st, err := stack.Open(ctx, g.a.stackHost(), p, f.Sandbox.Ref.Name)
	if err != nil {
		g.unlisted(gc.Parked, "sandbox "+f.Sandbox.Ref.Name, err)
		return
	}
	defer st.Close(context.WithoutCancel(ctx))
	err = st.Up(ctx)
	switch {
	case err != nil:
	case g.dry:
		// Looking changes nothing in the sandbox: no worker installed,
		// no watchdog started.
		var found bool
		if found, err = st.FindWorker(ctx); err == nil && !found {
			err = errors.New("it has no amelia-worker of this version, which amelia gc without --dry-run puts in")
		}
	default:
		err = st.InstallWorker(ctx)
	}
	if err == nil {
		err = st.OpenWorkspace(workspace.Options{})
	}
	var parked []workspace.ParkedCheckout
	if err == nil {
		parked, err = st.Workspace.PruneParked(ctx, g.retention(f.Profile), g.dry)
	}
	if err != nil {
		g.unlisted(gc.Parked, "sandbox "+f.Sandbox.Ref.Name, err)
		return
	}
	for _, pc := range parked {
		it, ok := gc.PlanParked(gc.ParkedInput{Name: pc.Name, Sandbox: f.Sandbox.Ref.Name, UID: pc.UID, Age: pc.Age, Retention: g.retention(f.Profile)})
		if ok {
			g.say(it, nil)
		}
	}
}

// listWorkersScript prints the sandbox's time, then the modification
// time and path of each amelia-worker-<16 hex digits> regular file in
// the install directory ($1, else $HOME/.amelia/bin), one a line.
const listWorkersScript = `d=${1:-${HOME:+$HOME/.amelia/bin}}
date +%s
cd "$d" 2>/dev/null || exit 0
for f in amelia-worker-*; do
	case ${f#amelia-worker-} in ????????????????) ;; *) continue ;; esac
	case ${f#amelia-worker-} in *[!0-9a-f]*) continue ;; esac
	[ -f "$f" ] && [ ! -L "$f" ] || continue
	printf '%s %s/%s\n' "$(stat -c %Y "$f")" "$d" "$f"
done`

// workers removes, from a running sandbox of a configured profile, the
// worker binaries neither this host's amelia nor a recorded run uses.
func (g *collector) workers(ctx context.Context, f sandbox.Found) {
	if f.Listed == nil || f.Listed.State != sdk.HealthReady {
		return // not running: not started to tidy a cache
	}
	st := stack.Over(f.Sandbox, g.a.logger)
	if err := st.Up(ctx); err != nil {
		g.unlisted(gc.Worker, "sandbox "+f.Sandbox.Ref.Name, err)
		return
	}
	var out strings.Builder
	status, err := st.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", listWorkersScript, "sh", st.Running.Worker.Dir}}, sdk.ExecIO{Stdout: &limited{w: &out, n: 64 << 10}, Stderr: io.Discard})
	if err == nil && status.Code != 0 {
		err = fmt.Errorf("list the workers: exit %d", status.Code)
	}
	if err != nil {
		g.unlisted(gc.Worker, "sandbox "+f.Sandbox.Ref.Name, err)
		return
	}
	keep := map[string]bool{}
	for _, n := range g.a.workers().WorkerNames() {
		keep[n] = true
	}
	for _, r := range g.all {
		if r.Worker != "" {
			keep[r.Worker] = true
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	var sandboxNow int64
	for first := true; sc.Scan(); first = false {
		if first {
			sandboxNow, _ = strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
			continue
		}
		mtime, p, ok := strings.Cut(sc.Text(), " ")
		secs, err := strconv.ParseInt(mtime, 10, 64)
		if !ok || err != nil || !path.IsAbs(p) || path.Clean(p) != p || !strings.HasPrefix(path.Base(p), "amelia-worker-") {
			continue
		}
		it, ok := gc.PlanWorker(gc.WorkerInput{Path: p, Sandbox: f.Sandbox.Ref.Name, Age: time.Duration(sandboxNow-secs) * time.Second,
			Retention: g.retention(f.Profile), Current: keep[path.Base(p)] || keep[p]})
		if !ok {
			continue
		}
		var rmErr error
		if !g.dry {
			var st2 sdk.ExitStatus
			st2, rmErr = st.Exec(ctx, sdk.ExecRequest{Argv: []string{"rm", "-f", "--", p}}, sdk.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
			if rmErr == nil && st2.Code != 0 {
				rmErr = fmt.Errorf("rm: exit %d", st2.Code)
			}
		}
		g.say(it, rmErr)
	}
}

// limited keeps at most n bytes.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
