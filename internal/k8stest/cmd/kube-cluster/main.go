// Command kube-cluster builds and runs the Kubernetes test cluster (package
// kubecluster) for a person:
//
//	kube-cluster build   fill the binaries cache (make kube-binaries)
//	kube-cluster up      start a cluster, print how to use it, run until Ctrl-C (make kube-cluster)
//	kube-cluster sweep   tear down what clusters whose owner died left
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/internal/k8stest/kubecluster"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

const usage = `usage: kube-cluster build | up [-image REF]... | sweep

  build   build Kubernetes ` + kubecluster.KubernetesVersion + ` and agent-sandbox ` + kubecluster.AgentSandboxVersion + ` into the cache
          ($AMELIA_KUBE_CACHE, else ~/.cache/amelia/kubernetes); seconds when cached
  up      start a two-node cluster (as root), print its kubeconfig, run until interrupted
  sweep   tear down clusters whose owner died
`

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, log, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kube-cluster:", err)
		os.Exit(1)
	}
}

// images is a repeatable -image flag.
type images []string

func (i *images) String() string     { return strings.Join(*i, ",") }
func (i *images) Set(v string) error { *i = append(*i, v); return nil }

func run(ctx context.Context, log *slog.Logger, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("name a command")
	}
	root, err := kubecluster.CacheDir()
	if err != nil {
		return err
	}
	switch args[0] {
	case "build":
		start := time.Now()
		b, err := kubecluster.Build(ctx, root, log)
		if err != nil {
			return err
		}
		fmt.Printf("Kubernetes test cluster binaries ready in %s (%s):\n  %s\n  %s\n  %s\n", root, time.Since(start).Round(time.Second), b.Kube, b.Controller, b.Router)
		return nil
	case "up":
		fs := flag.NewFlagSet("up", flag.ContinueOnError)
		var refs images
		fs.Var(&refs, "image", "a Docker image to load onto the nodes (repeatable; default "+image.TestBase+")")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if len(refs) == 0 {
			refs = images{image.TestBase}
		}
		bins, err := kubecluster.Cached(root)
		if err != nil {
			return err
		}
		start := time.Now()
		c, err := kubecluster.Up(ctx, kubecluster.Options{Binaries: bins, Images: refs, ImageCache: root, Log: log})
		if err != nil {
			return err
		}
		fmt.Printf(`
Kubernetes %s is up (%s): nodes %s, the Agent Sandbox controller, images %s.
In another shell:

  export KUBECONFIG=%s
  %s get nodes

Ctrl-C here stops it and removes everything it made.
`, kubecluster.KubernetesVersion, time.Since(start).Round(100*time.Millisecond), strings.Join(c.Nodes, " and "), strings.Join(c.Images, ", "), c.Kubeconfig, c.Kubectl)
		if err := c.WaitExit(ctx); err != nil {
			log.Error("the cluster broke; stopping it", "err", err)
		}
		fmt.Println("stopping the cluster")
		return c.Down()
	case "sweep":
		return kubecluster.Sweep(ctx, kubecluster.RunRoot(), log)
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
