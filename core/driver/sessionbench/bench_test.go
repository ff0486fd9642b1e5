// Package sessionbench measures the driver's persistent worker against its
// one-shot calls on real providers. It is a package of its own so that the
// providers it starts stay out of core/driver's tests.
//
//	go test -run='^$' -bench=TenGenerates -benchtime=5x ./core/driver/sessionbench/
package sessionbench_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// pluginEnv names the provider this test binary serves when go-plugin
// launches it: docker, or (unset) the local provider.
const pluginEnv = "AMELIA_BENCH_PLUGIN"

// workerDirEnv names the directory of the worker the benchmarks built, for
// the providers that put it into sandboxes themselves.
const workerDirEnv = "AMELIA_WORKER_DIR"

// workerDir holds amelia-worker-linux-GOARCH, built by TestMain.
var workerDir string

func TestMain(m *testing.M) {
	if os.Getenv(providerwire.Handshake.MagicCookieKey) != "" {
		if os.Getenv(pluginEnv) == "docker" {
			sdk.Serve(docker.New(docker.Options{Version: "bench", WorkerDirs: []string{os.Getenv(workerDirEnv)}}))
			return
		}
		sandboxtest.ServePlugin()
		return
	}
	// Only benchmarks here: without -test.bench, no worker to build.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	os.Exit(testbin.Main(m, func(dir string) error {
		workerDir = dir
		_, err := testbin.BuildSandboxWorker(dir)
		return err
	}))
}

// sandbox is a sandbox to measure in, and where its worker goes.
type sandbox struct {
	ex    sandboxexec.Execer
	place sdk.WorkerPlace
}

// calls is how many Generate calls one round makes.
const calls = 10

// BenchmarkTenGenerates: ten consecutive Generate calls through one
// `amelia-worker serve` (a Session: its start and Close included) beside
// ten one-shot calls (each a prompt file, the worker, its cleanup), against
// a scripted model that answers at once, reached through the tunnel as
// amelia run reaches its proxy. On the local provider, the Docker provider
// (real engine) and the Daytona provider against the fake Daytona with its
// realistic gateway (container sandboxes).
func BenchmarkTenGenerates(b *testing.B) {
	for _, provider := range []string{"local", "docker", "daytona"} {
		b.Run(provider, func(b *testing.B) {
			sb := map[string]func(*testing.B) sandbox{"local": local, "docker": dockerSandbox, "daytona": daytonaSandbox}[provider](b)
			d := driverFor(b, sb, provider)
			wf := "bench"
			oneCall := func(gen func(context.Context, driver.GenerateRequest, json.RawMessage) (json.RawMessage, error), i int) {
				prompt := fmt.Sprintf("call %d", i)
				got, err := gen(b.Context(), driver.GenerateRequest{Workflow: wf, Prompt: prompt, Model: "m"}, nil)
				if want := `"echo: ` + prompt + `"`; err != nil || string(got) != want {
					b.Fatalf("%s: %s, %v; want %s", provider, got, err, want)
				}
			}
			oneShot := func(ctx context.Context, req driver.GenerateRequest, schema json.RawMessage) (json.RawMessage, error) {
				got, _, err := d.Generate(ctx, req, schema)
				return got, err
			}
			serve := func() {
				s := d.Persistent()
				for i := range calls {
					oneCall(func(ctx context.Context, req driver.GenerateRequest, schema json.RawMessage) (json.RawMessage, error) {
						got, _, err := s.Generate(ctx, req, schema)
						return got, err
					}, i)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			base := func() {
				for i := range calls {
					oneCall(oneShot, i)
				}
			}
			serve() // warm up both paths: the worker's pages, the connections
			base()
			benchtest.Compare(b, "serve", "one-shot", serve, base)
		})
	}
}

// driverFor is a Driver in ex's sandbox: the worker installed, the scripted
// model reached through a tunnel.
func driverFor(b *testing.B, sb sandbox, provider string) *driver.Driver {
	b.Helper()
	srv := llmtest.NewWithOptions(b, llmtest.Options{Forget: true, Light: true, Script: func(_ int, req *llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: "echo: " + lastMessage(req)}
	}})
	ex := sb.ex
	in := &driver.Installer{Dirs: []string{workerDir}, Provider: provider}
	worker, err := in.EnsureWorker(b.Context(), ex, sb.place)
	if err != nil {
		b.Fatal(err)
	}
	tun, err := tunnel.Open(b.Context(), ex, tunnel.HostOptions{Worker: worker, Target: strings.TrimPrefix(srv.URL(), "http://")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tun.Close() })
	return &driver.Driver{
		Exec: ex, Worker: worker, Provider: provider,
		Env: map[string]string{"AMELIA_PROXY_URL": "http://" + tun.Addr(), "AMELIA_PROXY_TOKEN": "bench-token"},
	}
}

// lastMessage is the text of a request's last message. With Light the
// server decodes no messages, so it is read from the body.
func lastMessage(req *llmtest.Request) string {
	var body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil || len(body.Messages) == 0 {
		return "?"
	}
	return body.Messages[len(body.Messages)-1].Content
}

func local(b *testing.B) sandbox {
	return sandbox{ex: sandboxtest.New(b, "sessionbench")}
}

func dockerSandbox(b *testing.B) sandbox {
	cli := dockertest.Engine(b)
	const label = "amelia.sessionbench"
	dockertest.RemoveContainers(b, cli, label+"=bench")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), pluginEnv+"=docker", workerDirEnv+"="+workerDir)
	p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "docker"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	sb, err := p.EnsureRunning(b.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "sessionbench", Config: dockertest.Settings(nil)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
		Labels:     map[string]string{label: "bench"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Teardown(context.Background(), sb.Ref) })
	return sandbox{ex: sandboxexec.Bind(p, sb.Ref), place: sb.Worker}
}

func daytonaSandbox(b *testing.B) sandbox {
	f := daytonatest.Start(b, daytonatest.Options{Docker: dockertest.Engine(b)})
	const keyEnv = "AMELIA_BENCH_DAYTONA_KEY"
	b.Setenv(keyEnv, f.APIKey())
	b.Setenv("XDG_STATE_HOME", b.TempDir())
	known := filepath.Join(b.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(f.KnownHostsLine()+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"api_url": f.URL(), "api_key_env": keyEnv, "known_hosts": known, "host_key_policy": "strict"})
	p := daytona.New(daytona.Options{Version: "bench", PollInterval: 100 * time.Millisecond, WorkerDirs: []string{workerDir}})
	b.Cleanup(func() { p.Close() })
	sb, err := p.EnsureRunning(b.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "sessionbench", Config: cfg},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
		Labels:     map[string]string{"amelia.profile": "sessionbench"},
	})
	if err != nil {
		b.Fatal(err)
	}
	return sandbox{ex: sandboxexec.Bind(p, sb.Ref), place: sb.Worker}
}
