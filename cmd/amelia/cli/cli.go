// Package cli is the amelia command line. Run is the whole program; main
// only hands it the process's arguments, streams and signals, so every
// command can be tested in-process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-plugin"
	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/core/sandbox"
)

// Run runs amelia with args (without the program name) and returns the
// process exit code. builtins are the providers that come with amelia:
// with their constructors where this binary links them
// (amelia-providers), else names only, and this binary hands what needs
// them in its own process to amelia-providers beside it.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, builtins []pluginhost.Builtin) int {
	return newApp(os.Stdin, stdout, stderr, builtins).run(ctx, args)
}

// newApp is an invocation with the process's environment.
func newApp(stdin io.Reader, stdout, stderr io.Writer, builtins []pluginhost.Builtin) *app {
	exe, _ := os.Executable()
	home, _ := os.UserHomeDir()
	return &app{
		stdin:    stdin,
		stdout:   stdout,
		stderr:   stderr,
		lookup:   os.LookupEnv,
		environ:  os.Environ(),
		home:     home,
		exe:      exe,
		self:     ameliaBeside(exe),
		builtins: builtins,
	}
}

// app is one invocation: its streams, environment and global flags.
type app struct {
	stdin io.Reader
	// stdout and stderr are the process's; commands write through mask
	// (cmd.OutOrStdout, cmd.ErrOrStderr) unless what they write is not
	// amelia's own words.
	stdout, stderr io.Writer
	mask           masker
	lookup         func(string) (string, bool)
	environ        []string
	home           string
	exe            string // this process's executable
	self           string // the amelia executable (exe, or the amelia beside amelia-providers)
	builtins       []pluginhost.Builtin
	args           []string // the command line, for handing it to amelia-providers

	configPath string
	profile    string
	debug      bool
	logger     *slog.Logger
}

// exitError ends the program with a specific code after printing nothing
// more (the exec's own output said it all).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command-line mistake, or a command refused before it
// started anything (a run's config or profile that cannot be used): exit
// code 2.
type usageError struct{ error }

// Unwrap is the mistake.
func (e usageError) Unwrap() error { return e.error }

func (a *app) run(ctx context.Context, args []string) int {
	// Stop every plugin this run started, whatever happened.
	defer plugin.CleanupClients()
	a.args = args
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	stderr := a.mask.Writer(a.stderr)
	root.SetOut(a.mask.Writer(a.stdout))
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if ee := (exitError{}); errors.As(err, &ee) {
		return ee.code
	}
	msg := oneLine(err.Error())
	fmt.Fprintf(stderr, "amelia: %s\n", msg)
	if a.debug {
		if full := strings.TrimSpace(err.Error()); full != msg {
			fmt.Fprintf(stderr, "%s\n", full)
		}
		if ve := (*config.ValidationError)(nil); errors.As(err, &ve) {
			for _, p := range ve.Problems {
				fmt.Fprintf(stderr, "  %s: %s\n", ve.File, p)
			}
		}
	}
	if ue := (usageError{}); errors.As(err, &ue) {
		return 2
	}
	return 1
}

// oneLine keeps an error to the one line the user sees; --debug prints the
// whole of it.
func oneLine(s string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return first
}

func (a *app) rootCommand() *cobra.Command {
	root := group(&cobra.Command{
		Use:   "amelia",
		Short: "Run coding agents in isolated sandboxes",
		Long: `Amelia runs a coding agent inside an isolated sandbox (a local process, a
Docker container, a remote machine over SSH, or a Daytona cloud sandbox) and
streams what it does back to you. Sandbox providers are plugins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			a.logger = newLogger(cmd.ErrOrStderr(), a.debug)
		},
	})
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// amelia --version says what the first line of amelia version says.
	root.Version = buildinfo.Version()
	root.SetVersionTemplate(versionLine() + "\n")
	f := root.PersistentFlags()
	f.StringVar(&a.configPath, "config", "", "config file (default $AMELIA_CONFIG, else ~/.config/amelia/config.yaml)")
	f.StringVarP(&a.profile, "profile", "p", "", "profile to use (default: the config's default_profile)")
	f.BoolVar(&a.debug, "debug", false, "log details, including the plugins' logs, to stderr")
	root.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	root.AddCommand(
		a.versionCommand(),
		a.initCommand(),
		a.configCommand(),
		a.pluginCommand(),
		a.imageCommand(),
		a.sandboxCommand(),
		a.stopCommand(),
		a.proxyCommand(),
		a.doctorCommand(),
		a.runCommand(),
		a.resultsCommand(),
		a.attachCommand(),
		a.logsCommand(),
		a.gcCommand(),
	)
	return root
}

// group makes cmd a command group: without a subcommand it prints its help,
// and an unknown subcommand is a usage error (cobra would print the help and
// exit 0, so a typo in a script would pass).
func group(cmd *cobra.Command) *cobra.Command {
	cmd.SuggestionsMinimumDistance = 2 // cobra's own default, applied only on its error path
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
		}
		return usageError{errors.New(msg)}
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

// noArgs rejects arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

func (a *app) getenv(k string) string {
	v, _ := a.lookup(k)
	return v
}

// configDir is $XDG_CONFIG_HOME or ~/.config.
func (a *app) configDir() string {
	if d := a.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return d
	}
	if a.home == "" {
		return ""
	}
	return filepath.Join(a.home, ".config")
}

// stateDir is $XDG_STATE_HOME or ~/.local/state.
func (a *app) stateDir() string {
	if d := a.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return d
	}
	if a.home == "" {
		return os.TempDir()
	}
	return filepath.Join(a.home, ".local", "state")
}

// loadConfig loads the config; from then on, what amelia prints shows
// none of the values it got from ${VAR}s and overrides (see masker).
func (a *app) loadConfig() (*config.Config, error) {
	c, err := config.Load(config.Options{
		Path:      a.configPath,
		LookupEnv: a.lookup,
		Environ:   a.environ,
		HomeDir:   a.home,
	})
	if err != nil {
		return nil, err
	}
	a.mask.use(c)
	return c, nil
}

// loadProfile loads the config and picks --profile or the default.
func (a *app) loadProfile() (*config.Profile, error) {
	c, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	return c.Profile(a.profile)
}

func (a *app) pluginHost() *pluginhost.Host {
	return pluginhost.New(pluginhost.Options{
		Server:   a.providersExe(),
		Builtins: a.builtins,
		Dirs:     pluginhost.SearchPath(a.getenv("AMELIA_PLUGIN_PATH"), a.configDir(), a.self),
		Environ:  a.environ,
		Logger:   a.logger,
		Share:    a.pluginSharing(),
	})
}

// openSandbox starts the provider of the selected profile.
func (a *app) openSandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	p, err := a.loadProfile()
	if err != nil {
		return nil, err
	}
	return sandbox.Open(ctx, a.pluginHost(), p, a.logger)
}
