package linked

import (
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// TestTablesAgree: the names the host knows (builtin, which links no
// provider) are the names the providers binary can build, and local's
// alias is the one its package declares.
func TestTablesAgree(t *testing.T) {
	var names []string
	for _, b := range Providers() {
		if b.New == nil {
			t.Errorf("%s: no constructor", b.Name)
		}
		names = append(names, b.Name)
		if b.Name == local.Name && !slices.Equal(b.Aliases, []string{local.Alias}) {
			t.Errorf("local's aliases are %q, want [%q]", b.Aliases, local.Alias)
		}
	}
	if want := []string{local.Name, docker.Name, ssh.Name, daytona.Name, kubernetes.Name}; !slices.Equal(names, want) {
		t.Errorf("the table names %q, want the linked providers %q", names, want)
	}
	for _, b := range builtin.Providers() {
		if b.New != nil {
			t.Errorf("builtin's table links %s's constructor: the host binary would link the provider", b.Name)
		}
	}
}
