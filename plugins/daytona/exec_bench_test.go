package daytona_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// The exec envelope against what it replaces, through the fake's gateway
// as it behaves by default (like Daytona's: stderr dropped, exit statuses
// lost now and then, no process group), in a container sandbox:
//
//	go test -run='^$' -bench='Framed|Cancel' -benchtime=30x ./plugins/daytona/
//
// "framed" is the provider's own path: the worker's envelope, on one long
// command session (mux). "session" is the same envelope in a new gateway
// session per command; "unframed" a bare session exec, as the provider
// ran commands before, on a gateway connection of its own.

// gatewayBench is a started sandbox of a realistic fake, the provider
// that made it, and a bare connection to its gateway.
type gatewayBench struct {
	f    *daytonatest.Fake
	cfg  json.RawMessage
	p    *daytona.Provider
	sb   sdk.Sandbox
	conn *ssh.Client
	home string
}

func newGatewayBench(b *testing.B) *gatewayBench {
	b.Helper()
	f, cfg := startWith(b, daytonatest.Options{Docker: dockertest.Engine(b)}, nil)
	p := newProvider(b)
	sb, err := p.EnsureRunning(b.Context(), spec("bench", cfg, sdk.NetworkOpen))
	if err != nil {
		b.Fatal(err)
	}
	// The provider's session first, so that the token minted below for the
	// bare connection replaces its token only after its connection is up.
	if st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{}); err != nil || st.Code != 0 {
		b.Fatalf("first exec: %+v %v", st, err)
	}
	client, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey()})
	if err != nil {
		b.Fatal(err)
	}
	access, err := client.CreateSSHAccess(b.Context(), sb.Ref.ID, 60)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := ssh.Dial("tcp", f.GatewayAddr(), &ssh.ClientConfig{User: access.Token, HostKeyCallback: ssh.FixedHostKey(f.HostKey())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return &gatewayBench{f: f, cfg: cfg, p: p, sb: sb, conn: conn, home: f.Home(sb.Ref.ID)}
}

// framed runs argv through the provider.
func (g *gatewayBench) framed(b *testing.B, argv []string, stdout io.Writer) {
	st, err := g.p.Exec(b.Context(), sdk.ExecRequest{Sandbox: g.sb.Ref, Argv: argv}, sdk.ExecIO{Stdout: stdout})
	if err != nil || st.Code != 0 {
		b.Fatalf("framed %v: %+v %v", argv, st, err)
	}
}

// unframed runs line in a bare session; it reports whether the exit
// status came (the gateway loses some).
func (g *gatewayBench) unframed(b *testing.B, line string, stdout io.Writer) bool {
	s, err := g.conn.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.Stdout = stdout
	err = s.Run(line)
	var missing *ssh.ExitMissingError
	if err != nil && !errors.As(err, &missing) {
		b.Fatalf("unframed %q: %v", line, err)
	}
	return err == nil
}

// session runs argv through the envelope in a new session of its own.
func (g *gatewayBench) session(b *testing.B, worker string, argv []string) {
	s, err := g.conn.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	if err := s.Start(worker + " exec"); err != nil {
		b.Fatal(err)
	}
	res, err := envelope.Run(b.Context(), in, out, envelope.Command{Argv: argv}, envelope.IO{}, time.Second)
	if err != nil || res.Code != 0 {
		b.Fatalf("framed session %v: %+v %v", argv, res, err)
	}
}

// worker is the path of the worker the provider installed.
func (g *gatewayBench) worker(b *testing.B) string {
	var out strings.Builder
	st, err := g.p.Exec(b.Context(), sdk.ExecRequest{Sandbox: g.sb.Ref, Argv: []string{"sh", "-c", `ls "$HOME"/.amelia/bin/amelia-worker-*`}}, sdk.ExecIO{Stdout: &out})
	if err != nil || st.Code != 0 {
		b.Fatalf("find the worker: %+v %v", st, err)
	}
	return strings.TrimSpace(out.String())
}

// BenchmarkFramedExecTrue: `true` through the provider (the envelope on
// its command session) beside a bare session exec, and beside the
// envelope in a session of its own per command: what the long session
// saves, and what the envelope costs. lost-exit-% is how many bare execs
// came back without an exit status.
func BenchmarkFramedExecTrue(b *testing.B) {
	g := newGatewayBench(b)
	worker := g.worker(b)
	b.Run("vs-unframed", func(b *testing.B) {
		lost, n := 0, 0
		benchtest.Compare(b, "framed", "unframed", func() { g.framed(b, []string{"true"}, nil) }, func() {
			n++
			if !g.unframed(b, "true", nil) {
				lost++
			}
		})
		b.ReportMetric(100*float64(lost)/float64(n), "lost-exit-%")
	})
	b.Run("vs-session-per-exec", func(b *testing.B) {
		benchtest.Compare(b, "framed", "session", func() { g.framed(b, []string{"true"}, nil) }, func() { g.session(b, worker, []string{"true"}) })
	})
}

// BenchmarkFramedStream: 100 MiB of stdout through the provider beside a
// bare session exec of the same command.
func BenchmarkFramedStream(b *testing.B) {
	const size = 100 << 20
	g := newGatewayBench(b)
	var ours, base time.Duration
	for b.Loop() {
		var c benchtest.Counter
		start := time.Now()
		g.framed(b, []string{"head", "-c", "104857600", "/dev/zero"}, &c)
		ours += time.Since(start)
		var d benchtest.Counter
		start = time.Now()
		g.unframed(b, "head -c 104857600 /dev/zero", &d)
		base += time.Since(start)
		if c.N != size || d.N != size {
			b.Fatalf("framed %d bytes, unframed %d; want %d", c.N, d.N, size)
		}
	}
	benchtest.Throughput(b, size, ours, base, "framed", "unframed")
}

// BenchmarkCancel: from cancelling a running `sleep` to the provider's
// Exec returning with it gone (the worker signals its session), beside the
// shexec path the provider used before (its pid on stderr, which the
// gateway drops, so it kills by tag once the pid's wait runs out).
func BenchmarkCancel(b *testing.B) {
	g := newGatewayBench(b)
	client, err := api.New(api.Options{BaseURL: g.f.URL(), APIKey: g.f.APIKey()})
	if err != nil {
		b.Fatal(err)
	}
	access, err := client.CreateSSHAccess(b.Context(), g.sb.Ref.ID, 60)
	if err != nil {
		b.Fatal(err)
	}
	hostKeys := knownHosts(b, g.cfg)
	conn := sshtransport.New(sshtransport.Target{Addr: g.f.GatewayAddr(), User: access.Token, HostKeys: hostKeys}, sshtransport.Options{})
	b.Cleanup(func() { conn.Close() })
	// cancelAfterStart runs exec until its first line, then cancels and
	// times the rest.
	cancelAfterStart := func(exec func(ctx context.Context, stdout io.Writer) error) time.Duration {
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := exec(ctx, pw)
			pw.Close()
			done <- err
		}()
		if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil {
			b.Fatalf("first line: %v", err)
		}
		go io.Copy(io.Discard, pr)
		start := time.Now()
		cancel()
		if err := <-done; err != nil {
			b.Fatalf("cancelled exec: %v", err)
		}
		return time.Since(start)
	}
	var ours, base []time.Duration
	for b.Loop() {
		ours = append(ours, cancelAfterStart(func(ctx context.Context, stdout io.Writer) error {
			st, err := g.p.Exec(ctx, sdk.ExecRequest{Sandbox: g.sb.Ref, Argv: []string{"sh", "-c", "echo started; exec sleep 600"}, CancelGrace: time.Second}, sdk.ExecIO{Stdout: stdout})
			if err == nil && !st.Canceled {
				err = errors.New("not cancelled")
			}
			return err
		}))
		base = append(base, cancelAfterStart(func(ctx context.Context, stdout io.Writer) error {
			cmd := shexec.Command{Tag: shexec.NewTag(), Argv: []string{"sh", "-c", "echo started; exec sleep 600"}}
			st, err := conn.Exec(ctx, cmd, sdk.ExecIO{Stdout: stdout}, time.Second)
			if errors.Is(err, sdk.ErrUnavailable) {
				err = nil // the gateway lost the exit status: what the benchmark times is the cancel
			}
			if err == nil && !st.Canceled {
				err = errors.New("not cancelled")
			}
			return err
		}))
	}
	benchtest.Latencies(b, ours, base, "framed", "shexec")
}

// knownHosts is the host key store of the fake's gateway, from the
// settings block.
func knownHosts(b *testing.B, cfg json.RawMessage) *sshtransport.HostKeys {
	var set struct {
		KnownHosts string `json:"known_hosts"`
	}
	if err := json.Unmarshal(cfg, &set); err != nil {
		b.Fatal(err)
	}
	hk, err := sshtransport.KnownHosts(set.KnownHosts, sshtransport.HostKeyPolicy("strict"))
	if err != nil {
		b.Fatal(err)
	}
	return hk
}
