package driver_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// A run whose supervisor died without an exit status (its sandbox
// restarted): following it shows the whole lines it wrote until then,
// from Seen on, then says ErrRunLost.
func TestFollowALostRun(t *testing.T) {
	sb := newRealSandbox(t)
	d := sb.driverFor(llmtest.New(t))
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The supervisor's pid: a process that has ended (and been reaped).
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	line := func(typ, field, v string) string {
		return fmt.Sprintf(`{"type":%q,%q:%q,"session_id":"s","is_error":false,"model":"m","usage":null}`+"\n", typ, field, v)
	}
	log := line("thinking", "content", "first") +
		"\n" + // blank lines count as lines
		line("tool_call", "tool_name", "execute") +
		`{"type":"usage","usage":{"input_tokens":1,"output_tokens":2}}` + "\n" +
		line("tool_result", "tool_output", "half") +
		`{"type":"thinking","content":"cut off in the mid` // the line the run died in
	for name, data := range map[string]string{"pid": fmt.Sprintln(gone.Process.Pid), "messages.jsonl": log} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	read := func(r *driver.Detached) string {
		var got []string
		var last error
		for m, err := range d.FollowAgentic(t.Context(), r) {
			if err != nil {
				last = err
				break
			}
			got = append(got, string(m.Type))
		}
		if !errors.Is(last, driver.ErrRunLost) {
			t.Errorf("following the lost run ended with %v, want ErrRunLost", last)
		}
		return strings.Join(got, " ")
	}
	all := &driver.Detached{Dir: dir}
	if got := read(all); got != "thinking tool_call tool_result" || all.Seen != 5 {
		t.Errorf("the lost run's log: %q, %d lines seen; want its 3 whole messages, 5 lines", got, all.Seen)
	}
	if d.Usage() == nil {
		t.Error("no usage from the usage line of the log")
	}
	after := &driver.Detached{Dir: dir, Seen: 2}
	if got := read(after); got != "tool_call tool_result" || after.Seen != 5 {
		t.Errorf("the log after 2 lines seen: %q, %d lines seen; want the last 2 messages, 5 lines", got, after.Seen)
	}
}
