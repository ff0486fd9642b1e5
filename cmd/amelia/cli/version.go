package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the provider API and where the sandbox workers are",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, versionLine())
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

// versionLine is amelia's version, platform and Go.
func versionLine() string {
	return fmt.Sprintf("amelia %s (%s/%s, %s)", buildinfo.Version(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
