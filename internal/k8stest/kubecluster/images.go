package kubecluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// unsafeName matches what may not go into a file name made from an image
// reference.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// exportImage writes the local Docker engine's image ref to an archive
// `ctr images import` reads, and returns its path and the name pods use.
// With a cache directory, the archive is kept there by image ID, so the
// next cluster of the same image skips the export; else it goes into dir.
func exportImage(ctx context.Context, ref, cache, dir string) (string, string, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "", "", fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	res, err := cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "", "", fmt.Errorf("the Docker engine has no image %s to load onto the nodes: make it (make base-image)", ref)
	} else if err != nil {
		return "", "", fmt.Errorf("inspect image %s in the Docker engine: %w", ref, err)
	}
	id := strings.TrimPrefix(res.ID, "sha256:")
	if len(id) > 16 {
		id = id[:16]
	}
	prefix := unsafeName.ReplaceAllString(ref, "_") + "-"
	if cache != "" {
		dir = filepath.Join(cache, "images")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	path := filepath.Join(dir, prefix+id+".tar")
	if _, err := os.Stat(path); err == nil {
		return path, ref, nil
	}
	tmp, err := os.CreateTemp(dir, ".export-")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	r, err := cli.ImageSave(ctx, []string{ref})
	if err != nil {
		tmp.Close()
		return "", "", fmt.Errorf("export image %s from the Docker engine: %w", ref, err)
	}
	_, err = io.Copy(tmp, r)
	r.Close()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", "", fmt.Errorf("export image %s from the Docker engine: %w", ref, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", "", err
	}
	// Older exports of the same reference are of no further use.
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"*.tar"))
	for _, o := range old {
		if o != path {
			os.Remove(o)
		}
	}
	return path, ref, nil
}
