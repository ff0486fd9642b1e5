// Package dockertest gives tests a real Docker engine: a client for it, the
// base image the sandbox image is built from, and settings for the docker
// provider that use it.
//
// A test that needs the engine calls Engine. When no engine answers, the
// test is skipped with a loud message, unless AMELIA_REQUIRE_DOCKER is set
// (CI sets it), in which case it fails: where an engine is expected, its
// absence is a failure, not a pass.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// RequireEnv makes a missing engine a test failure when set.
const RequireEnv = "AMELIA_REQUIRE_DOCKER"

// Engine returns a client of the engine DOCKER_HOST (or the default socket)
// names, closed when the test ends, after checking that the engine answers
// and has the base image (image/bootstrap-base.sh makes it).
func Engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("no Docker engine answers at %s, and %s is set: %v", cli.DaemonHost(), RequireEnv, err)
		}
		t.Skipf("SKIPPING: this test needs a Docker engine and none answers at %s (%v); set %s=1 to make that a failure", cli.DaemonHost(), err, RequireEnv)
	}
	res, err := cli.ImageInspect(ctx, image.TestBase)
	if cerrdefs.IsNotFound(err) {
		t.Fatalf("the engine has no %s, which the tests build the sandbox image from: run image/bootstrap-base.sh (make base-image)", image.TestBase)
	} else if err != nil {
		t.Fatalf("inspect %s: %v", image.TestBase, err)
	}
	// A base made from an older package list would make every build
	// install the rest from a registry, or fail without one.
	var have string
	if res.Config != nil {
		have = res.Config.Labels[image.BasePackagesLabel]
	}
	if want := image.BasePackages(); have != want {
		t.Fatalf("the engine's %s was made from %q, not %q: run image/bootstrap-base.sh (make base-image), which makes it again", image.TestBase, have, want)
	}
	return cli
}

// Settings is a docker provider settings block building on the test base,
// with the keys of extra added.
func Settings(extra map[string]any) json.RawMessage {
	s := map[string]any{"base_image": image.TestBase}
	for k, v := range extra {
		s[k] = v
	}
	if _, ok := s["image"]; ok {
		delete(s, "base_image")
	}
	if _, ok := s["dockerfile"]; ok {
		delete(s, "base_image")
	}
	b, _ := json.Marshal(s)
	return b
}

// RemoveContainers force-removes, when the test ends, every container that
// carries the label (key=value), and their anonymous volumes.
func RemoveContainers(t testing.TB, cli *client.Client, label string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", label)})
		if err != nil {
			t.Errorf("list containers labelled %s: %v", label, err)
			return
		}
		for _, c := range list.Items {
			if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("remove container %s: %v", c.Names, err)
			}
		}
	})
}

// BridgeGateway is the host's IPv4 address on the engine's default bridge
// network, where containers with network open reach the host: a test
// listening there owns what a sandbox on that bridge can reach.
func BridgeGateway(t testing.TB, cli *client.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("inspect the default bridge network: %v", err)
	}
	n := res.Network
	for _, c := range n.IPAM.Config {
		if c.Gateway.Is4() {
			return c.Gateway.String()
		}
	}
	// The engine leaves the gateway out of IPAM when it picked it itself:
	// it is the bridge interface's address in the subnet.
	name := n.Options["com.docker.network.bridge.name"]
	iface, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatalf("the default bridge network names no gateway, and its interface %q: %v", name, err)
	}
	addrs, err := iface.Addrs()
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(p.IP.To4()); ok {
				for _, c := range n.IPAM.Config {
					if c.Subnet.Contains(ip) {
						return ip.String()
					}
				}
			}
		}
	}
	t.Fatalf("interface %s of the default bridge network has no address in its subnets %v", name, n.IPAM.Config)
	return ""
}

// BuildImage builds dockerfile (a context of that file alone) as tag with
// the engine's classic builder, failing the test with the build's error,
// and removes the image when the test ends.
func BuildImage(t testing.TB, cli *client.Client, tag, dockerfile string) {
	t.Helper()
	var ctx bytes.Buffer
	tw := tar.NewWriter(&ctx)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))})
	tw.Write([]byte(dockerfile))
	tw.Close()
	RemoveImage(t, cli, tag)
	res, err := cli.ImageBuild(t.Context(), &ctx, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("build %s: %v", tag, err)
		}
		if m.Error != nil {
			t.Fatalf("build %s: %s", tag, m.Error.Message)
		}
	}
}

// RemoveImage removes the image ref, and the images built on it, when the
// test ends.
func RemoveImage(t testing.TB, cli *client.Client, ref string) {
	t.Cleanup(func() { RemoveImageNow(t, cli, ref) })
}

// RemoveImageNow removes the image ref, and the images built on it; one
// that is not there is fine.
func RemoveImageNow(t testing.TB, cli *client.Client, ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Logf("remove image %s: %v", ref, err)
	}
}

// RemoveNewImages removes, when the test ends, the images of repo (a
// reference filter: "amelia-devcontainer") that were not there when it was
// called. Cleanups run last first: call it before whatever removes the
// containers that use them, so that it runs after.
func RemoveNewImages(t testing.TB, cli *client.Client, repo string) {
	t.Helper()
	filter := client.ImageListOptions{Filters: make(client.Filters).Add("reference", repo)}
	before := map[string]bool{}
	list, err := cli.ImageList(t.Context(), filter)
	if err != nil {
		t.Fatalf("list the images of %s: %v", repo, err)
	}
	for _, img := range list.Items {
		before[img.ID] = true
	}
	t.Cleanup(func() {
		list, err := cli.ImageList(context.Background(), filter)
		if err != nil {
			t.Errorf("list the images of %s: %v", repo, err)
			return
		}
		for _, img := range list.Items {
			if before[img.ID] {
				continue
			}
			for _, tag := range img.RepoTags {
				RemoveImageNow(t, cli, tag)
			}
		}
	})
}
