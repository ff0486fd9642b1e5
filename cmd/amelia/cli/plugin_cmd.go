package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// infoTimeout bounds starting a plugin and asking for its Info in listings.
const infoTimeout = 30 * time.Second

func (a *app) pluginCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "plugin",
		Short: "List and serve sandbox provider plugins",
	})
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the providers: built-in ones and amelia-provider-NAME binaries on the plugin path",
		Long: `List the providers amelia can start, with their version and capabilities.
Third-party providers are executables named amelia-provider-NAME, found in the
directories of $AMELIA_PLUGIN_PATH, then ~/.config/amelia/plugins, then beside
the amelia executable; the first one found wins and built-ins cannot be
replaced.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.listPlugins(cmd, asJSON)
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(ls, &cobra.Command{
		Use:   "serve NAME",
		Short: "Serve a built-in provider (amelia starts this itself, for a run or shared by a profile's runs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.handOff(); err != nil {
				return err
			}
			p, ok := a.builtinProvider(args[0], a.pluginLogger())
			if !ok {
				return usageError{fmt.Errorf("no built-in provider named %q (built in: %s)", args[0], strings.Join(a.pluginHost().Builtins(), ", "))}
			}
			sdk.Serve(p, sdk.WithLogger(a.pluginLogger()))
			return nil
		},
	})
	return cmd
}

// pluginSharing is where the runs of this user share plugins: amelia in
// $XDG_RUNTIME_DIR, or amelia-UID in $TMPDIR (or /tmp); and how long a
// shared plugin outlives its last run, AMELIA_PLUGIN_IDLE (a Go duration; 0
// stops it with its last run).
func (a *app) pluginSharing() *pluginhost.Sharing {
	tmp := a.getenv("TMPDIR")
	if !filepath.IsAbs(tmp) {
		tmp = "/tmp"
	}
	s := &pluginhost.Sharing{Dir: pluginclient.ShareDir(a.getenv("XDG_RUNTIME_DIR"), tmp, os.Geteuid())}
	if v := a.getenv("AMELIA_PLUGIN_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d < 0:
			a.logger.Warn("AMELIA_PLUGIN_IDLE is not a duration (as 2m or 30s); shared plugins keep their default", "value", v)
		case d == 0:
			s.Idle = time.Nanosecond
		default:
			s.Idle = d
		}
	}
	return s
}

// pluginLogger is the log of a plugin process: records go to stderr in the
// form the host parses back into its own log.
func (a *app) pluginLogger() *slog.Logger {
	return sdk.NewLogger(a.stderr, slog.LevelDebug)
}

// pluginRow is one line of `plugin ls`.
type pluginRow struct {
	Name        string   `json:"name"`
	Version     string   `json:"version,omitempty"`
	Source      string   `json:"source"`
	APIVersions []int    `json:"api_versions,omitempty"`
	Description string   `json:"description,omitempty"`
	Isolated    bool     `json:"isolated"`
	EgressModes []string `json:"egress_modes"`
	ExecAsRoot  bool     `json:"exec_as_root"`
	ResourceLim bool     `json:"resource_limits"`
	TTY         bool     `json:"tty"`
	RunUsers    bool     `json:"run_users"`
	Error       string   `json:"error,omitempty"`
}

func (a *app) listPlugins(cmd *cobra.Command, asJSON bool) error {
	host := a.pluginHost()
	plugins, ignored := host.List()
	rows := make([]pluginRow, len(plugins))
	failed := 0
	for i, p := range plugins {
		rows[i] = describePlugin(cmd.Context(), host, p)
		if rows[i].Error != "" {
			failed++
		}
	}
	for _, ig := range ignored {
		fmt.Fprintf(cmd.ErrOrStderr(), "amelia: ignoring %s: %s\n", ig.Path, ig.Reason)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tISOLATED\tEGRESS\tRUN USERS\tSOURCE")
		for _, r := range rows {
			version, isolated, egress, runUsers := r.Version, yesNo(r.Isolated), strings.Join(r.EgressModes, ","), yesNo(r.RunUsers)
			if r.Error != "" {
				version, isolated, egress, runUsers = "?", "?", "?", "?"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, version, isolated, egress, runUsers, r.Source)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "amelia: plugin %s (%s): %s\n", r.Name, r.Source, oneLine(r.Error))
		}
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

// describePlugin starts p, for no profile (the base environment and its
// provider's declared variables only), and asks for its Info.
func describePlugin(ctx context.Context, host *pluginhost.Host, p pluginhost.Plugin) pluginRow {
	row := pluginRow{Name: p.Name, Source: p.Source(), EgressModes: []string{}}
	pl, err := host.Start(p, nil)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer pl.Close()
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	info, err := pl.Info(ctx)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	if info.Name != p.Name {
		row.Error = fmt.Sprintf("the plugin calls itself %q; rename the binary %s%s or fix the plugin", info.Name, pluginhost.BinaryPrefix, info.Name)
	}
	row.Version, row.APIVersions, row.Description = info.Version, info.APIVersions, info.Description
	row.Isolated, row.ExecAsRoot, row.ResourceLim, row.TTY = info.Isolated, info.ExecAsRoot, info.ResourceLimits, info.TTY
	row.RunUsers = info.RunUsers
	for _, m := range info.EgressModes {
		row.EgressModes = append(row.EgressModes, string(m))
	}
	return row
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
