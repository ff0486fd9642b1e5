package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/sandbox"
)

func (a *app) imageCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "image",
		Short: "Build the Docker sandbox image",
	})
	var noCache bool
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the profile's Docker sandbox image through the Engine API",
		Long: `Build the sandbox image of the profile (provider docker) on its Docker engine,
streaming the build's output: image/Dockerfile FROM docker.base_image (or FROM
the image docker.dockerfile builds), with the amelia-worker for the engine's
architecture. The image is tagged amelia-sandbox:<hash> and labelled
amelia.image-hash; an image that is up to date is not built again unless
--no-cache. Sandboxes build it themselves on first use; this builds it ahead
of time and shows the output.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.handOff(); err != nil {
				return err
			}
			p, err := a.loadProfile()
			if err != nil {
				return err
			}
			prov, _ := a.builtinProvider(p.Sandbox.Provider, a.logger)
			builder, ok := prov.(imageBuilder)
			if !ok {
				if prov != nil {
					sandbox.CloseProvider(prov)
				}
				return usageError{fmt.Errorf("profile %s uses provider %s, which builds no image: amelia image build builds the image of a docker profile (pick one with --profile)", p.Name, p.Sandbox.Provider)}
			}
			defer sandbox.CloseProvider(prov)
			settings, err := json.Marshal(p.Sandbox.ProviderSettings())
			if err != nil {
				return fmt.Errorf("profile %s: encode docker settings: %w", p.Name, err)
			}
			tag, err := builder.BuildImage(cmd.Context(), settings, noCache, cmd.OutOrStdout())
			if err != nil {
				return fmt.Errorf("profile %s: %w", p.Name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "image: %s\n", tag)
			return nil
		},
	}
	build.Flags().BoolVar(&noCache, "no-cache", false, "run every step again, even when the image is up to date")
	cmd.AddCommand(build)
	return cmd
}
