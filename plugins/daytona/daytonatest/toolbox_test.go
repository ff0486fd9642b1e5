package daytonatest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// TestToolboxExecute checks the toolbox's process/execute: exit code,
// combined output, cwd and envs, and the timeout, which kills what the
// command started.
func TestToolboxExecute(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		ctx := context.Background()
		sb, _ := e.started(t, api.CreateSandbox{})

		res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "echo out; echo err >&2; exit 5"})
		if err != nil || res.ExitCode != 5 || res.Result != "out\nerr\n" {
			t.Errorf("execute: %+v, %v", res, err)
		}
		res, err = e.c.Execute(ctx, sb, api.ExecuteRequest{Command: `echo "$(pwd) $A $HOME"`, Cwd: "/tmp", Envs: map[string]string{"A": "a b"}})
		if want := "/tmp a b " + f.Home(sb.ID) + "\n"; err != nil || res.Result != want {
			t.Errorf("cwd and envs: %+v, %v; want %q", res, err, want)
		}

		mark := "1000." + strconv.Itoa(int(time.Now().UnixNano()%1000000))
		begun := time.Now()
		_, err = e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "sleep " + mark + " & sleep " + mark, Timeout: 1})
		if api.StatusOf(err) != http.StatusRequestTimeout {
			t.Errorf("execute past its timeout: %v", err)
		}
		if d := time.Since(begun); d > 20*time.Second {
			t.Errorf("the timeout took %v", d)
		}
		res, err = e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "ps -eo args | grep -c '[s]leep " + mark + "'; true"})
		if err != nil || strings.TrimSpace(res.Result) != "0" {
			t.Errorf("after the timeout, the command's processes: %+v, %v", res, err)
		}

		f.StopSandbox(sb.ID)
		if _, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "true"}); api.StatusOf(err) != http.StatusNotFound {
			t.Errorf("execute in a stopped sandbox: %v", err)
		}
		if st := f.Stats(); st.ToolboxExecs != 4 {
			t.Errorf("stats: %+v", st)
		}
	})
}

// TestToolboxFiles checks the toolbox's bulk file transfers as the SDKs
// use them: files (one empty, one in directories not there yet) go in as
// the sandbox user and come back the same; a missing path or a
// directory is an error part.
func TestToolboxFiles(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		ctx := t.Context()
		sb, _ := e.started(t, api.CreateSandbox{})
		tb := f.Toolbox(sb.ID)
		tb.Client = e.http
		dir := t.TempDir()
		bodies := map[string]string{"a.txt": "alpha\n", "empty": "", "big.bin": strings.Repeat("0123456789abcdef", 1<<17)}
		var up, down []Transfer
		for name, body := range bodies {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			remote := "in/new/" + name
			up = append(up, Transfer{Local: filepath.Join(dir, name), Remote: remote})
			down = append(down, Transfer{Local: filepath.Join(dir, "back", name), Remote: remote})
		}
		if err := tb.Upload(ctx, up); err != nil {
			t.Fatalf("upload: %v", err)
		}
		res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: `stat -c '%a %s' in/new/a.txt; stat -c %a in/new; [ "$(stat -c %U in/new/a.txt)" = "$(id -un)" ] && echo MINE`})
		if want := "644 6\n755\nMINE\n"; err != nil || res.Result != want {
			t.Errorf("after the upload: %+v, %v; want %q", res, err, want)
		}
		if err := tb.Download(ctx, down); err != nil {
			t.Fatalf("download: %v", err)
		}
		for name, body := range bodies {
			if b, err := os.ReadFile(filepath.Join(dir, "back", name)); err != nil || string(b) != body {
				t.Errorf("%s came back as %d bytes, %v; want %d", name, len(b), err, len(body))
			}
		}
		for _, p := range []string{"in/missing", "in/new"} {
			if err := tb.Download(ctx, []Transfer{{Local: filepath.Join(dir, "x"), Remote: p}}); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("download %s: %v; want an error naming it", p, err)
			}
		}
	})
}
