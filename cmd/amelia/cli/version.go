package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/workerbin"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the provider API and where the sandbox workers are",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "amelia %s (%s/%s, %s)\n", buildinfo.Version(), runtime.GOOS, runtime.GOARCH, runtime.Version())
			fmt.Fprintf(w, "provider API: v%d\n", sdk.APIVersion)
			dirs := workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self)
			for _, arch := range workerbin.Arches() {
				where := "not found"
				if p, err := workerbin.Find(dirs, arch); err == nil {
					where = p
				}
				fmt.Fprintf(w, "worker linux/%s: %s\n", arch, where)
			}
			return nil
		},
	}
}
