package daytona_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side harnesses against the fake Daytona (sandboxes in containers
// of the real engine), in-process, so the figures are the provider's own:
//
//	go test -run='^$' -bench=. -benchtime=50x ./plugins/daytona/

// eachBackend runs bench on a fake with container sandboxes and on one
// with the host backend, each with a started sandbox "bench" made by p,
// and toolbox, which runs a command in it through the toolbox's
// process/execute.
func eachBackend(b *testing.B, bench func(b *testing.B, f *daytonatest.Fake, cfg json.RawMessage, p *daytona.Provider, sb sdk.Sandbox, toolbox func(api.ExecuteRequest))) {
	for _, backend := range []string{"docker", "host"} {
		b.Run(backend, func(b *testing.B) {
			opts := daytonatest.Options{}
			if backend == "docker" {
				opts.Docker = dockertest.Engine(b)
			}
			f, cfg := startWith(b, opts, nil)
			p := newProvider(b)
			sb, err := p.EnsureRunning(b.Context(), spec("bench", cfg, sdk.NetworkOpen))
			if err != nil {
				b.Fatal(err)
			}
			client, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey()})
			if err != nil {
				b.Fatal(err)
			}
			box, _ := f.Sandbox(sb.Ref.ID)
			toolbox := func(req api.ExecuteRequest) {
				res, err := client.Execute(b.Context(), box, req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("toolbox execute: %+v, %v", res, err)
				}
			}
			bench(b, f, cfg, p, sb, toolbox)
		})
	}
}

// BenchmarkExecGatewayVsToolbox: `true` as the provider runs every command
// (a session exec over the SSH gateway, on a warm connection) beside the
// toolbox's POST process/execute for the same command, in the same
// sandbox of the same fake: in a container (where the engine's exec costs
// both most of their time) and on the host backend (which leaves the two
// paths' own cost).
func BenchmarkExecGatewayVsToolbox(b *testing.B) {
	eachBackend(b, func(b *testing.B, _ *daytonatest.Fake, _ json.RawMessage, p *daytona.Provider, sb sdk.Sandbox, toolbox func(api.ExecuteRequest)) {
		gateway := func() {
			st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}, Dir: "/"}, sdk.ExecIO{})
			if err != nil || st.Code != 0 {
				b.Fatalf("exec over the gateway: %+v, %v", st, err)
			}
		}
		viaToolbox := func() { toolbox(api.ExecuteRequest{Command: "true", Cwd: "/"}) }
		gateway() // connect
		viaToolbox()
		benchtest.Compare(b, "gateway", "toolbox", gateway, viaToolbox)
	})
}

// BenchmarkEnsureRunningStarted: EnsureRunning on a sandbox that exists
// and is started, by a provider that has not seen it (as each amelia run
// is): it finds the sandbox (GET /sandbox by label), gets a gateway token,
// logs in, and makes sure of the workspace with one command. Beside it,
// what no client can skip, made bare: the same GET with net/http and the
// same command through the toolbox. The difference is the client-side
// overhead (target under 50 ms); on the host backend, where the command
// itself costs little, it is most of the figure.
func BenchmarkEnsureRunningStarted(b *testing.B) {
	eachBackend(b, func(b *testing.B, f *daytonatest.Fake, cfg json.RawMessage, _ *daytona.Provider, _ sdk.Sandbox, toolbox func(api.ExecuteRequest)) {
		list := f.URL() + "/sandbox?" + url.Values{"labels": {`{"amelia.sandbox":"bench"}`}}.Encode()
		ours, base := benchtest.Compare(b, "ensure-running", "bare-list+command", func() {
			p := newProvider(b)
			defer p.Close()
			if sb, err := p.EnsureRunning(b.Context(), spec("bench", cfg, sdk.NetworkOpen)); err != nil || sb.Created {
				b.Fatalf("EnsureRunning: %+v, %v", sb, err)
			}
		}, func() {
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, list, nil)
			req.Header.Set("Authorization", "Bearer "+f.APIKey())
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("list: %v %v", resp, err)
			}
			resp.Body.Close()
			toolbox(api.ExecuteRequest{Command: `sh -c 'mkdir -p -- "$HOME/workspace" "$HOME/.amelia/bin" && printf %s "$HOME"'`})
		})
		b.ReportMetric(float64((ours-base).Microseconds())/1000, "overhead-ms")
	})
}
