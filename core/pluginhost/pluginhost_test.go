package pluginhost

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakePlugin writes an executable (never run here) into dir.
func fakePlugin(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSearchPathOrder(t *testing.T) {
	got := SearchPath("/a:/b::", "/home/u/.config", "/opt/amelia/bin/amelia")
	want := []string{"/a", "/b", "/home/u/.config/amelia/plugins", "/opt/amelia/bin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SearchPath = %v, want %v", got, want)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	first, second := filepath.Join(root, "first"), filepath.Join(root, "second")
	fakePlugin(t, second, "amelia-provider-hello", 0o755)
	want := fakePlugin(t, first, "amelia-provider-hello", 0o755)
	fakePlugin(t, first, "amelia-provider-local", 0o755)
	fakePlugin(t, first, "amelia-provider-noexec", 0o644)
	h := New(Options{Server: os.Args[0], Builtins: []Builtin{{Name: "local", Aliases: []string{"none"}}}, Dirs: []string{first, second}})

	for _, tc := range []struct {
		name string
		want Plugin
		err  string
	}{
		{name: "hello", want: Plugin{Name: "hello", Path: want}},
		{name: "local", want: Plugin{Name: "local", Path: os.Args[0], Args: []string{"plugin", "serve", "local"}, Builtin: true}},
		{name: "none", want: Plugin{Name: "local", Path: os.Args[0], Args: []string{"plugin", "serve", "local"}, Builtin: true}},
		{name: "noexec", err: `no provider named "noexec": built in are local; no amelia-provider-noexec was found in ` + first + ", " + second},
		{name: "../evil", err: `"../evil" is not a valid provider name`},
	} {
		got, err := h.Find(tc.name)
		switch {
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("Find(%q) error = %v, want one starting %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("Find(%q) = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	root := t.TempDir()
	first, second := filepath.Join(root, "first"), filepath.Join(root, "second")
	b := fakePlugin(t, first, "amelia-provider-b", 0o755)
	shadowed := fakePlugin(t, second, "amelia-provider-b", 0o755)
	a := fakePlugin(t, second, "amelia-provider-a", 0o755)
	builtin := fakePlugin(t, second, "amelia-provider-none", 0o755)
	bad := fakePlugin(t, second, "amelia-provider-Bad", 0o755)
	fakePlugin(t, second, "not-a-plugin", 0o755)
	h := New(Options{Server: os.Args[0], Builtins: []Builtin{{Name: "local", Aliases: []string{"none"}}}, Dirs: []string{first, second, filepath.Join(root, "missing")}})

	plugins, ignored := h.List()
	var names []string
	for _, p := range plugins {
		names = append(names, p.Name+"="+p.Source())
	}
	if want := []string{"local=built-in", "a=" + a, "b=" + b}; !reflect.DeepEqual(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	wantIgnored := []Ignored{
		{bad, `"Bad" is not a valid provider name`},
		{shadowed, "shadowed by " + b},
		{builtin, `"none" is a built-in provider`},
	}
	if !reflect.DeepEqual(ignored, wantIgnored) {
		t.Errorf("ignored = %+v, want %+v", ignored, wantIgnored)
	}
}
