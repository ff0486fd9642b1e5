//go:build unix

package datachan

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*Host, *Plugin) {
	t.Helper()
	h, p, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); p.Close() })
	return h, p
}

// The pipes an exec's record names reach the plugin, each the other end of
// the host's, close-on-exec and filed by the exec's id.
func TestPipesReachThePlugin(t *testing.T) {
	h, p := pair(t)
	ids := map[uint64]Ends{}
	for _, want := range [][3]bool{{true, true, true}, {false, true, false}, {true, false, true}} {
		id, ends, err := h.Open(want[0], want[1], want[2])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ends.Close)
		if got := [3]bool{ends.Stdin != nil, ends.Stdout != nil, ends.Stderr != nil}; got != want {
			t.Fatalf("host ends %v, want %v", got, want)
		}
		ids[id] = ends
	}
	for id, ends := range ids {
		var kinds []Kind
		for k, f := range map[Kind]*os.File{Stdin: ends.Stdin, Stdout: ends.Stdout, Stderr: ends.Stderr} {
			if f != nil {
				kinds = append(kinds, k)
			}
		}
		fs, err := p.Claim(t.Context(), id, kinds...)
		if err != nil {
			t.Fatalf("claim exec %d: %v", id, err)
		}
		for k, f := range fs {
			flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
			if err != nil || flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("exec %d %s: flags %#x (%v), want close-on-exec", id, k, flags, err)
			}
			// A byte each way proves which end is which.
			var w, r *os.File
			switch k {
			case Stdin:
				w, r = ends.Stdin, f
			case Stdout:
				w, r = f, ends.Stdout
			case Stderr:
				w, r = f, ends.Stderr
			}
			if _, err := w.Write([]byte{byte(k)}); err != nil {
				t.Fatalf("exec %d %s: write: %v", id, k, err)
			}
			b := make([]byte, 1)
			if _, err := io.ReadFull(r, b); err != nil || b[0] != byte(k) {
				t.Fatalf("exec %d %s: read %v %v", id, k, b, err)
			}
			f.Close()
		}
	}
}

// A claim for kinds the host did not pass fails and closes what came; a
// claim once the host is gone fails with ErrClosed.
func TestClaimRefusesWhatDoesNotMatch(t *testing.T) {
	h, p := pair(t)
	id, ends, err := h.Open(false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ends.Close()
	if _, err := p.Claim(t.Context(), id, Stdout, Stderr); err == nil {
		t.Error("a claim of stdout and stderr took an exec with stdout alone")
	}
	// The plugin's end was closed: the host's read end sees end of file.
	if n, err := ends.Stdout.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("host's stdout after a refused claim: %d, %v; want EOF", n, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Claim(ctx, 999, Stdout); !errors.Is(err, context.Canceled) {
		t.Errorf("claim with an ended context: %v", err)
	}
	// Pipes that come after their claim gave up are closed.
	late, lateEnds, err := h.Open(false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer lateEnds.Close()
	if _, err := p.Claim(ctx, late+1, Stdout); err == nil {
		t.Fatal("a claim with an ended context succeeded")
	}
	next, nextEnds, err := h.Open(false, true, false)
	if err != nil || next != late+1 {
		t.Fatalf("open: %d %v, want exec %d", next, err, late+1)
	}
	defer nextEnds.Close()
	if n, err := nextEnds.Stdout.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("host's stdout of an abandoned exec: %d, %v; want EOF", n, err)
	}
	h.Close()
	if _, err := p.Claim(t.Context(), 1000, Stdout); !errors.Is(err, ErrClosed) {
		t.Errorf("claim on a closed channel: %v, want ErrClosed", err)
	}
}

// A plugin that says the hello of another version of the channel (an older
// SDK's yamux) gets no channel: the host falls back to gRPC.
func TestConnectDeclinesAnotherVersion(t *testing.T) {
	for _, tc := range []struct {
		said    string
		want    bool
		wantErr bool
	}{
		{hello, true, false},
		{"amelia-provider-data 1\n", false, false},
		{"", false, false},
		{"something else entirely\n", false, true},
	} {
		host, child, err := Offer()
		if err != nil {
			t.Fatal(err)
		}
		if tc.said != "" {
			if _, err := syscall.Write(int(child.Fd()), []byte(tc.said)); err != nil {
				t.Fatal(err)
			}
		}
		h, err := Connect(host)
		if (h != nil) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("hello %q: channel %v, error %v; want channel %v, error %v", tc.said, h != nil, err, tc.want, tc.wantErr)
		}
		if h != nil {
			h.Close()
		}
		child.Close()
	}
}

// OpenFile passes a file of the host's as an exec's stdin: the plugin
// reads it from the host's offset, the host keeps its own, and has no
// stdin end to write.
func TestOpenFilePassesTheFile(t *testing.T) {
	h, p := pair(t)
	in, err := os.CreateTemp(t.TempDir(), "in")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.WriteString("the file's bytes"); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	id, ends, err := h.OpenFile(in, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ends.Close()
	if ends.Stdin != nil || ends.Stdout == nil {
		t.Fatalf("host ends %+v: want no stdin end, a stdout pipe", ends)
	}
	fs, err := p.Claim(t.Context(), id, Stdin, Stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.close()
	got, err := io.ReadAll(fs[Stdin])
	if err != nil || string(got) != "file's bytes" {
		t.Fatalf("the plugin read %q, %v", got, err)
	}
	if _, err := in.Stat(); err != nil {
		t.Errorf("the host's file was closed: %v", err)
	}
}
