package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

// Shell completion (amelia completion bash|zsh|fish) of what only this
// host knows: the config's profile names, the providers amelia can start,
// the workflows of the runs it recorded. What cannot be read completes
// nothing: a shell shows no errors.

// completeProfiles completes --profile with the config's profile names.
func (a *app) completeProfiles(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := a.loadConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, name := range c.ProfileNames() {
		if strings.HasPrefix(name, toComplete) {
			p := c.Profiles[name]
			out = append(out, cobra.CompletionWithDesc(name, "provider "+p.Sandbox.Provider))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeProviders completes --sandbox with the providers amelia can
// start: built in, and on the plugin path.
func (a *app) completeProviders(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	plugins, _ := a.pluginHost().List()
	var out []cobra.Completion
	for _, p := range plugins {
		if strings.HasPrefix(p.Name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(p.Name, p.Source()))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeWorkflows is the ValidArgsFunction of a command on one recorded
// run: the workflows of --profile's records, or of every profile's, those
// whose state want accepts (nil: any).
func (a *app) completeWorkflows(want func(runstore.Record) bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var recs []runstore.Record
		var err error
		if a.profile != "" {
			recs, err = a.runs().Of(a.profile)
		} else {
			recs, err = a.runs().All()
		}
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		seen := map[string]bool{}
		for _, r := range recs {
			if seen[r.Workflow] || !strings.HasPrefix(r.Workflow, toComplete) || want != nil && !want(r) {
				continue
			}
			seen[r.Workflow] = true
			out = append(out, cobra.CompletionWithDesc(r.Workflow, fmt.Sprintf("%s in sandbox %s", r.State, r.SandboxName())))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// running accepts the records of runs attach can follow: their agent may
// still be going, or ended with no host following it.
func running(r runstore.Record) bool { return r.State.AgentMayRun() || r.State == runstore.Ended }

// withLog accepts the records of runs whose sandbox keeps a log.
func withLog(r runstore.Record) bool { return r.RunDir != "" }
