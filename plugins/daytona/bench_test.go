package daytona_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side harnesses against the fake Daytona (sandboxes in containers
// of the real engine), in-process, so the figures are the provider's own:
//
//	go test -run='^$' -bench=. -benchtime=50x ./plugins/daytona/

// BenchmarkExecGatewayVsToolbox: `true` as the provider runs every command
// (a session exec over the SSH gateway, on a warm connection) beside the
// toolbox's POST process/execute for the same command, in the same
// sandbox of the same fake: in a container (where the engine's exec costs
// both most of their time) and on the host backend (which leaves the two
// paths' own cost).
func BenchmarkExecGatewayVsToolbox(b *testing.B) {
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
			gateway := func() {
				st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}, Dir: "/"}, sdk.ExecIO{})
				if err != nil || st.Code != 0 {
					b.Fatalf("exec over the gateway: %+v, %v", st, err)
				}
			}
			toolbox := func() {
				res, err := client.Execute(b.Context(), box, api.ExecuteRequest{Command: "true", Cwd: "/"})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("toolbox execute: %+v, %v", res, err)
				}
			}
			gateway() // connect
			toolbox()
			var ours, base []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				gateway()
				t1 := time.Now()
				toolbox()
				ours = append(ours, t1.Sub(t0))
				base = append(base, time.Since(t1))
			}
			benchtest.Latencies(b, ours, base, "gateway", "toolbox")
		})
	}
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
	for _, backend := range []string{"docker", "host"} {
		b.Run(backend, func(b *testing.B) {
			opts := daytonatest.Options{}
			if backend == "docker" {
				opts.Docker = dockertest.Engine(b)
			}
			f, cfg := startWith(b, opts, nil)
			sb, err := newProvider(b).EnsureRunning(b.Context(), spec("bench", cfg, sdk.NetworkOpen))
			if err != nil {
				b.Fatal(err)
			}
			box, _ := f.Sandbox(sb.Ref.ID)
			client, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey()})
			if err != nil {
				b.Fatal(err)
			}
			list := f.URL() + "/sandbox?" + url.Values{"labels": {`{"amelia.sandbox":"bench"}`}}.Encode()
			bare := func() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, list, nil)
				req.Header.Set("Authorization", "Bearer "+f.APIKey())
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("list: %v %v", resp, err)
				}
				resp.Body.Close()
				res, err := client.Execute(b.Context(), box, api.ExecuteRequest{Command: `sh -c 'mkdir -p -- "$HOME/workspace" "$HOME/.amelia/bin" && printf %s "$HOME"'`})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("toolbox execute: %+v, %v", res, err)
				}
			}
			var ours, base []time.Duration
			b.ResetTimer()
			for b.Loop() {
				p := newProvider(b)
				t0 := time.Now()
				sb, err := p.EnsureRunning(b.Context(), spec("bench", cfg, sdk.NetworkOpen))
				t1 := time.Now()
				if err != nil || sb.Created {
					b.Fatalf("EnsureRunning: %+v, %v", sb, err)
				}
				bare()
				ours = append(ours, t1.Sub(t0))
				base = append(base, time.Since(t1))
				p.Close()
			}
			benchtest.Latencies(b, ours, base, "ensure-running", "bare-list+command")
			b.ReportMetric(float64((benchtest.Median(ours)-benchtest.Median(base)).Microseconds())/1000, "overhead-ms")
		})
	}
}
