package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/run"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/stack"
)

// oneWorkflow is the Args of commands on one workflow.
func oneWorkflow(use string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{fmt.Errorf("%s needs one workflow id: amelia %s", cmd.Name(), use)}
		}
		return nil
	}
}

func (a *app) attachCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "attach [--profile P] [--json] WORKFLOW",
		Short: "Take over a run whose agent is still going: show it from the start, then bring its result back",
		Long: `The agent of a run goes on in its sandbox when amelia loses it: the
connection broke for longer than amelia waits, or the amelia process died
(killed, the terminal closed, the machine slept). amelia attach takes the run
over from any terminal of this host: it serves the agent's model calls
again, with the model the run recorded (a scripted one is played here
again, without a key), shows the run from its first message, and at its
end brings the branch back as amelia run would, or keeps the work if it
failed. An agent that has ended needs no key: only one still running is
refused while the profile's key is not set.

Ctrl-C stops the agent, as it does for amelia run; to watch a run without
taking it over, use amelia logs -f.`,
		Example: `  amelia attach fix-login-3f9a
  amelia attach --profile dev --json fix-login-3f9a`,
		Args:              oneWorkflow("attach WORKFLOW"),
		ValidArgsFunction: a.completeWorkflows(running),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := a.recordedRun(args[0])
			if err != nil {
				return err
			}
			p, err := a.recordedProfile(rec)
			if err != nil {
				return err
			}
			// A scripted model is played here again; the run's token is
			// served, with the profile's keys when they are set.
			p, stop, err := playScripted(p, rec.Model)
			if err != nil {
				return err
			}
			defer stop()
			return a.showRun(cmd, asJSON, func(view runview.View) (run.Result, error) {
				return run.Attach(cmd.Context(), a.runHost(), rec, p, a.scriptedNote(view, rec.Model))
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON line per event, for programs")
	return cmd
}

func (a *app) logsCommand() *cobra.Command {
	var asJSON, follow bool
	cmd := &cobra.Command{
		Use:   "logs [--profile P] [-f] [--json] WORKFLOW",
		Short: "Show what the agent of a run said, running or kept; -f follows it until it ends",
		Long: `Show the messages of a run's agent, as amelia run showed them, from the log
its sandbox keeps: of a run still going (whether or not an amelia process
follows it) or of one whose work is kept. With -f, go on showing them until
the agent ends; stopping amelia logs leaves the agent running. Of an agent
whose sandbox restarted under it, show what it wrote until then, and how to
bring its work back. Of a run that left nothing in its sandbox (it
delivered its branch, or its work was brought back or discarded), show the
copy this host keeps for 7 days after the run ends.`,
		Example: `  amelia logs fix-login-3f9a
  amelia logs -f --json fix-login-3f9a`,
		Args:              oneWorkflow("logs WORKFLOW"),
		ValidArgsFunction: a.completeWorkflows(withLog),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := a.showLogs(cmd.Context(), args[0], follow, asJSON)
			if cmd.Context().Err() != nil {
				// Ctrl-C: following stops, the agent goes on; as other
				// commands do, exit 130 without a word.
				return exitError{130}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON line per message, for programs")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on until the agent ends")
	return cmd
}

// showLogs shows the log of workflow's agent: from its sandbox while the
// run is recorded there (not once delivered or exported by gc: its run
// directory is gone), else this host's copy.
func (a *app) showLogs(ctx context.Context, workflow string, follow, asJSON bool) error {
	rec, rerr := a.recordedRun(workflow)
	if rerr == nil && rec.RunDir != "" && rec.State != runstore.Delivered && rec.State != runstore.Exported {
		return a.withRecordedRun(ctx, rec, func(st *stack.Stack) error {
			view := runview.New(a.stdout, asJSON) // the worker's messages, as they are
			err := showLog(ctx, st.Driver, rec, follow, view)
			return errors.Join(err, view.Close())
		})
	}
	f, err := a.hostLog(workflow)
	switch {
	case err == nil:
		defer f.Close()
		view := runview.New(a.stdout, asJSON)
		err := showHostLog(f, view)
		return errors.Join(err, view.Close())
	case !errors.Is(err, runstore.ErrNotFound):
		return err
	case rerr != nil && !errors.Is(rerr, runstore.ErrNotFound):
		return rerr
	}
	return fmt.Errorf("no log of workflow %s on this host: a run's log is kept in its sandbox while its agent runs or its work is kept there, and on this host for %d days after the run ends (amelia sandbox ls lists each sandbox's workflows)",
		workflow, int(runstore.LogRetention.Hours()/24))
}

// hostLog opens this host's copy of the log of workflow: of --profile's
// sandbox when given, else of the only profile that has one.
func (a *app) hostLog(workflow string) (*os.File, error) {
	logs := a.runLogs()
	profile := a.profile
	if profile == "" {
		var err error
		if profile, err = onlyProfile(workflow, "logs of the runs", logs.Find(workflow)); err != nil {
			return nil, err
		}
	}
	f, _, err := logs.Open(profile, workflow)
	return f, err
}

// showHostLog shows the messages of a log this host kept (runstore.Logs).
func showHostLog(r io.Reader, view runview.View) error {
	dec := protocol.NewDecoder(r)
	for {
		m, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the run's log: %w", err)
		}
		view.Message(m)
	}
}

// showLog shows the messages of rec's agent on view, with follow until it
// ends. Of an agent whose supervisor is gone without an exit status (its
// sandbox restarted), it shows the log it left and says what happened.
func showLog(ctx context.Context, d *driver.Driver, rec runstore.Record, follow bool, view runview.View) error {
	shown := 0
	var err error
	for m, merr := range d.AgenticLog(ctx, rec.RunDir, follow) {
		if merr != nil {
			err = merr
			break
		}
		view.Message(&m)
		shown++
	}
	if !errors.Is(err, driver.ErrRunLost) {
		return err
	}
	if st, serr := d.AgenticState(ctx, rec.RunDir); serr != nil || st.State != driver.AgentLost {
		return fmt.Errorf("%w; bring back what is left of its work with %s", err, run.RecoverCommand(rec))
	}
	wrote := "above is what it wrote until then"
	if shown == 0 {
		wrote = "it wrote nothing before"
	}
	return fmt.Errorf("the agent of %s is not running: its supervisor in sandbox %s is gone without an exit status (the sandbox restarted, or something killed it); %s; bring its work back with %s",
		rec.Workflow, rec.SandboxName(), wrote, run.RecoverCommand(rec))
}
