package kubecluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// routerHealthPort is kube-router's health port in the cluster's network
// namespace.
const routerHealthPort = 20244

// PolicyNode is the node whose pods' NetworkPolicies are enforced: kube-router's
// network policy controller runs for it alone. The other node has no
// enforcement, as on a cluster whose network plugin ignores the policies,
// so one cluster shows both.
const PolicyNode = "127.0.0.1"

// startPolicyController starts kube-router's network policy controller for
// PolicyNode and waits until it has made its first sync: the chain its
// rules hang from is in the namespace's filter table. Both nodes share the
// namespace's iptables, and kube-router owns the filter table's
// KUBE-ROUTER chains, so only one instance can run; it filters only the
// traffic of its own node's pods (matched by pod IP), which bridged
// traffic reaches through br_netfilter.
func (c *Cluster) startPolicyController(ctx context.Context, b Binaries) error {
	ns := filepath.Join("/run/netns", netnsName(c.ID))
	if err := run(ctx, "nsenter", "--net="+ns, "--", "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"); err != nil {
		return fmt.Errorf("let the bridges' traffic through iptables: %w", err)
	}
	if err := c.start("kube-router", b.Router, "--kubeconfig="+c.Kubeconfig, "--hostname-override="+PolicyNode,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-ipv6=false",
		"--service-cluster-ip-range="+serviceCIDR, fmt.Sprintf("--health-port=%d", routerHealthPort), "--metrics-port=0"); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "kube-router", fmt.Sprintf("http://127.0.0.1:%d/healthz", routerHealthPort)); err != nil {
		return err
	}
	return c.poll(ctx, "kube-router's first sync of the network policies", time.Minute, func(ctx context.Context) error {
		return run(ctx, "nsenter", "--net="+ns, "--", "iptables", "-S", "KUBE-ROUTER-FORWARD")
	})
}
