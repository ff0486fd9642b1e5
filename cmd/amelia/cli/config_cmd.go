package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/sandbox"
)

func (a *app) configCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "config",
		Short: "Show and check profiles",
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Print the resolved profile (defaults, ${VAR}s and overrides applied) with secrets masked",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.loadProfile()
			if err != nil {
				return err
			}
			out, err := p.ShowYAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}, &cobra.Command{
		Use:   "validate",
		Short: "Check the config file and list every problem",
		Long: `Check the config file and list every problem: the file's own, then what
each profile's provider finds — a network policy it cannot enforce, and its
settings block, key by key. Each provider plugin is started to ask it (none
is started for a file with problems of its own). A provider that cannot
check its settings is named, and they are checked when its sandbox starts.
Exits 1 when there is a problem.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadConfig()
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				printProblems(cmd.ErrOrStderr(), ve.File, ve.Problems)
				return exitError{1}
			}
			if err != nil {
				return err
			}
			problems, unchecked := a.profileProblems(cmd.Context(), c)
			if len(problems) > 0 {
				printProblems(cmd.ErrOrStderr(), c.Source, problems)
				return exitError{1}
			}
			for _, p := range unchecked {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", config.SourceName(c.Source), p)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d profiles, default %s)\n", config.SourceName(c.Source), len(c.Profiles), c.DefaultProfile)
			return nil
		},
	})
	return cmd
}

// printProblems writes every problem of a config file, one line each, as
// FILE: KEY: MESSAGE.
func printProblems(w io.Writer, file string, problems []config.Problem) {
	for _, p := range problems {
		fmt.Fprintf(w, "%s: %s\n", config.SourceName(file), p)
	}
}

// profileProblems are the problems of every profile of c that only its
// provider can tell, in the order of the profiles: a provider amelia
// cannot find or start, an environment that would give it the profile's
// secrets, a network policy it cannot enforce, and what it finds in its
// settings block. Unchecked names the settings blocks whose provider
// cannot check them.
func (a *app) profileProblems(ctx context.Context, c *config.Config) (problems, unchecked []config.Problem) {
	host := a.pluginHost()
	for _, name := range c.ProfileNames() {
		p := c.Profiles[name]
		pl, err := host.Find(p.Sandbox.Provider)
		if err != nil {
			problems = append(problems, p.ProblemAt("sandbox.provider", err.Error()))
			continue
		}
		// The environment the plugin would start with keeps the profile's
		// secrets out.
		if _, err := host.Environment(pl, sandbox.PluginProfile(p)); err != nil {
			problems = append(problems, p.ProblemAt("", err.Error()))
			continue
		}
		plug, err := host.Start(pl, sandbox.PluginProfile(p))
		if err != nil {
			problems = append(problems, p.ProblemAt("sandbox.provider", fmt.Sprintf("provider %s cannot be started: %v", p.Sandbox.Provider, err)))
			continue
		}
		sb, err := sandbox.New(ctx, p, plug, a.logger)
		if err != nil {
			plug.Close()
			problems = append(problems, p.ProblemAt("sandbox.provider", err.Error()))
			continue
		}
		found, err := sb.Problems(ctx)
		sb.Close()
		problems = append(problems, found...)
		switch {
		case errors.Is(err, sandbox.ErrSettingsUnchecked):
			unchecked = append(unchecked, p.ProblemAt(p.SettingsKey(), "not checked: "+err.Error()))
		case err != nil:
			problems = append(problems, p.ProblemAt(p.SettingsKey(), err.Error()))
		}
	}
	return problems, unchecked
}
