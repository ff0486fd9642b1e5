package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// shellArgv starts the sandbox's bash, or its sh where it has none.
var shellArgv = []string{"sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh`}

func (a *app) sandboxShellCommand() *cobra.Command {
	var workflow string
	cmd := &cobra.Command{
		Use:   "shell [--workflow ID]",
		Short: "Open an interactive shell in the profile's sandbox (started if needed)",
		Long: `Open an interactive shell (bash, or sh where the sandbox has no bash) on a
terminal in the profile's sandbox, starting the sandbox first if it is not
running. The terminal follows this one's size; amelia exits with the
shell's exit code.

With --workflow, the shell runs as that workflow's user (its own uid where
the provider separates runs) in its checkout, so what it does there is the
run's to see and commit.

It needs a provider that gives terminals (amelia plugin ls shows TTY) and
a terminal on stdin; elsewhere it refuses, and amelia sandbox exec runs
commands without one.`,
		Example: `  amelia sandbox shell
  amelia sandbox shell --profile dev --workflow fix-login-3f9a`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if workflow != "" {
				if err := workspace.ValidateWorkflowID(workflow); err != nil {
					return usageError{fmt.Errorf("--workflow: %w", err)}
				}
			}
			st, err := a.openStack(ctx)
			if err != nil {
				return err
			}
			defer st.Close(context.WithoutCancel(ctx))
			if info := st.Sandbox().Info; !info.TTY {
				return fmt.Errorf("sandbox shell: the %s provider gives no terminal (it does not declare TTY); run commands with amelia sandbox exec -- COMMAND instead", info.Name)
			}
			term, err := openTerminal(a.stdin)
			if err != nil {
				return usageError{fmt.Errorf("sandbox shell: %w; to run commands without a terminal, use amelia sandbox exec -i -- sh", err)}
			}
			if err := st.Up(ctx); err != nil {
				return err
			}
			var ex sandboxexec.Execer = st
			req := sdk.ExecRequest{Argv: shellArgv}
			if workflow != "" {
				if err := st.InstallWorker(ctx); err != nil {
					return err
				}
				if err := st.OpenWorkspace(workspace.Options{}); err != nil {
					return err
				}
				ids, err := workspace.Workflows(ctx, st)
				if err != nil {
					return err
				}
				if !slices.Contains(ids, workflow) {
					sb := st.Sandbox()
					return fmt.Errorf("sandbox shell: no workflow %s in %s (amelia sandbox ls lists each sandbox's workflows)", workflow, sandboxOf(sb.Ref.Name, sb.Profile.Name))
				}
				if err := st.As(ctx, workflow, nil); err != nil {
					return err
				}
				ex = workspace.RunAs(st, st.UID)
				req.Dir = st.Workspace.WorktreeDir(workflow)
			}
			if t := a.getenv("TERM"); t != "" {
				req.Env = map[string]string{"TERM": t}
			}
			status, err := term.run(ctx, func(size sdk.TermSize, resize <-chan sdk.TermSize) (sdk.ExitStatus, error) {
				req.TTY, req.Size = true, size
				return ex.Exec(ctx, req, sdk.ExecIO{Stdin: a.stdin, Stdout: a.stdout, Resize: resize})
			})
			if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return exitError{130}
			}
			if err != nil {
				return err
			}
			if status.Canceled {
				return exitError{130}
			}
			if status.Code != 0 {
				return exitError{status.Code}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "run as this workflow's user, in its checkout")
	return cmd
}
