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

// A FileFromArchive writes the one file of the archive written to it, and
// refuses an archive with another name, another type or more entries.
func TestFileFromArchive(t *testing.T) {
	tarOf := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write(bytes.Repeat([]byte("y"), int(h.Size)))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	var out bytes.Buffer
	x := &sdk.FileFromArchive{Name: "file", File: &out}
	if _, err := x.Write(tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "file", Size: 3000, Mode: 0o600})); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil || out.String() != strings.Repeat("y", 3000) || x.Header.Size != 3000 {
		t.Fatalf("%v, %d bytes", err, out.Len())
	}
	// The same, in pieces that split the header, the file and the end.
	out.Reset()
	x = &sdk.FileFromArchive{Name: "file", File: &out}
	whole := tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "file", Size: 3000, Mode: 0o600, PAXRecords: map[string]string{"comment": strings.Repeat("c", 700)}})
	for len(whole) > 0 {
		k := min(len(whole), 77)
		if _, err := x.Write(whole[:k]); err != nil {
			t.Fatal(err)
		}
		whole = whole[k:]
	}
	if err := x.Close(); err != nil || out.String() != strings.Repeat("y", 3000) {
		t.Fatalf("in pieces: %v, %d bytes", err, out.Len())
	}
	// Cut short: an error.
	x = &sdk.FileFromArchive{Name: "file", File: io.Discard}
	_, _ = x.Write(tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "file", Size: 3000})[:2000])
	if err := x.Close(); err == nil || !strings.Contains(err.Error(), "of the 3000 bytes") {
		t.Errorf("cut short: %v", err)
	}
	for _, c := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{"another name", tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "other", Size: 1}), `holds "other"`},
		{"a link", tarOf(&tar.Header{Typeflag: tar.TypeSymlink, Name: "file", Linkname: "/etc/passwd"}), "not the regular file"},
		{"two files", tarOf(&tar.Header{Typeflag: tar.TypeReg, Name: "file", Size: 1}, &tar.Header{Typeflag: tar.TypeReg, Name: "more", Size: 1}), "more than the one file"},
	} {
		x := &sdk.FileFromArchive{Name: "file", File: io.Discard}
		_, _ = x.Write(c.archive)
		if err := x.Close(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
