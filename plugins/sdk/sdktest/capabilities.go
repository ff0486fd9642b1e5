package sdktest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Capabilities group: what Info declares works. A capability not
// declared is skipped here; FailClosed checks that it is refused.

// With TTY declared, an exec with TTY runs on a terminal of the size asked
// for.
func (k *kit) ttyWorks(t T) {
	if !k.info.TTY {
		t.Skipf("the provider does not declare TTY: FailClosed/TTYRefusedWhenNotDeclared checks that it refuses one")
	}
	req := k.in(k.sb, sh("if test -t 0 && test -t 1; then echo terminal; fi; stty size"))
	req.TTY, req.Size = true, sdk.TermSize{Rows: 33, Cols: 101}
	r := k.run(k.ctx(t), t, req, nil)
	out := string(r.stdout)
	if !strings.Contains(out, "terminal") {
		t.Errorf("Exec with TTY: stdin and stdout are not a terminal (output %q, exit %+v)", out, r.st)
	}
	if !strings.Contains(out, "33 101") {
		t.Errorf("Exec with TTY of 33 rows and 101 columns: stty size says %q", out)
	}
}

// With ExecAsRoot declared, an exec as root runs as uid 0.
func (k *kit) rootWorks(t T) {
	if !k.info.ExecAsRoot {
		t.Skipf("the provider does not declare ExecAsRoot: FailClosed/RootRefusedWhenNotDeclared checks that it refuses root")
	}
	r := k.run(k.ctx(t), t, k.in(k.sb, sdk.ExecRequest{Argv: []string{"id", "-u"}, User: "root"}), nil)
	if got := strings.TrimSpace(string(r.stdout)); got != "0" || r.st.Code != 0 {
		t.Errorf(`Exec as User "root": id -u = %q (exit %+v, stderr %q), want 0`, got, r.st, r.stderr)
	}
}

// With a process limit in the settings (Config.PidsLimit), a sandbox cannot
// hold more processes than that. The case starts background processes
// until the sandbox refuses one, in a sandbox of its own (killed processes
// may stay as zombies where nothing reaps them), and kills them.
func (k *kit) pidsLimit(t T) {
	limit := k.cfg.PidsLimit
	if limit <= 0 {
		t.Skipf("Config.PidsLimit is not set: the settings name no process limit to check")
	}
	if !k.info.ResourceLimits {
		t.Errorf("Config.PidsLimit is %d, but Info does not declare ResourceLimits", limit)
	}
	sb := k.ensure(t, "pids")
	want := limit + 16
	// Only builtins run once the forks start failing; a shell that cannot
	// fork ends the subshell (dash) or goes on without a new $! (bash).
	script := fmt.Sprintf(`: > amelia-sdktest-pids
( last=; i=0
  while [ $i -lt %d ]; do
    sleep 600 </dev/null >/dev/null 2>&1 &
    if [ "$!" != "$last" ]; then last=$!; echo $! >> amelia-sdktest-pids; fi
    i=$((i+1))
  done ) 2>/dev/null
n=0; while read -r p; do n=$((n+1)); kill -9 $p 2>/dev/null; done < amelia-sdktest-pids
echo $n`, want)
	r := k.run(k.ctx(t), t, k.in(sb, sh(script)), nil)
	n, err := strconv.Atoi(strings.TrimSpace(string(r.stdout)))
	if err != nil {
		t.Fatalf("count the processes started: stdout %q, stderr %q, exit %+v", r.stdout, r.stderr, r.st)
	}
	if n >= limit {
		t.Errorf("started %d background processes of %d tried in a sandbox whose settings limit it to %d processes", n, want, limit)
	}
}
