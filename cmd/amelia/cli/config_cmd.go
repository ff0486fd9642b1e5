package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
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
		Long: `Check the config file and list every problem at once: the file's own, then
what each profile's provider finds — a network policy it cannot enforce,
and its settings block, key by key. Each provider plugin is started to ask
it, also when the file has problems of its own (about what of it could be
read: a profile whose provider is in doubt is not asked). A provider that
cannot check its settings is named, and they are checked when its sandbox
starts. Exits 1 when there is a problem.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadConfig()
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				// The providers check what the file's problems leave
				// unchecked: every problem is said at once.
				problems := ve.Problems
				if partial := ve.Partial(); partial != nil {
					a.mask.use(partial)
					found, unchecked := a.profileProblems(cmd.Context(), partial, ve)
					problems = append(problems, found...)
					printUnchecked(cmd.OutOrStdout(), ve.File, unchecked)
				}
				printProblems(cmd.ErrOrStderr(), ve.File, problems)
				return exitError{1}
			}
			if err != nil {
				return err
			}
			problems, unchecked := a.profileProblems(cmd.Context(), c, nil)
			if len(problems) > 0 {
				printProblems(cmd.ErrOrStderr(), c.Source, problems)
				return exitError{1}
			}
			printUnchecked(cmd.OutOrStdout(), c.Source, unchecked)
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

// printUnchecked writes the settings blocks no provider checked, one line
// each, as FILE: KEY: not checked: WHY.
func printUnchecked(w io.Writer, file string, unchecked []config.Problem) {
	for _, p := range unchecked {
		fmt.Fprintf(w, "%s: %s\n", config.SourceName(file), p)
	}
}

// profileProblems are the problems of every profile of c that only its
// provider can tell, in the order of the profiles: a provider amelia
// cannot find or start, an environment that would give it the profile's
// secrets, a network policy it cannot enforce, and what it finds in its
// settings block. Unchecked names the settings blocks whose provider
// cannot check them. With reported, c is the part of a config file with
// problems that could be read: a profile whose provider is in doubt is
// not asked, a network mode in doubt is not checked, and nothing is said
// twice.
func (a *app) profileProblems(ctx context.Context, c *config.Config, reported *config.ValidationError) (problems, unchecked []config.Problem) {
	host := a.pluginHost()
	for _, name := range c.ProfileNames() {
		p := c.Profiles[name]
		if reported != nil {
			if p.Sandbox.Provider == "" || reported.Reported(p.ProblemAt("sandbox.provider", "").Key) {
				continue
			}
			if reported.Reported(p.ProblemAt("sandbox.network", "").Key) {
				q := *p
				q.Sandbox.Network = sdk.NetworkOpen // what every provider enforces
				p = &q
			}
		}
		found, skipped := a.providerProblems(ctx, host, p)
		for _, f := range found {
			if reported == nil || !reported.Reported(f.Key) {
				problems = append(problems, f)
			}
		}
		unchecked = append(unchecked, skipped...)
	}
	return problems, unchecked
}

// providerProblems are the problems of profile p that only its provider
// can tell (see profileProblems).
func (a *app) providerProblems(ctx context.Context, host *pluginhost.Host, p *config.Profile) (problems, unchecked []config.Problem) {
	pl, err := host.Find(p.Sandbox.Provider)
	if err != nil {
		return []config.Problem{p.ProblemAt("sandbox.provider", err.Error())}, nil
	}
	// The environment the plugin would start with keeps the profile's
	// secrets out.
	if _, err := host.Environment(pl, sandbox.PluginProfile(p)); err != nil {
		return []config.Problem{p.ProblemAt("", err.Error())}, nil
	}
	plug, err := host.Start(pl, sandbox.PluginProfile(p))
	if err != nil {
		return []config.Problem{p.ProblemAt("sandbox.provider", fmt.Sprintf("provider %s cannot be started: %v", p.Sandbox.Provider, err))}, nil
	}
	sb, err := sandbox.New(ctx, p, plug, a.logger)
	if err != nil {
		plug.Close()
		return []config.Problem{p.ProblemAt("sandbox.provider", err.Error())}, nil
	}
	defer sb.Close()
	problems, err = sb.Problems(ctx)
	switch {
	case errors.Is(err, sandbox.ErrSettingsUnchecked):
		unchecked = append(unchecked, p.ProblemAt(p.SettingsKey(), "not checked: "+err.Error()))
	case err != nil:
		problems = append(problems, p.ProblemAt(p.SettingsKey(), err.Error()))
	}
	return problems, unchecked
}
