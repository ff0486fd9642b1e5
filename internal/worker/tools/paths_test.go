package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPathEscapes(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret.txt": "secret\n", "sub/": ""})
	s, dir := newSet(t, Options{}, map[string]string{"in.txt": "inside\n"})
	for link, target := range map[string]string{
		"lnfile": filepath.Join(outside, "secret.txt"),
		"lndir":  outside,
		"lnrel":  "../" + filepath.Base(outside) + "/secret.txt",
		"lnself": "in.txt",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret.txt")
	lexical := func(p string) string {
		return `path "` + p + `" is outside the working directory ` + dir + `; use a path inside it`
	}
	viaLink := func(p string) string {
		return `path "` + p + `" leads outside the working directory ` + dir + ` through a symbolic link; use a path inside it`
	}
	escapes := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"read dotdot", "read_file", map[string]any{"file_path": "../x"}, lexical("../x")},
		{"read deep dotdot", "read_file", map[string]any{"file_path": "a/../../x"}, lexical("a/../../x")},
		{"read absolute", "read_file", map[string]any{"file_path": secret}, lexical(secret)},
		{"read link to file", "read_file", map[string]any{"file_path": "lnfile"}, viaLink("lnfile")},
		{"read relative link", "read_file", map[string]any{"file_path": "lnrel"}, viaLink("lnrel")},
		{"read through link to dir", "read_file", map[string]any{"file_path": "lndir/secret.txt"}, viaLink("lndir/secret.txt")},
		{"write dotdot", "write_file", map[string]any{"file_path": "../new.txt", "content": "x"}, lexical("../new.txt")},
		{"write absolute", "write_file", map[string]any{"file_path": filepath.Join(outside, "new.txt"), "content": "x"}, lexical(filepath.Join(outside, "new.txt"))},
		{"write link to file", "write_file", map[string]any{"file_path": "lnfile", "content": "pwned"}, viaLink("lnfile")},
		{"write into link to dir", "write_file", map[string]any{"file_path": "lndir/new.txt", "content": "x"}, viaLink("lndir/new.txt")},
		{"write deep into link to dir", "write_file", map[string]any{"file_path": "lndir/sub/deeper/new.txt", "content": "x"}, viaLink("lndir/sub/deeper/new.txt")},
		{"edit dotdot", "edit_file", map[string]any{"file_path": "../x", "old_string": "a", "new_string": "b"}, lexical("../x")},
		{"edit absolute", "edit_file", map[string]any{"file_path": secret, "old_string": "secret", "new_string": "pwned"}, lexical(secret)},
		{"edit link to file", "edit_file", map[string]any{"file_path": "lnfile", "old_string": "secret", "new_string": "pwned"}, viaLink("lnfile")},
		{"edit through link to dir", "edit_file", map[string]any{"file_path": "lndir/secret.txt", "old_string": "secret", "new_string": "pwned"}, viaLink("lndir/secret.txt")},
		{"ls dotdot", "ls", map[string]any{"path": ".."}, lexical("..")},
		{"ls absolute", "ls", map[string]any{"path": outside}, lexical(outside)},
		{"ls root", "ls", map[string]any{"path": "/"}, lexical("/")},
		{"ls link to dir", "ls", map[string]any{"path": "lndir"}, viaLink("lndir")},
		{"glob dotdot", "glob", map[string]any{"pattern": "*", "path": ".."}, lexical("..")},
		{"glob absolute", "glob", map[string]any{"pattern": "*", "path": outside}, lexical(outside)},
		{"glob link to dir", "glob", map[string]any{"pattern": "*", "path": "lndir"}, viaLink("lndir")},
		{"grep dotdot", "grep", map[string]any{"pattern": "secret", "path": "../"}, lexical("../")},
		{"grep absolute", "grep", map[string]any{"pattern": "secret", "path": secret}, lexical(secret)},
		{"grep link to file", "grep", map[string]any{"pattern": "secret", "path": "lnfile"}, viaLink("lnfile")},
		{"grep link to dir", "grep", map[string]any{"pattern": "secret", "path": "lndir"}, viaLink("lndir")},
	}
	for _, tt := range escapes {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, s, tt.tool, tt.args)
			if !res.IsError || res.Output != tt.want {
				t.Errorf("got %+v\nwant error %q", res, tt.want)
			}
		})
	}

	// Walks from inside do not follow the links out.
	runCases(t, s, []toolCase{
		{name: "grep everything", tool: "grep", args: map[string]string{"pattern": "secret|inside"}, want: "in.txt"},
		{name: "glob everything", tool: "glob", args: map[string]string{"pattern": "**"}, want: "in.txt\nlndir\nlnfile\nlnrel\nlnself"},
		{name: "ls", tool: "ls", args: `{}`, want: "in.txt\nlndir\nlnfile\nlnrel\nlnself"},
		{name: "link inside", tool: "read_file", args: map[string]string{"file_path": "lnself"}, want: "     1\tinside"},
	})

	// Nothing outside changed.
	if got := readString(t, secret); got != "secret\n" {
		t.Errorf("secret.txt = %q, want it unchanged", got)
	}
	for _, p := range []string{
		filepath.Join(outside, "new.txt"), filepath.Join(filepath.Dir(dir), "new.txt"), filepath.Join(outside, "sub", "deeper"),
	} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists (err %v); nothing should have been created outside", p, err)
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "secret.txt sub" {
		t.Errorf("outside holds %q, want only secret.txt sub", got)
	}
}

func TestResolve(t *testing.T) {
	s, dir := newSet(t, Options{}, nil)
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", ".", true},
		{".", ".", true},
		{"a/b", "a/b", true},
		{"a//b/./c/", "a/b/c", true},
		{"a/../b", "b", true},
		{dir, ".", true},
		{dir + "/", ".", true},
		{dir + "/x/../y", "y", true},
		{"~/x", "~/x", true}, // a file named ~, as the shell is not involved
		{"..", "", false},
		{"../" + filepath.Base(dir) + "/x", "", false},
		{"/", "", false},
		{filepath.Dir(dir), "", false},
		{dir + "/..", "", false},
		{dir + "x", "", false},
		{"a\x00b", "", false},
	}
	for _, tt := range tests {
		got, err := s.resolve(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("resolve(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
