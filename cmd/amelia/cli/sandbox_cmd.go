package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/gc"
	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func (a *app) sandboxCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "sandbox",
		Short: "Start, use, check and remove a profile's sandbox",
	})
	cmd.AddCommand(a.sandboxUpCommand(), a.sandboxDownCommand(), a.sandboxExecCommand(), a.sandboxHealthCommand(), a.sandboxLsCommand(), a.sandboxShellCommand(), a.sandboxPortForwardCommand(), a.sandboxPrepareCommand(), a.sandboxCpCommand(), a.sandboxCatCommand(), a.sandboxPutCommand())
	return cmd
}

// withSandbox opens the selected profile's sandbox for fn.
func (a *app) withSandbox(ctx context.Context, fn func(*sandbox.Sandbox) error) error {
	sb, err := a.openSandbox(ctx)
	if err != nil {
		return err
	}
	defer sb.Close()
	return fn(sb)
}

func (a *app) sandboxUpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "up",
		Short: "Start the profile's sandbox, or reuse it when it runs",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.openStack(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close(context.WithoutCancel(cmd.Context()))
			sb := st.Sandbox()
			if err := st.Up(cmd.Context()); err != nil {
				return err
			}
			s := *st.Running
			// It stops by itself once idle (sandbox.idle_timeout).
			a.withWatchdog(cmd.Context(), st)
			how := "reused"
			if s.Created {
				how = "created"
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "sandbox %s of profile %s %s (provider %s)\n", s.Ref.Name, sb.Profile.Name, how, sb.Info.Name)
			fmt.Fprintf(w, "workdir: %s\n", s.Workdir)
			for _, k := range slices.Sorted(maps.Keys(s.Details)) {
				fmt.Fprintf(w, "%s: %s\n", k, s.Details[k])
			}
			return nil
		},
	}
}

func (a *app) sandboxDownCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the profile's sandbox and everything running in it",
		Long: `Remove the profile's sandbox and everything running in it. A sandbox that
holds work not brought back (a run in progress, or the kept work of a run
that failed or was interrupted) is not removed without --force.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				removed, err := a.removeSandbox(cmd.Context(), sb, sb.Profile.Name, force)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), removedLine(sandboxOf(sb.Ref.Name, sb.Profile.Name), sb.Info.Name, removed))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even when it holds work not brought back")
	return cmd
}

// sandboxOf names sandbox name of profile in messages.
func sandboxOf(name, profile string) string {
	return "sandbox " + name + " of profile " + profile
}

// removeSandbox tears sb (of profile) down, unless it holds work that
// was not brought back and force is not set; it reports whether there was
// a sandbox to remove. With force, the records of the runs it held go with
// it. A sandbox that is not this config file's is refused (see
// sandbox.ErrNotOwned), and so never reported removed.
func (a *app) removeSandbox(ctx context.Context, sb *sandbox.Sandbox, profile string, force bool) (bool, error) {
	st := a.sandboxState(ctx, sb)
	if st.State == "not-owned" {
		return false, errors.New(st.Message)
	}
	state := st.State
	absent := state == "absent"
	if !force && !absent {
		atRisk, err := a.workAtRisk(ctx, sb, profile, state)
		if err != nil {
			return false, fmt.Errorf("%s: cannot tell whether it holds work not brought back (%w); pass --force to remove it anyway", sandboxOf(sb.Ref.Name, profile), err)
		}
		if len(atRisk) > 0 {
			return false, fmt.Errorf("%s holds work not brought back: %s; bring kept work back with amelia results --profile %s WORKFLOW, or pass --force to delete it all",
				sandboxOf(sb.Ref.Name, profile), strings.Join(atRisk, ", "), profile)
		}
	}
	if err := sb.Down(ctx); err != nil {
		return false, err
	}
	recs, err := a.runsIn(sb, profile)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if r.State == runstore.Exported {
			continue // its work is on this host, not in the sandbox
		}
		if err := a.runs().Delete(profile, r.Workflow); err != nil {
			return false, err
		}
	}
	return !absent, nil
}

// runsIn are the records of the runs of profile whose work is in sb: not
// those of the profile's sandbox on another provider, nor of a sandbox of
// the same profile name in another config file.
func (a *app) runsIn(sb *sandbox.Sandbox, profile string) ([]runstore.Record, error) {
	recs, err := a.runs().Of(profile)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(recs, func(r runstore.Record) bool { return !recordedIn(r, sb) }), nil
}

// recordedIn reports whether r is the record of a run in sb.
func recordedIn(r runstore.Record, sb *sandbox.Sandbox) bool {
	return (r.Provider == "" || r.Provider == sb.Info.Name) && r.SandboxName() == sb.Ref.Name
}

// removedLine says what removing what (on provider) did.
func removedLine(what, provider string, removed bool) string {
	if !removed {
		return fmt.Sprintf("%s (provider %s): none to remove", what, provider)
	}
	return fmt.Sprintf("%s removed (provider %s)", what, provider)
}

// workAtRisk lists what removing sb (of profile) would lose: the kept work
// of runs recorded on this host, and every worktree in it but those
// already delivered (a run in progress, or one nobody recorded). state is
// the sandbox's, as removeSandbox found it (not absent).
func (a *app) workAtRisk(ctx context.Context, sb *sandbox.Sandbox, profile, state string) ([]string, error) {
	recs, err := a.runsIn(sb, profile)
	if err != nil {
		return nil, err
	}
	recorded := map[string]runstore.State{}
	for _, r := range recs {
		recorded[r.Workflow] = r.State
	}
	var atRisk []string
	if state == string(sdk.HealthReady) {
		wctx, cancel := context.WithTimeout(ctx, sdk.HealthCheckTimeout)
		defer cancel()
		ids, err := workspace.Workflows(wctx, sb)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			switch st, ok := recorded[id]; {
			case st.HoldsWork():
				atRisk = append(atRisk, id+" ("+string(st)+")")
			case st.Preparing():
				atRisk = append(atRisk, id+" (in progress: "+string(st)+")")
			case !ok:
				atRisk = append(atRisk, id+" (in progress, or left by a run this host did not record)")
			}
			delete(recorded, id)
		}
	}
	// Kept work the sandbox could not be asked about (it is stopped).
	for _, r := range recs {
		if st := recorded[r.Workflow]; st.HoldsWork() {
			atRisk = append(atRisk, r.Workflow+" ("+string(st)+")")
		}
	}
	return atRisk, nil
}

func (a *app) sandboxExecCommand() *cobra.Command {
	var (
		stdin   bool
		bulk    bool
		workdir string
		user    string
		env     []string
		timeout time.Duration
		grace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] -- COMMAND [ARG...]",
		Short: "Run a command in the profile's sandbox (started if needed) and exit with its exit code",
		Long: `Run a command in the profile's sandbox, starting the sandbox first if it is
not running. Output streams as it is produced; amelia exits with the
command's exit code (128+N when a signal N killed it, 130 on Ctrl-C).

--bulk says the command moves much data (an archive, a dump): the
provider then runs it where throughput beats the time to start (on
docker, an exec of the engine's own rather than the sandbox's command
session: tens of milliseconds more to start, then its output at the
engine's full speed).`,
		Example: `  amelia sandbox exec -- ls -la
  amelia sandbox exec --profile dev -e DEBUG=1 -w src -- make test
  echo hi | amelia sandbox exec -i -- cat
  amelia sandbox exec --bulk -- tar -C /workspace -c . > workspace.tar`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("sandbox exec needs a command: amelia sandbox exec -- COMMAND [ARG...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			envMap := map[string]string{}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--env %q: use NAME=VALUE", kv)}
				}
				envMap[k] = v
			}
			req := sdk.ExecRequest{Argv: args, Env: envMap, Dir: workdir, User: user, Timeout: timeout, CancelGrace: grace}
			if bulk {
				req.Traffic = sdk.TrafficBulk
			}
			eio := sdk.ExecIO{Stdout: a.stdout, Stderr: a.stderr} // the command's output, as it is
			if stdin {
				eio.Stdin = cmd.InOrStdin()
			}
			st, err := a.openStack(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close(context.WithoutCancel(cmd.Context()))
			if err := st.Up(cmd.Context()); err != nil {
				return err
			}
			a.withWatchdog(cmd.Context(), st)
			status, err := st.Exec(cmd.Context(), req, eio)
			if err != nil && cmd.Context().Err() != nil && errors.Is(err, cmd.Context().Err()) {
				return exitError{130} // interrupted: the command was stopped
			}
			if err != nil {
				return err
			}
			switch {
			case status.Canceled:
				return exitError{130}
			case status.TimedOut:
				fmt.Fprintf(cmd.ErrOrStderr(), "amelia: %q timed out after %s\n", args[0], timeout)
			}
			if status.Code != 0 {
				return exitError{status.Code}
			}
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false) // flags after COMMAND belong to it
	f := cmd.Flags()
	f.BoolVarP(&stdin, "interactive", "i", false, "pass amelia's stdin to the command")
	f.BoolVar(&bulk, "bulk", false, "the command moves much data: run it for throughput, not a quick start")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory in the sandbox (relative to its workdir)")
	f.StringVarP(&user, "user", "u", "", "user to run as (default: the provider's unprivileged user)")
	f.StringArrayVarP(&env, "env", "e", nil, "set NAME=VALUE in the command's environment (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "stop the command after this long (e.g. 30s)")
	f.DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL when stopping it (default 5s)")
	return cmd
}

func (a *app) sandboxHealthCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Check the profile's sandbox; exit 0 only when it is ready",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				st := a.sandboxState(cmd.Context(), sb)
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s%s\n", sandboxOf(st.Sandbox, st.Profile), st.State, suffix(st.Message))
				if st.State != string(sdk.HealthReady) {
					return exitError{1}
				}
				return nil
			})
		},
	}
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

// sandboxRow is one line of `sandbox ls`.
type sandboxRow struct {
	Profile string `json:"profile"`
	// Sandbox is the sandbox's name (sandbox.Name), as its provider has
	// it; empty when the provider could not be asked.
	Sandbox  string `json:"sandbox,omitempty"`
	Provider string `json:"provider"`
	State    string `json:"state"` // ready, stopped, unhealthy, absent, error
	// Created is when the sandbox was created, where the provider can list
	// its sandboxes.
	Created *time.Time `json:"created,omitempty"`
	// Workflows have a worktree in the sandbox: runs in progress, the
	// kept work of runs that failed or were interrupted, and worktrees
	// kept with --keep-worktree.
	Workflows []string `json:"workflows"`
	// WorkflowStates says what each workflow's worktree is, by what this
	// host recorded: "kept" (work not brought back: amelia results),
	// "delivered" (kept with --keep-worktree after its branch came back),
	// or "active" (a run in progress, or one this host did not record).
	WorkflowStates map[string]string `json:"workflow_states,omitempty"`
	// Runs says how runs share the sandbox: "separated" where the
	// provider gives each run a uid of its own (sdk.Capabilities.RunUsers),
	// so they go side by side; elsewhere "one-at-a-time", or
	// "shared,unseparated" with sandbox.concurrent_runs. Empty for orphans.
	Runs string `json:"runs,omitempty"`
	// Orphan: this host created it, and no configured profile owns it.
	Orphan bool `json:"orphan,omitempty"`
	// Elsewhere: a profile's sandbox on a provider other than its own,
	// made by amelia run --sandbox.
	Elsewhere bool `json:"elsewhere,omitempty"`
	// Legacy: named for its profile alone, by an older version; amelia
	// stop removes it.
	Legacy  bool   `json:"legacy,omitempty"`
	Message string `json:"message,omitempty"`
	// Lifetime is what the sandbox's watchdog says of when it stops and
	// why (sandbox.idle_timeout, sandbox.max_lifetime), where it runs one.
	Lifetime *lifetime.Status `json:"lifetime,omitempty"`
	// NeverStops says why the sandbox never stops by itself, where its
	// provider says it does not (sdk.Health.NeverStops).
	NeverStops string `json:"never_stops,omitempty"`
}

// sandboxState asks the provider about the sandbox, within a bound.
func (a *app) sandboxState(ctx context.Context, sb *sandbox.Sandbox) sandboxRow {
	ctx, cancel := context.WithTimeout(ctx, sdk.HealthCheckTimeout+5*time.Second)
	defer cancel()
	row := sandboxRow{Profile: sb.Profile.Name, Sandbox: sb.Ref.Name, Provider: sb.Info.Name, Runs: runsMode(sb.Info.RunUsers, sb.Profile.Sandbox.ConcurrentRuns)}
	h, err := sb.Health(ctx)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		row.State = "absent"
	case errors.Is(err, sandbox.ErrNotOwned):
		row.State, row.Message = "not-owned", oneLine(err.Error())
	case err != nil:
		row.State, row.Message = "error", oneLine(err.Error())
	default:
		row.State, row.Message, row.NeverStops = string(h.State), h.Message, h.NeverStops
	}
	return row
}

func (a *app) sandboxLsCommand() *cobra.Command {
	var (
		asJSON   bool
		workflow string
	)
	cmd := &cobra.Command{
		Use:   "ls [PATH]",
		Short: "List the sandbox of every configured profile, and the orphans this host left, with their state, age and workflows; with PATH, a directory in the profile's sandbox",
		Long: `List the sandbox of every configured profile, and the orphans this host
left, with their state, age and workflows.

With PATH, list that directory of the profile's sandbox (started if
needed) instead, as ls -l does: relative to its workdir, or with
--workflow ID to that workflow's checkout.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("sandbox ls takes at most one PATH, got %q", args)}
			}
			if len(args) == 0 && workflow != "" {
				return usageError{errNoWorkflowPath}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return a.lsFiles(cmd, args[0], workflow, asJSON)
			}
			ctx := cmd.Context()
			var rows []sandboxRow
			err := a.eachSandbox(ctx, "", func(f sandbox.Found) {
				if f.Err != nil {
					rows = append(rows, sandboxRow{Profile: f.Profile, Provider: f.Provider, State: "error", Message: oneLine(f.Err.Error())})
					return
				}
				var row sandboxRow
				if f.Orphan {
					row = sandboxRow{Profile: f.Profile, Sandbox: f.Sandbox.Ref.Name, Provider: f.Provider, State: string(f.Listed.State), Orphan: true}
				} else {
					row = a.sandboxState(ctx, f.Sandbox)
				}
				row.Elsewhere, row.Legacy = f.Elsewhere, f.Legacy
				if f.Listed != nil && !f.Listed.Created.IsZero() {
					row.Created = &f.Listed.Created
				}
				if row.State == string(sdk.HealthReady) {
					wctx, cancel := context.WithTimeout(ctx, sdk.HealthCheckTimeout)
					defer cancel()
					ids, err := workspace.Workflows(wctx, f.Sandbox)
					if err != nil {
						row.Message = strings.TrimSpace(row.Message + "; " + oneLine(err.Error()))
					}
					row.Workflows = ids
					row.WorkflowStates = a.workflowStates(wctx, f.Sandbox, row.Profile, ids)
					if lt, err := lifetimeOf(wctx, f.Sandbox); err != nil {
						row.Message = strings.TrimSpace(row.Message + "; " + oneLine(err.Error()))
					} else {
						row.Lifetime = lt
					}
				}
				rows = append(rows, row)
			})
			if err != nil {
				return err
			}
			// The profiles' sandboxes in name order, then the orphans.
			slices.SortStableFunc(rows, func(x, y sandboxRow) int {
				if x.Orphan == y.Orphan {
					return 0
				}
				if y.Orphan {
					return -1
				}
				return 1
			})
			return printSandboxRows(cmd.OutOrStdout(), rows, asJSON, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&workflow, "workflow", "", "with PATH: the workflow whose checkout PATH is in")
	return cmd
}

func printSandboxRows(w io.Writer, rows []sandboxRow, asJSON bool, now time.Time) error {
	if asJSON {
		for i := range rows {
			if rows[i].Workflows == nil {
				rows[i].Workflows = []string{}
			}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tSANDBOX\tPROVIDER\tSTATE\tAGE\tSTOPS\tRUNS\tWORKFLOWS\tDETAIL")
	for _, r := range rows {
		name, age, workflows, detail, runs := r.Sandbox, "-", "-", r.Message, r.Runs
		if name == "" {
			name = "-"
		}
		if runs == "" {
			runs = "-"
		}
		if r.Created != nil {
			age = gc.Age(now.Sub(*r.Created))
		}
		if len(r.Workflows) > 0 {
			ws := make([]string, len(r.Workflows))
			for i, id := range r.Workflows {
				ws[i] = id + "(" + r.WorkflowStates[id] + ")"
			}
			workflows = strings.Join(ws, ",")
		}
		switch {
		case r.Orphan:
			detail = strings.TrimSpace("orphan (no profile owns it; amelia stop removes it) " + detail)
		case r.Legacy:
			detail = strings.TrimSpace("named by an older amelia (amelia stop removes it) " + detail)
		case r.Elsewhere:
			detail = strings.TrimSpace("made by amelia run --sandbox " + r.Provider + " " + detail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Profile, name, r.Provider, r.State, age, stopsColumn(r, now), runs, workflows, detail)
	}
	return tw.Flush()
}

// runsMode says how runs share a profile's sandbox: separated by uids
// where the provider can, else one at a time unless the profile lets them
// share it unseparated.
func runsMode(runUsers, concurrent bool) string {
	switch {
	case runUsers:
		return "separated"
	case concurrent:
		return "shared,unseparated"
	}
	return "one-at-a-time"
}

// workflowStates is the state of each workflow of profile's sandbox sb,
// by the records of this host; for a run recorded as running, by its
// agent in sb: still running, or finished, failed or lost (its
// supervisor gone) since its host last saw it.
func (a *app) workflowStates(ctx context.Context, sb *sandbox.Sandbox, profile string, ids []string) map[string]string {
	if len(ids) == 0 {
		return nil
	}
	states := map[string]string{}
	var (
		uids    map[string]string // each workflow's, where runs have their own
		uidsErr error             // asked once: a failed listing is not asked again
		asked   bool
		st      = stack.Over(sb, a.logger)
	)
	for _, id := range ids {
		states[id] = "active"
		r, err := a.runs().Get(profile, id)
		if err != nil || !recordedIn(r, sb) {
			continue
		}
		states[id] = string(r.State)
		if !r.State.AgentMayRun() || r.RunDir == "" || r.Worker == "" {
			continue
		}
		if sb.Info.RunUsers && !asked {
			uids, uidsErr = workspace.RunUsers(ctx, sb)
			asked = true
		}
		if uidsErr != nil {
			continue
		}
		// The worker that started the agent answers for it, as the run's
		// uid (its directory is that uid's alone); ls starts nothing and
		// installs nothing.
		d := st.RecordedDriver(r.Worker, uids[id])
		if st, err := d.AgenticState(ctx, r.RunDir); err == nil {
			states[id] = agentState(st)
		}
	}
	return states
}

// agentState names how a detached agent is, for sandbox ls.
func agentState(st driver.RunState) string {
	switch {
	case st.State == driver.AgentEnded && st.Code != nil && *st.Code == 0:
		return "finished"
	case st.State == driver.AgentEnded:
		return "failed"
	case st.State == driver.AgentRunning:
		return "running"
	}
	return "lost"
}

// eachSandbox visits the sandboxes this host made from the config file:
// each configured profile's own (in name order), then, wherever a provider
// amelia can start (built in or on the plugin path) can list them, the
// profiles' sandboxes on other providers (amelia run --sandbox) and the
// orphans. With only, it visits only that profile's sandboxes.
func (a *app) eachSandbox(ctx context.Context, only string, fn func(sandbox.Found)) error {
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	if only != "" {
		p, err := c.Profile(only)
		if err != nil {
			return err
		}
		only = p.Name
	}
	var profiles []*config.Profile
	for _, name := range c.ProfileNames() {
		profiles = append(profiles, c.Profiles[name])
	}
	// Every provider amelia can start, built in or on the plugin path,
	// may hold a sandbox of this config's (amelia run --sandbox NAME).
	host := a.pluginHost()
	plugins, _ := host.List()
	providers := make([]string, len(plugins))
	for i, p := range plugins {
		providers[i] = p.Name
	}
	sandbox.Sweep{
		Opener:    sandbox.Plugins(host),
		Profiles:  profiles,
		Providers: providers,
		Only:      only,
		Logger:    a.logger,
	}.Visit(ctx, fn)
	return nil
}

func (a *app) stopCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Tear down the sandbox of every configured profile and the orphans this host left, or only the sandbox of the profile --profile names",
		Long: `Tear down the sandbox of every configured profile and the orphans this host
left, or only the sandbox of the profile --profile names. A sandbox that
holds work not brought back (a run in progress, or the kept work of a run
that failed or was interrupted) is left alone without --force.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			failed := 0
			err := a.eachSandbox(cmd.Context(), a.profile, func(f sandbox.Found) {
				err := f.Err
				removed := false
				if err == nil {
					removed, err = a.removeSandbox(cmd.Context(), f.Sandbox, f.Profile, force)
				}
				if err != nil {
					failed++
					fmt.Fprintf(cmd.ErrOrStderr(), "amelia: %s\n", oneLine(err.Error()))
					return
				}
				what := sandboxOf(f.Sandbox.Ref.Name, f.Profile)
				if f.Orphan {
					what = fmt.Sprintf("orphaned sandbox %s (of profile %s)", f.Sandbox.Ref.Name, f.Profile)
				}
				fmt.Fprintln(cmd.OutOrStdout(), removedLine(what, f.Provider, removed))
			})
			if err != nil {
				return err
			}
			if failed > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove sandboxes even when they hold work not brought back")
	return cmd
}
