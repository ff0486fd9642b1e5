package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
)

// runTunnel is what detach and supervise are told of the run's tunnel.
type runTunnel struct {
	on     bool // the supervisor holds the run's tunnel
	egress bool // and the command's HTTP(S)_PROXY lead through it
}

func (t *runTunnel) flags(f *pflag.FlagSet) {
	f.BoolVar(&t.on, "tunnel", false, "hold the sandbox end of the run's tunnel to the proxy while the command lives (needs AMELIA_PROXY_TOKEN)")
	f.BoolVar(&t.egress, "egress-proxy", false, "with --tunnel: point HTTP_PROXY and HTTPS_PROXY at the proxy too")
}

// args are the flags that pass t on to supervise.
func (t runTunnel) args() []string {
	var a []string
	if t.on {
		a = append(a, "--tunnel")
	}
	if t.egress {
		a = append(a, "--egress-proxy")
	}
	return a
}

// holdTunnel starts the sandbox end of the run's tunnel in the supervisor,
// whose working directory is the run's: the agent's loopback listener and
// the carriers' socket there (sandboxend.Hold). It returns the command's
// environment for it, and the function that closes the tunnel and waits
// until it has (calling it again does nothing).
func (w *worker) holdTunnel(egress bool) (map[string]string, func(), error) {
	token := os.Getenv(EnvProxyToken)
	if token == "" {
		return nil, nil, fmt.Errorf("--tunnel: %s is not set: the run's token goes with its tunnel", EnvProxyToken)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the run's tunnel: %w", err)
	}
	// Relative: the run directory is this process's, and a socket's path
	// is bounded (108 bytes) where the directory's is not.
	carriers, err := net.Listen("unix", sandboxend.CarrierSocket)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("listen for the run's tunnel carriers: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sandboxend.Hold(ctx, ln, carriers, buildinfo.Version(), sandboxend.CarrierWait, w.log); err != nil {
			w.log.Error("the run's tunnel failed", "err", err)
		}
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	return sandboxend.ProxyEnv(ln.Addr().String(), token, egress), stop, nil
}

// withEnv is env with the variables of set replaced or added.
func withEnv(env []string, set map[string]string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ok := set[k]
		return ok
	})
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// attachTunnel carries the tunnel of the detached run in dir over stdin
// and stdout until the run's supervisor closes it. A run that has ended,
// before or while it was carried, exits sandboxend.ExitRunEnded: its
// tunnel is gone for good.
func (w *worker) attachTunnel(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("tunnel --run %q: want the run directory's absolute path", dir)
	}
	// The socket's path is relative to the run's directory, as the
	// supervisor made it.
	if err := os.Chdir(dir); err != nil {
		fmt.Fprintf(w.p.Stderr, "amelia-worker tunnel: no run in %s (%v)\n", dir, err)
		return exitCode(exitFailed)
	}
	sock, err := net.Dial("unix", sandboxend.CarrierSocket)
	if err != nil {
		ended, _, endErr := runEnded(dir)
		switch {
		case ended:
			fmt.Fprintf(w.p.Stderr, "amelia-worker tunnel: the run in %s has ended, and its tunnel with it\n", dir)
			return exitCode(sandboxend.ExitRunEnded)
		case endErr != nil && !errors.Is(endErr, os.ErrNotExist):
			fmt.Fprintf(w.p.Stderr, "amelia-worker tunnel: %v\n", endErr)
			return exitCode(sandboxend.ExitRunEnded)
		}
		fmt.Fprintf(w.p.Stderr, "amelia-worker tunnel: the run in %s holds no tunnel (%v)\n", dir, err)
		return exitCode(exitFailed)
	}
	err = sandboxend.Relay(sock, w.p.Stdin, w.p.Stdout)
	// The supervisor records the run's end before it lets the tunnel go:
	// a relay cut by that end is no fault.
	if ended, _, _ := runEnded(dir); ended {
		return exitCode(sandboxend.ExitRunEnded)
	}
	if err != nil {
		w.log.Warn("tunnel: the carrier broke", "err", err)
	}
	return nil
}
