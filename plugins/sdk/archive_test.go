package sdk_test

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// A FileArchive reads as a tar stream of its one file, with the header's
// owner, mode and time; a body shorter than Size, or a name that is not
// one element, is an error.
func TestFileArchive(t *testing.T) {
	mtime := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	body := strings.Repeat("x", 1000)
	a := &sdk.FileArchive{Name: "file", Mode: 0o640, UID: 2001, GID: 2002, ModTime: mtime, Size: 1000, Body: strings.NewReader(body)}
	b, err := io.ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(tr)
	if h.Name != "file" || h.Typeflag != tar.TypeReg || h.Mode != 0o640 || h.Uid != 2001 || h.Gid != 2002 || !h.ModTime.Equal(mtime) || string(got) != body {
		t.Errorf("header %+v, %d bytes", h, len(got))
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("after the file: %v, want the end", err)
	}
	for _, c := range []struct {
		name string
		a    *sdk.FileArchive
		want string
	}{
		{"short", &sdk.FileArchive{Name: "f", Size: 10, Body: strings.NewReader("abc")}, "ended after 3 of its 10 bytes"},
		{"path", &sdk.FileArchive{Name: "../f", Size: 0, Body: strings.NewReader("")}, "not one path element"},
	} {
		if _, err := io.ReadAll(c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
