package docker

import (
	"context"
	"io"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Archiver: the engine's archive endpoints (PUT and GET
// /containers/{id}/archive, what docker cp uses) move a tar stream
// between the provider and the container's file system with no process
// in the container, so no exec's multiplexed stream and no shim pipe in
// the way. The host only ever names a staging directory the worker in the
// sandbox made for it (core/sandboxfs), and the engine resolves every
// path inside the container's root.

var _ sdk.Archiver = (*Provider)(nil)

// PutArchive unpacks r into dir, as the tar headers say (the engine keeps
// their numeric owners), refusing to put a file where a directory is.
func (p *Provider) PutArchive(ctx context.Context, ref sdk.SandboxRef, dir string, r io.Reader) error {
	e, err := p.archiveEngine(ctx, ref)
	if err != nil {
		return err
	}
	target := containerRef(ref)
	_, err = e.cli.CopyToContainer(ctx, target, client.CopyToContainerOptions{DestinationPath: dir, Content: bigChunks{r}})
	if err != nil {
		return sandboxError(e.wrap(err, "copy an archive into "+dir+" in container "+target), ref.Name)
	}
	return nil
}

// GetArchive writes a tar stream of path to w.
func (p *Provider) GetArchive(ctx context.Context, ref sdk.SandboxRef, path string, w io.Writer) error {
	e, err := p.archiveEngine(ctx, ref)
	if err != nil {
		return err
	}
	target := containerRef(ref)
	res, err := e.cli.CopyFromContainer(ctx, target, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return sandboxError(e.wrap(err, "copy "+path+" out of container "+target), ref.Name)
	}
	defer res.Content.Close()
	if _, err := io.CopyBuffer(w, readerOnly{res.Content}, make([]byte, demuxBuffer)); err != nil {
		return e.wrap(err, "copy "+path+" out of container "+target)
	}
	return nil
}

// bigChunks is a request body that net/http copies in stdinBuffer
// pieces (its WriteTo), each one chunk on the wire, rather than io.Copy's
// 32 KiB.
type bigChunks struct{ r io.Reader }

func (b bigChunks) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b bigChunks) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(writerOnly{w}, readerOnly{b.r}, make([]byte, stdinBuffer))
}

// readerOnly hides a reader's WriteTo, which would ignore the buffer
// io.CopyBuffer is given.
type readerOnly struct{ io.Reader }

func (p *Provider) archiveEngine(ctx context.Context, ref sdk.SandboxRef) (*engine, error) {
	set, err := decodeSettings(ref.Config)
	if err != nil {
		return nil, err
	}
	return p.engine(ctx, set)
}
