package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/sandbox"
)

func (a *app) sandboxPrepareCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "prepare",
		Short: "Run the profile's sandbox.setup now, so its sandboxes start ready",
		Long: `Run the profile's sandbox.setup commands now and keep their result, so that
the profile's sandboxes start set up: on docker an image committed from a
container that ran them, on daytona a snapshot; on other providers the
sandbox is started and set up once (a marker in it records the setup).
Each command is shown as it starts (--debug shows its output). A setup that
is prepared already is said to be up to date; one whose commands or base
changed is prepared again. A run prepares by itself what is not prepared.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSandbox(cmd.Context(), func(sb *sandbox.Sandbox) error {
				res, err := sb.Prepare(cmd.Context())
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				what := fmt.Sprintf("the setup of profile %s", sb.Profile.Name)
				if res.Ref != "" {
					what += " (" + res.Ref + ")"
				} else {
					what += " in sandbox " + sb.Ref.Name
				}
				if res.UpToDate {
					fmt.Fprintf(w, "%s is up to date (provider %s)\n", what, sb.Info.Name)
				} else {
					fmt.Fprintf(w, "%s is prepared (provider %s)\n", what, sb.Info.Name)
				}
				return nil
			})
		},
	}
}
