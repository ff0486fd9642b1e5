package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/workerbin"
)

// doctor writes one line per check: ✓ when it passed, ✗ with a fix when it
// failed; it counts the failures.
type doctor struct {
	w      io.Writer
	failed int
}

func (d *doctor) ok(indent, format string, args ...any) {
	fmt.Fprintf(d.w, "%s✓ %s\n", indent, fmt.Sprintf(format, args...))
}

func (d *doctor) fail(indent, what string, err error, fix string) {
	d.failed++
	line := fmt.Sprintf("%s✗ %s: %s", indent, what, oneLine(err.Error()))
	if fix != "" {
		line += " — " + fix
	}
	fmt.Fprintln(d.w, line)
}

func (a *app) doctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that everything amelia run needs is in place, one line per check",
		Long: `Check the config, git, the sandbox workers and, for every profile (or the
one --profile names), that its provider plugin starts, its sandbox is healthy
or can be created, its network policy can be enforced and its LLM key is set.
Exits 1 when a check fails; each failure says how to fix it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := &doctor{w: cmd.OutOrStdout()}
			a.doctor(cmd.Context(), d)
			if d.failed > 0 {
				fmt.Fprintf(d.w, "%d check(s) failed\n", d.failed)
				return exitError{1}
			}
			return nil
		},
	}
}

func (a *app) doctor(ctx context.Context, d *doctor) {
	if git, err := exec.LookPath("git"); err != nil {
		d.fail("", "git", err, "install git (apt-get install git, brew install git)")
	} else {
		d.ok("", "git: %s", git)
	}
	arch := runtime.GOARCH
	if w, err := workerbin.Find(workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self), arch); err != nil {
		d.fail("", "worker", err, "")
	} else {
		d.ok("", "worker linux/%s: %s", arch, w)
	}

	c, err := a.loadConfig()
	if err != nil {
		d.fail("", "config", err, "run amelia config show --debug for every problem")
		return
	}
	names := c.ProfileNames()
	if a.profile != "" {
		p, err := c.Profile(a.profile)
		if err != nil {
			d.fail("", "profile", err, "")
			return
		}
		names = []string{p.Name}
	}
	source := c.Source
	if source == "" {
		source = "none, the built-in default profile"
	}
	d.ok("", "config: %s (%d profile(s))", source, len(c.ProfileNames()))
	host := a.pluginHost()
	for _, name := range names {
		p := c.Profiles[name]
		fmt.Fprintf(d.w, "profile %s:\n", name)
		a.doctorProfile(ctx, d, host, p)
	}
}

func (a *app) doctorProfile(ctx context.Context, d *doctor, host *pluginhost.Host, p *config.Profile) {
	const in = "  "
	if _, err := p.LLMKey(a.lookup); err != nil {
		d.fail(in, "LLM key", err, "")
	} else {
		d.ok(in, "LLM key for %s", p.LLM.BaseURL)
	}
	if _, err := p.GitToken(a.lookup); err != nil {
		d.fail(in, "git token", err, "")
	}
	sb, err := sandbox.Open(ctx, host, p, a.logger)
	if err != nil {
		d.fail(in, "provider "+p.Sandbox.Provider, err, "amelia plugin ls shows the providers amelia can start")
		return
	}
	defer sb.Close()
	d.ok(in, "provider %s started (version %s)", sb.Info.Name, sb.Info.Version)
	if err := sb.CheckPolicy(); err != nil {
		d.fail(in, "network", err, "")
	}
	row := a.sandboxState(ctx, sb)
	switch row.State {
	case string(sdk.HealthReady):
		d.ok(in, "sandbox ready%s", suffix(row.Message))
	case "absent":
		d.ok(in, "sandbox absent: amelia run creates it")
	case "error":
		// The provider could not tell (its backend is down...): its message
		// says what to check.
		d.fail(in, "sandbox", errors.New(row.Message), "")
	default:
		d.fail(in, "sandbox", errors.New(row.State+suffix(row.Message)), fmt.Sprintf("amelia sandbox down --profile %s recreates it on the next run", p.Name))
	}
}
