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
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func (a *app) sandboxCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "sandbox",
		Short: "Start, use, check and remove a profile's sandbox",
	})
	cmd.AddCommand(a.sandboxUpCommand(), a.sandboxDownCommand(), a.sandboxExecCommand(), a.sandboxHealthCommand(), a.sandboxLsCommand())
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
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				s, err := sb.Up(cmd.Context())
				if err != nil {
					return err
				}
				how := "reused"
				if s.Created {
					how = "created"
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "sandbox %s %s (provider %s)\n", s.Ref.Name, how, sb.Info.Name)
				fmt.Fprintf(w, "workdir: %s\n", s.Workdir)
				for _, k := range slices.Sorted(maps.Keys(s.Details)) {
					fmt.Fprintf(w, "%s: %s\n", k, s.Details[k])
				}
				return nil
			})
		},
	}
}

func (a *app) sandboxDownCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Remove the profile's sandbox and everything running in it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				if err := sb.Down(cmd.Context()); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s removed (provider %s)\n", sb.Ref.Name, sb.Info.Name)
				return nil
			})
		},
	}
}

func (a *app) sandboxExecCommand() *cobra.Command {
	var (
		stdin   bool
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
command's exit code (128+N when a signal N killed it, 130 on Ctrl-C).`,
		Example: `  amelia sandbox exec -- ls -la
  amelia sandbox exec --profile dev -e DEBUG=1 -w src -- make test
  echo hi | amelia sandbox exec -i -- cat`,
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
			eio := sdk.ExecIO{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
			if stdin {
				eio.Stdin = cmd.InOrStdin()
			}
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				if _, err := sb.Up(cmd.Context()); err != nil {
					return err
				}
				st, err := sb.Exec(cmd.Context(), req, eio)
				if err != nil && cmd.Context().Err() != nil && errors.Is(err, cmd.Context().Err()) {
					return exitError{130} // interrupted: the command was stopped
				}
				if err != nil {
					return err
				}
				switch {
				case st.Canceled:
					return exitError{130}
				case st.TimedOut:
					fmt.Fprintf(cmd.ErrOrStderr(), "amelia: %q timed out after %s\n", args[0], timeout)
				}
				if st.Code != 0 {
					return exitError{st.Code}
				}
				return nil
			})
		},
	}
	cmd.Flags().SetInterspersed(false) // flags after COMMAND belong to it
	f := cmd.Flags()
	f.BoolVarP(&stdin, "interactive", "i", false, "pass amelia's stdin to the command")
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
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s: %s%s\n", st.Profile, st.State, suffix(st.Message))
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
	Profile  string `json:"profile"`
	Provider string `json:"provider"`
	State    string `json:"state"` // ready, stopped, unhealthy, absent, error
	Message  string `json:"message,omitempty"`
}

// sandboxState asks the provider about the sandbox, within a bound.
func (a *app) sandboxState(ctx context.Context, sb *sandbox.Sandbox) sandboxRow {
	ctx, cancel := context.WithTimeout(ctx, sdk.HealthCheckTimeout+5*time.Second)
	defer cancel()
	row := sandboxRow{Profile: sb.Profile.Name, Provider: sb.Info.Name}
	h, err := sb.Health(ctx)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		row.State = "absent"
	case err != nil:
		row.State, row.Message = "error", oneLine(err.Error())
	default:
		row.State, row.Message = string(h.State), h.Message
	}
	return row
}

func (a *app) sandboxLsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the sandbox of every configured profile and its state",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []sandboxRow
			err := a.eachProfile(cmd.Context(), "", func(p *config.Profile, sb *sandbox.Sandbox, openErr error) {
				if openErr != nil {
					rows = append(rows, sandboxRow{Profile: p.Name, Provider: p.Sandbox.Provider, State: "error", Message: oneLine(openErr.Error())})
					return
				}
				rows = append(rows, a.sandboxState(cmd.Context(), sb))
			})
			if err != nil {
				return err
			}
			return printSandboxRows(cmd.OutOrStdout(), rows, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSandboxRows(w io.Writer, rows []sandboxRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tPROVIDER\tSTATE\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Profile, r.Provider, r.State, r.Message)
	}
	return tw.Flush()
}

// eachProfile opens the sandbox of every configured profile in name order
// (one plugin process at a time), or of the profile only names when it is
// not "", and calls fn with it, or with the error that kept it from opening.
func (a *app) eachProfile(ctx context.Context, only string, fn func(*config.Profile, *sandbox.Sandbox, error)) error {
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	names := c.ProfileNames()
	if only != "" {
		p, err := c.Profile(only)
		if err != nil {
			return err
		}
		names = []string{p.Name}
	}
	host := a.pluginHost()
	for _, name := range names {
		p := c.Profiles[name]
		sb, err := sandbox.Open(ctx, host, p, a.logger)
		fn(p, sb, err)
		if sb != nil {
			sb.Close()
		}
	}
	return nil
}

func (a *app) stopCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Tear down the sandbox of every configured profile, or of the one --profile names",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			failed := 0
			err := a.eachProfile(cmd.Context(), a.profile, func(p *config.Profile, sb *sandbox.Sandbox, err error) {
				if err == nil {
					err = sb.Down(cmd.Context())
				}
				if err != nil {
					failed++
					fmt.Fprintf(cmd.ErrOrStderr(), "amelia: %s\n", oneLine(err.Error()))
					return
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s removed (provider %s)\n", p.Name, sb.Info.Name)
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
}
