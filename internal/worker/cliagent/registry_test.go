package cliagent_test

import (
	"testing"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/internal/worker/cliagent"
)

// The host's list of agents (core/agents), which the profile and --agent
// check, and the worker's adapters name the same agents alike.
func TestHostKnowsEveryAdapter(t *testing.T) {
	host := map[string]agents.Agent{}
	for _, a := range agents.All() {
		if a.Name != agents.Own {
			host[a.Name] = a
		}
	}
	for _, ad := range cliagent.All() {
		h, ok := host[ad.Name()]
		if !ok {
			t.Errorf("adapter %s is not in core/agents", ad.Name())
			continue
		}
		delete(host, ad.Name())
		if h.Binary != ad.Binary() || h.API != string(ad.API()) {
			t.Errorf("%s: core/agents says binary %q and API %q, the adapter %q and %q", ad.Name(), h.Binary, h.API, ad.Binary(), ad.API())
		}
		if h.CheckAPI(string(ad.API())) != nil {
			t.Errorf("%s: core/agents does not list its own API %q among its APIs %v", ad.Name(), ad.API(), h.APIs)
		}
	}
	for name := range host {
		t.Errorf("core/agents names %s, for which the worker has no adapter", name)
	}
}
