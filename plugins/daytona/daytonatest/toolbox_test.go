package daytonatest

import (
	"context"
	"net/http"
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
