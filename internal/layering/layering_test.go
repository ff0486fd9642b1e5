// Package layering checks the import rules of the package layout that
// docs/development.md describes, in the spirit of tailscale's depaware:
// each rule names the packages it covers and what they must not reach, and
// a failure names the import chain that breaks it.
package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/amelia-sandbox/amelia"

// providers are the provider trees under plugins/ (everything but the SDK).
var providers = []string{"plugins/local", "plugins/docker", "plugins/ssh", "plugins/daytona", "plugins/kubernetes"}

// graph is the import graph of the packages go list loaded, with the
// standard library's and third parties' included.
type graph map[string][]string

// load lists patterns, run in dir, with every dependency.
func load(t *testing.T, dir string, patterns ...string) graph {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Imports,Standard"}, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(patterns, " "), err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		g[p.ImportPath] = p.Imports
	}
	return g
}

// chain is the shortest import chain from pkg to a package bad says is
// forbidden, or nil.
func (g graph) chain(pkg string, bad func(string) bool) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != pkg && bad(p) {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return path
		}
		for _, q := range g[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

func ours(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }

func under(p, dir string) bool {
	full := module + "/" + dir
	return p == full || strings.HasPrefix(p, full+"/")
}

// isTestKit: a package of fakes and helpers for tests (sdktest,
// daytonatest), which may reach further than the code it tests.
func isTestKit(p string) bool { return strings.HasSuffix(p, "test") }

// The provider contract: what a provider author reads and imports.
func isContract(p string) bool {
	return p == module+"/plugins/sdk" || p == module+"/plugins/sdk/sdktest"
}

// The optional toolkit beside the contract.
func isToolkit(p string) bool { return under(p, "plugins/sdk/toolkit") }

// The wire's machinery, which the SDK's Serve and the host's client share:
// the generated code, the data channel, the stdin credit.
func isWire(p string) bool { return under(p, "internal/providerwire") || under(p, "internal/flow") }

// isEnvelope: the exec envelope's implementation, both ends.
func isEnvelope(p string) bool { return under(p, "internal/envelope") }

// The host's end of a provider plugin (Launch, Share, the gRPC client),
// which core and the conformance kit use.
func isPluginClient(p string) bool { return under(p, "internal/pluginclient") }

func isProvider(p string) bool {
	return slices.ContainsFunc(providers, func(d string) bool { return under(p, d) })
}

// rule is one import rule: no package of covered may reach a package
// forbidden says is out of bounds for it; with direct, no package of
// covered may import one itself (what those reach is their rules' to
// say).
type rule struct {
	name      string
	covered   func(pkg string) bool
	forbidden func(pkg, to string) bool
	direct    bool
}

func TestLayering(t *testing.T) {
	g := load(t, ".", module+"/...")
	rules := []rule{{
		name:      "core is a library that imports no provider",
		covered:   func(p string) bool { return under(p, "core") },
		forbidden: func(_, to string) bool { return isProvider(to) },
	}, {
		// Each concurrent run is an amelia process: the providers' code
		// and package inits would cost every one of them memory.
		name:      "the amelia binary links no provider (amelia-providers serves them)",
		covered:   func(p string) bool { return p == module+"/cmd/amelia" },
		forbidden: func(_, to string) bool { return isProvider(to) },
	}, {
		name:    "plugins/sdk imports nothing of Amelia's but the wire's internals",
		covered: func(p string) bool { return p == module+"/plugins/sdk" },
		forbidden: func(_, to string) bool {
			return ours(to) && to != module+"/plugins/sdk" && !isWire(to)
		},
	}, {
		name:    "sdktest imports nothing of Amelia's but the contract, the wire and the host's plugin client",
		covered: func(p string) bool { return p == module+"/plugins/sdk/sdktest" },
		forbidden: func(_, to string) bool {
			return ours(to) && !isContract(to) && !isWire(to) && !isPluginClient(to)
		},
	}, {
		name:    "the toolkit imports nothing of Amelia's but the contract, itself, the wire's internals and the envelope's implementation",
		covered: isToolkit,
		forbidden: func(_, to string) bool {
			return ours(to) && to != module+"/plugins/sdk" && !isToolkit(to) && !isWire(to) && !isEnvelope(to)
		},
	}, {
		// Both ends of the exec envelope: the worker links it, and the
		// toolkit's envelope is its public client.
		name:    "the envelope's implementation imports nothing of Amelia's but the toolkit's shexec and the wire's flow control",
		covered: isEnvelope,
		forbidden: func(_, to string) bool {
			return ours(to) && !isEnvelope(to) && to != module+"/plugins/sdk/toolkit/shexec" && to != module+"/internal/flow"
		},
	}, {
		// So that the contract may import them: they cannot import it.
		name:      "the wire's internals import nothing of Amelia's but themselves",
		covered:   isWire,
		forbidden: func(_, to string) bool { return ours(to) && !isWire(to) },
	}, {
		name:    "the host's plugin client imports nothing of Amelia's but the contract and the wire",
		covered: isPluginClient,
		forbidden: func(_, to string) bool {
			return ours(to) && to != module+"/plugins/sdk" && !isWire(to) && !isPluginClient(to)
		},
	}, {
		// Amelia's providers are what a third party's can be.
		name:    "a provider imports, of Amelia's, only plugins/sdk/... and its own packages",
		covered: func(p string) bool { return !isTestKit(p) && isProvider(p) },
		forbidden: func(p, to string) bool {
			own := slices.ContainsFunc(providers, func(d string) bool { return under(p, d) && under(to, d) })
			return ours(to) && !own && !under(to, "plugins/sdk")
		},
		direct: true,
	}, {
		// It starts clusters as root and links client-go: nothing that
		// ships may reach it, only tests.
		name: "no shipped package reaches the Kubernetes test cluster (internal/k8stest)",
		covered: func(p string) bool {
			return !isTestKit(p) && (strings.HasPrefix(p, module+"/cmd/") || under(p, "core") || under(p, "plugins") || under(p, "proxy"))
		},
		forbidden: func(_, to string) bool { return under(to, "internal/k8stest") },
	}, {
		// It builds third-party programs for tests: nothing that ships
		// may reach it (or the build cache it fills), only tests.
		name: "no shipped package reaches the CLI-agent test programs (internal/agentbin)",
		covered: func(p string) bool {
			return !isTestKit(p) && (strings.HasPrefix(p, module+"/cmd/") || under(p, "core") || under(p, "plugins") || under(p, "proxy"))
		},
		forbidden: func(_, to string) bool { return under(to, "internal/agentbin") || under(to, "internal/gobuildcache") },
	}, {
		name:    "the worker that goes into every sandbox links no gRPC, protobuf or go-plugin, nor the contract",
		covered: func(p string) bool { return p == module+"/cmd/worker" },
		forbidden: func(_, to string) bool {
			return strings.HasPrefix(to, "google.golang.org/grpc") || strings.HasPrefix(to, "google.golang.org/protobuf") ||
				strings.HasPrefix(to, "github.com/hashicorp/go-plugin") || to == module+"/plugins/sdk"
		},
	}}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			n := 0
			for p := range g {
				if !ours(p) || !r.covered(p) {
					continue
				}
				n++
				if r.direct {
					for _, to := range g[p] {
						if r.forbidden(p, to) {
							t.Errorf("%s imports %s", p, to)
						}
					}
					continue
				}
				if c := g.chain(p, func(to string) bool { return r.forbidden(p, to) }); c != nil {
					t.Errorf("%s imports %s: %s", p, c[len(c)-1], strings.Join(c, " -> "))
				}
			}
			if n == 0 {
				t.Fatal("the rule covers no package: the layout changed; update the rule")
			}
		})
	}
}

// The example provider is the template third parties copy: a module of its
// own whose packages and tests import nothing of Amelia's but the contract,
// plugins/sdk and plugins/sdk/sdktest (what those reach is the rules' above
// to say).
func TestExampleProviderImportsOnlyTheContract(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "provider-hello")
	g := load(t, dir, "-test", "./...")
	n := 0
	for p, imports := range g {
		if !strings.HasPrefix(p, "example.com/amelia-provider-hello") {
			continue
		}
		n++
		for _, to := range imports {
			if ours(to) && !isContract(to) {
				t.Errorf("%s imports %s", p, to)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no package of module example.com/amelia-provider-hello in examples/provider-hello")
	}
}
