package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/run"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/workspace"
)

// runs is this host's record of runs whose work is in a sandbox.
func (a *app) runs() *runstore.Store {
	return runstore.New(filepath.Join(a.stateDir(), "amelia", "runs"))
}

// runLogs is this host's copy of the logs of the runs it showed.
func (a *app) runLogs() *runstore.Logs {
	return runstore.NewLogs(filepath.Join(a.stateDir(), "amelia", "logs"))
}

func (a *app) resultsCommand() *cobra.Command {
	var (
		discard bool
		repo    string
	)
	cmd := &cobra.Command{
		Use:   "results [--profile P] [--repo DIR | --discard] WORKFLOW",
		Short: "Bring back the work of a run that failed, was interrupted or lost its host, or discard it",
		Long: `A run that fails or is interrupted after its agent started keeps its work:
what the agent left is committed to the branch amelia/<workflow> in the
sandbox, and the worktree stays. amelia results brings that branch into the
host checkout the run started from (or the one --repo names, which a run on
a URL needs), then removes the worktree from the sandbox. --discard removes
it without bringing anything back, stopping the agent first if it still
runs. The agent of a run whose host died goes on in the sandbox: once it
has ended, amelia results brings its work back; while it runs, amelia
attach follows it. Work that amelia gc exported from the sandbox to a
bundle on this host comes back from that bundle, which then goes.`,
		Example: `  amelia results fix-login-3f9a
  amelia results --profile dev --repo ~/src/app fix-login-3f9a
  amelia results --discard fix-login-3f9a`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := oneWorkflow("results WORKFLOW")(cmd, args); err != nil {
				return err
			}
			if discard && repo != "" {
				return usageError{errors.New("--discard brings nothing back: leave out --repo")}
			}
			return nil
		},
		ValidArgsFunction: a.completeWorkflows(nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := a.recordedRun(args[0])
			if err != nil {
				return err
			}
			switch {
			case rec.State == runstore.Exported:
				// amelia gc exported the work to this host: its sandbox
				// holds nothing of it.
				return a.fromExport(cmd, rec, repo, discard)
			case rec.State == runstore.Checked && discard:
				// The run ended before its sandbox was up: nothing of it
				// is there.
				if err := a.runs().Delete(rec.Profile, rec.Workflow); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "forgot the run of %s: it left nothing in sandbox %s\n", rec.Workflow, rec.SandboxName())
				return nil
			case !discard && (rec.State.Preparing() || rec.State == runstore.Discarded):
				return fmt.Errorf("the run of %s left no work to bring back (it is %s): remove what is left of it with %s --discard", rec.Workflow, rec.State, run.RecoverCommand(rec))
			}
			return a.withRecordedRun(cmd.Context(), rec, func(st *stack.Stack) error {
				// Its steps are one piece of work to the sandbox's watchdog.
				release := st.KeepAwake(cmd.Context())
				defer func() {
					ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
					defer cancel()
					if err := release(ctx); err != nil {
						a.logger.Warn("could not let the sandbox stop once idle", "err", err)
					}
				}()
				if err := settleRunning(cmd.Context(), st, rec, discard); err != nil {
					return err
				}
				if discard {
					if err := a.forgetRun(cmd.Context(), st.Workspace, rec); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "discarded the work of %s from sandbox %s\n", rec.Workflow, rec.Profile)
					return nil
				}
				if rec.State == runstore.Delivered {
					return fmt.Errorf("the run of %s delivered %s already; its worktree was kept with --keep-worktree: remove it with %s --discard", rec.Workflow, rec.Branch, run.RecoverCommand(rec))
				}
				return a.bringBack(cmd, st.Workspace, rec, repo)
			})
		},
	}
	cmd.Flags().BoolVar(&discard, "discard", false, "remove the kept work from the sandbox instead of bringing it back")
	cmd.Flags().StringVar(&repo, "repo", "", "host checkout to bring the branch into (default: the one the run started from)")
	return cmd
}

// recordedRun is the record of workflow: of --profile's sandbox when given,
// else the only one there is.
func (a *app) recordedRun(workflow string) (runstore.Record, error) {
	if err := workspace.ValidateWorkflowID(workflow); err != nil {
		return runstore.Record{}, usageError{err}
	}
	var c *config.Config // loaded for the first record that names its config
	ofThis := func(rec runstore.Record) error {
		if rec.Config != "" && c == nil {
			var err error
			if c, err = a.loadConfig(); err != nil {
				return err
			}
		}
		return ofThisConfig(c, rec)
	}
	store := a.runs()
	if a.profile != "" {
		rec, err := store.Get(a.profile, workflow)
		if err == nil {
			err = ofThis(rec)
		}
		if errors.Is(err, runstore.ErrNotFound) {
			return rec, notRecorded(fmt.Sprintf("no work of workflow %s is kept in the sandbox of profile %s on this host (amelia sandbox ls lists each sandbox's workflows)", workflow, a.profile))
		}
		return rec, err
	}
	recs, err := store.Find(workflow)
	if err != nil {
		return runstore.Record{}, err
	}
	var elsewhere error // a record of another config file's run
	recs = slices.DeleteFunc(recs, func(r runstore.Record) bool {
		err := ofThis(r)
		if err != nil && elsewhere == nil {
			elsewhere = err
		}
		return err != nil
	})
	switch {
	case len(recs) == 0 && elsewhere != nil:
		return runstore.Record{}, elsewhere
	case len(recs) == 0:
		return runstore.Record{}, notRecorded(fmt.Sprintf("no work of workflow %s is kept on this host (amelia sandbox ls lists each sandbox's workflows)", workflow))
	}
	profiles := make([]string, len(recs))
	for i, r := range recs {
		profiles[i] = r.Profile
	}
	if _, err := onlyProfile(workflow, "work in the sandboxes", profiles); err != nil {
		return runstore.Record{}, err
	}
	return recs[0], nil
}

// onlyProfile is the one of profiles, those with what of workflow (work
// in the sandboxes, logs of the runs): runstore.ErrNotFound when there is
// none, and an error saying to pick one with --profile when there are more.
func onlyProfile(workflow, what string, profiles []string) (string, error) {
	switch len(profiles) {
	case 0:
		return "", runstore.ErrNotFound
	case 1:
		return profiles[0], nil
	}
	return "", fmt.Errorf("workflow %s has %s of profiles %s: pick one with --profile", workflow, what, strings.Join(profiles, ", "))
}

// notRecorded is recordedRun's error when no record matches; it matches
// runstore.ErrNotFound.
type notRecorded string

func (e notRecorded) Error() string        { return string(e) }
func (e notRecorded) Is(target error) bool { return target == runstore.ErrNotFound }

// ofThisConfig refuses the record of a run made from another config file
// than c: its sandbox is that config's, not this one's. A record of an
// older version, which does not say, is taken as this config's (its
// sandbox must still be this config's to be used; see
// sandbox.ErrNotOwned); c may be nil for it.
func ofThisConfig(c *config.Config, rec runstore.Record) error {
	if rec.Config == "" {
		return nil
	}
	p, err := c.Profile(rec.Profile)
	if err != nil {
		return nil // recordedProfile says so
	}
	if label := sandbox.ConfigLabel(p); label != rec.Config {
		return fmt.Errorf("workflow %s is a run of profile %s in another config file (%s), not of this one (%s): use amelia --config with that file",
			rec.Workflow, rec.Profile, rec.Config, label)
	}
	return nil
}

// recordedProfile is the profile rec's run ran with, with the provider
// it used.
func (a *app) recordedProfile(rec runstore.Record) (*config.Profile, error) {
	c, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	p, err := c.Profile(rec.Profile)
	if err != nil {
		return nil, fmt.Errorf("the work of %s is in the sandbox of profile %s: %w", rec.Workflow, rec.Profile, err)
	}
	p.Sandbox.Provider = rec.Provider
	return p, nil
}

// releaseTimeout bounds the end of results' hold on the sandbox (its
// exec ends once its stdin does), so a stuck connection cannot keep the
// command from ending once its work is done.
const releaseTimeout = 30 * time.Second

// withRecordedRun starts the sandbox that holds rec's work (with the
// provider the run used), puts the worker in, and gives fn the lot: its
// workspace, and its driver running as the workflow's uid when it has one.
func (a *app) withRecordedRun(ctx context.Context, rec runstore.Record, fn func(*stack.Stack) error) error {
	p, err := a.recordedProfile(rec)
	if err != nil {
		return err
	}
	st, err := stack.OpenWorkflow(ctx, a.stackHost(), p, rec.SandboxName(), rec.Workflow)
	if err != nil {
		return err
	}
	defer st.Close(context.WithoutCancel(ctx))
	return fn(st)
}

// settleRunning makes sure rec's agent no longer runs: with stop, it is
// stopped; without, a running one is an error that says how to follow it.
func settleRunning(ctx context.Context, st *stack.Stack, rec runstore.Record, stop bool) error {
	if !rec.State.AgentMayRun() || rec.RunDir == "" {
		return nil
	}
	if stop {
		if err := st.Driver.StopAgentic(ctx, rec.RunDir); err != nil && !errors.Is(err, driver.ErrRunLost) {
			return err
		}
		return nil
	}
	state, err := st.Driver.AgenticState(ctx, rec.RunDir)
	if err != nil {
		return err
	}
	if state.State == driver.AgentRunning {
		return fmt.Errorf("the agent of %s is still running in sandbox %s: follow it, and get its result at the end, with amelia attach --profile %s %s",
			rec.Workflow, rec.SandboxName(), rec.Profile, rec.Workflow)
	}
	return nil
}

// forgetRun removes what is left of rec's run in the sandbox and on the
// host, once its work is back or discarded: its checkout and run
// directory are retired as a delivered run's are (workspace.Retire), so
// however large the tree, nothing waits for its removal.
func (a *app) forgetRun(ctx context.Context, ws *workspace.Workspace, rec runstore.Record) error {
	if err := ws.Retire(ctx, rec.Workflow, rec.RunDir); err != nil {
		return err
	}
	return a.runs().Delete(rec.Profile, rec.Workflow)
}

// hostRepoOf is the host checkout rec's work comes back into: dir, else
// the one the run started from.
func (a *app) hostRepoOf(ctx context.Context, rec runstore.Record, dir string) (*workspace.HostRepo, error) {
	if dir == "" {
		dir = rec.Repo
		if strings.Contains(dir, "://") || !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("the run of %s worked on %s: bring its work into a local clone of it with %s --repo DIR", rec.Workflow, rec.Repo, run.RecoverCommand(rec))
		}
	}
	return workspace.OpenHostRepo(ctx, dir, a.logger)
}

// fromExport brings rec's branch back from the bundle amelia gc exported
// it to (or with discard drops it), then removes the bundle and the
// record.
func (a *app) fromExport(cmd *cobra.Command, rec runstore.Record, dir string, discard bool) error {
	ctx := cmd.Context()
	forget := func() error {
		if err := a.exports().Remove(rec.Export); err != nil {
			return err
		}
		return a.runs().Delete(rec.Profile, rec.Workflow)
	}
	if discard {
		if err := forget(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "discarded the work of %s exported to %s\n", rec.Workflow, rec.Export)
		return nil
	}
	host, err := a.hostRepoOf(ctx, rec, dir)
	if err != nil {
		return err
	}
	data, err := a.exports().Read(rec.Export)
	if err != nil {
		return err
	}
	base := workspace.Base{Branch: rec.BaseBranch, Commit: rec.BaseCommit}
	_, err = host.StoreBundle(ctx, data, rec.Workflow, base, workspace.ResultOptions{})
	switch {
	case errors.Is(err, workspace.ErrBranchExists):
		return fmt.Errorf("%w: rename that branch, or bring the work into another checkout with --repo", err)
	case err != nil:
		return err
	}
	stat, err := host.DiffStat(ctx, rec.BaseCommit, rec.Branch)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "branch %s in %s (from %s)\n%s", rec.Branch, host.Dir, rec.Export, stat)
	// The work is in the host checkout now: the export can go.
	return forget()
}

// bringBack fetches rec's branch into the host checkout and removes the
// worktree once the branch is there.
func (a *app) bringBack(cmd *cobra.Command, ws *workspace.Workspace, rec runstore.Record, dir string) error {
	ctx := cmd.Context()
	host, err := a.hostRepoOf(ctx, rec, dir)
	if err != nil {
		return err
	}
	if _, err := ws.CommitAll(ctx, rec.Workflow, ""); err != nil {
		return err
	}
	base := workspace.Base{Branch: rec.BaseBranch, Commit: rec.BaseCommit}
	_, err = ws.FetchResult(ctx, host, rec.Workflow, base, workspace.ResultOptions{})
	switch {
	case errors.Is(err, workspace.ErrNoChanges):
		fmt.Fprintf(cmd.OutOrStdout(), "the run of %s left no changes\n", rec.Workflow)
	case errors.Is(err, workspace.ErrBranchExists):
		return fmt.Errorf("%w: rename that branch, or bring the work into another checkout with --repo", err)
	case err != nil:
		return err
	default:
		stat, err := host.DiffStat(ctx, rec.BaseCommit, rec.Branch)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "branch %s in %s\n%s", rec.Branch, host.Dir, stat)
	}
	// The work is on the host now: the sandbox's copy can go.
	return a.forgetRun(ctx, ws, rec)
}
