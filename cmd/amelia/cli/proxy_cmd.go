package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/proxy"
)

func (a *app) proxyCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "proxy",
		Short: "The host-side LLM, git credential and egress proxy",
	})
	cmd.AddCommand(a.proxyServeCommand())
	return cmd
}

// auditDir is where runs' audit logs go when the profile sets no
// proxy.audit_dir.
func (a *app) auditDir() string { return filepath.Join(a.stateDir(), "amelia", "audit") }

func (a *app) proxyServeCommand() *cobra.Command {
	var listen string
	var repos []string
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:PORT] [--repo URL]...",
		Short: "Run the proxy for the profile on loopback, with one run's token, until interrupted",
		Long: `Run the proxy standalone for the selected profile: it listens on host
loopback only, mints one run token, and prints the two variables a worker
needs (AMELIA_PROXY_URL and AMELIA_PROXY_TOKEN) on stdout. The profile's keys
are read from this environment now; they never leave this process. The token
dies when the proxy stops (Ctrl-C). Git credentials are given only for the
hosts of the --repo URLs.`,
		Example: `  amelia proxy serve --profile dev
  amelia proxy serve --listen 127.0.0.1:8430 --repo https://github.com/org/repo.git`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.loadProfile()
			if err != nil {
				return err
			}
			cfg, err := proxy.ProfileRun(p, a.lookup, proxy.NewRunID("proxy", time.Now()), repos, a.auditDir())
			if err != nil {
				return err
			}
			srv := proxy.New(proxy.Options{Logger: a.logger, Environ: a.environ})
			run, err := srv.Start(cfg)
			if err != nil {
				return err
			}
			addr, err := srv.ListenAndServe(listen)
			if err != nil {
				srv.Close()
				return usageError{err}
			}
			url := "http://" + addr
			fmt.Fprintf(cmd.OutOrStdout(), "AMELIA_PROXY_URL=%s\nAMELIA_PROXY_TOKEN=%s\n", url, run.Token())
			fmt.Fprintf(cmd.ErrOrStderr(), "amelia: proxy for profile %s on %s (run %s, audit log %s); Ctrl-C stops it and ends the token\n",
				p.Name, url, run.ID(), run.AuditPath())
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to listen on (port 0: any free port)")
	f.StringArrayVar(&repos, "repo", nil, "a repository URL whose host may get git credentials (repeatable)")
	return cmd
}
