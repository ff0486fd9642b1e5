package worker

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// The smallest index (version 2: header, fan-out table, two checksums)
// and pack (header, checksum) there are.
const (
	minIdxSize  = 8 + 256*4 + 2*sha1.Size
	minPackSize = 12 + sha1.Size
)

// receivePack stores the index and the pack that in carries (see
// workstep.Pack) in packDir as pack-NAME.idx and pack-NAME.pack, both
// read-only to all, as git makes them: first under temporary names (git's
// tmp_ prefix), checked, written through (git syncs a pack and its index
// too), then the pack renamed into place, the index last, since git
// finds packs by their index. The checks are of what came over the wire,
// not of the objects: the host that made the pack is trusted; its index
// spares the sandbox git index-pack, which inflates and hashes every
// object again.
func receivePack(packDir string, p workstep.Pack, in io.Reader) (err error) {
	name, err := hex.DecodeString(p.Name)
	if err != nil || len(name) != sha1.Size || hex.EncodeToString(name) != p.Name {
		return fmt.Errorf("%q is not a pack's name (the SHA-1 of its contents, lower-case hex)", p.Name)
	}
	if p.IdxSize < minIdxSize || p.PackSize < minPackSize {
		return fmt.Errorf("an index of %d bytes and a pack of %d bytes: too small to be either", p.IdxSize, p.PackSize)
	}
	var made []string
	defer func() {
		if err != nil {
			for _, f := range made {
				_ = os.Remove(f)
			}
		}
	}()
	buf := make([]byte, 1<<20)
	store := func(prefix string, n int64) (f *os.File, sum, before []byte, err error) {
		if f, err = os.CreateTemp(packDir, prefix); err != nil {
			return nil, nil, nil, err
		}
		made = append(made, f.Name())
		if sum, before, err = copySum(f, in, n, buf); err == nil {
			err = f.Chmod(0o444)
		}
		if err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		return f, sum, before, nil
	}
	idx, _, idxPackSum, err := store("tmp_idx_", p.IdxSize)
	if err != nil {
		return fmt.Errorf("the index: %w", err)
	}
	defer idx.Close()
	pack, packSum, _, err := store("tmp_pack_", p.PackSize)
	if err != nil {
		return fmt.Errorf("the pack: %w", err)
	}
	defer pack.Close()
	if n, err := in.Read(buf[:1]); n > 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("more input than the index's %d bytes and the pack's %d", p.IdxSize, p.PackSize)
	}
	if !bytes.Equal(packSum, name) {
		return fmt.Errorf("the pack's checksum is %x, not its name %s", packSum, p.Name)
	}
	if !bytes.Equal(idxPackSum, packSum) {
		return fmt.Errorf("the index is of the pack %x, not of %s", idxPackSum, p.Name)
	}
	idxHead, packHead := make([]byte, 8+256*4), make([]byte, 12)
	if _, err := idx.ReadAt(idxHead, 0); err != nil {
		return fmt.Errorf("read the index's header: %w", err)
	}
	if _, err := pack.ReadAt(packHead, 0); err != nil {
		return fmt.Errorf("read the pack's header: %w", err)
	}
	if !bytes.Equal(idxHead[:8], []byte("\377tOc\x00\x00\x00\x02")) {
		return fmt.Errorf("the index is not a version 2 one (it begins %x)", idxHead[:8])
	}
	if v := binary.BigEndian.Uint32(packHead[4:8]); string(packHead[:4]) != "PACK" || v != 2 && v != 3 {
		return fmt.Errorf("the pack is not a version 2 or 3 one (it begins %x)", packHead[:8])
	}
	if ni, np := binary.BigEndian.Uint32(idxHead[len(idxHead)-4:]), binary.BigEndian.Uint32(packHead[8:12]); ni != np {
		return fmt.Errorf("the index lists %d objects, the pack holds %d", ni, np)
	}
	for _, f := range []*os.File{pack, idx} {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("write %s through: %w", f.Name(), err)
		}
	}
	base := filepath.Join(packDir, "pack-"+p.Name)
	if err := os.Rename(pack.Name(), base+".pack"); err != nil {
		return err
	}
	if err := os.Rename(idx.Name(), base+".idx"); err != nil {
		// The pack in place without its index is of no use to git,
		// which finds packs by their index: it goes.
		_ = os.Remove(base + ".pack")
		return err
	}
	return nil
}

// copySum copies n bytes of r to w, the last sha1.Size of which are the
// SHA-1 of the others (a git pack's or index's checksum), and checks that
// they are. It returns that checksum and the sha1.Size bytes before it;
// buf is its buffer.
func copySum(w io.Writer, r io.Reader, n int64, buf []byte) (sum, before []byte, err error) {
	h := sha1.New()
	last := &lastBytes{n: sha1.Size}
	if got, err := io.CopyBuffer(io.MultiWriter(w, h, last), io.LimitReader(r, n-sha1.Size), buf); err != nil {
		return nil, nil, err
	} else if got < n-sha1.Size {
		return nil, nil, fmt.Errorf("the input ended after %d of %d bytes", got, n)
	}
	sum = make([]byte, sha1.Size)
	if _, err := io.ReadFull(r, sum); err != nil {
		return nil, nil, fmt.Errorf("the input ended in the last %d bytes of %d: %w", sha1.Size, n, err)
	}
	if _, err := w.Write(sum); err != nil {
		return nil, nil, err
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum) {
		return nil, nil, fmt.Errorf("its checksum says %x, its contents %x: damaged in transfer", sum, got)
	}
	return sum, last.b, nil
}

// lastBytes keeps the last n bytes written to it.
type lastBytes struct {
	n int
	b []byte
}

func (l *lastBytes) Write(p []byte) (int, error) {
	if len(p) >= l.n {
		l.b = append(l.b[:0], p[len(p)-l.n:]...)
		return len(p), nil
	}
	l.b = append(l.b, p...)
	if len(l.b) > l.n {
		l.b = append(l.b[:0], l.b[len(l.b)-l.n:]...)
	}
	return len(p), nil
}
