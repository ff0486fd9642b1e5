package cli

import (
	"errors"
	"fmt"

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
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadConfig()
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				for _, p := range ve.Problems {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", ve.File, p)
				}
				return exitError{1}
			}
			if err != nil {
				return err
			}
			// Every profile's provider must be one amelia can start, with
			// an environment that keeps the profile's secrets out.
			host := a.pluginHost()
			bad := 0
			for _, name := range c.ProfileNames() {
				p := c.Profiles[name]
				pl, err := host.Find(p.Sandbox.Provider)
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: profiles.%s.sandbox.provider: %v\n", sourceName(c), name, err)
					bad++
					continue
				}
				if _, err := host.Environment(pl, sandbox.PluginProfile(p)); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: profiles.%s: %v\n", sourceName(c), name, err)
					bad++
				}
			}
			if bad > 0 {
				return exitError{1}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d profiles, default %s)\n", sourceName(c), len(c.Profiles), c.DefaultProfile)
			return nil
		},
	})
	return cmd
}

func sourceName(c *config.Config) string {
	if c.Source == "" {
		return "built-in default config"
	}
	return c.Source
}
