package runview

import (
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Only the last command to finish counts, and only when it did not
// succeed; other tools' failures are not commands.
func TestLastFailedCommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		msgs     []*protocol.AgenticMessage
		want     string // describe(): command; "" for none
		wantCode int    // -1: no exit code
	}{
		{name: "no command", msgs: []*protocol.AgenticMessage{callMsg("1", "read_file", `{"file_path":"a"}`), resultMsg("1", "read_file", "Error: not found", true)}},
		{name: "failed", wantCode: 127, want: "exit 127, command not found: python3 -m pytest", msgs: []*protocol.AgenticMessage{
			callMsg("1", "execute", `{"command":"python3 -m pytest"}`), resultMsg("1", "execute", "sh: python3: not found\n[Command failed with exit code 127]", true)}},
		{name: "failed, then fixed", msgs: []*protocol.AgenticMessage{
			callMsg("1", "execute", `{"command":"make"}`), resultMsg("1", "execute", "[Command failed with exit code 2]", true),
			callMsg("2", "execute", `{"command":"make"}`), resultMsg("2", "execute", "ok\n[Command succeeded with exit code 0]", false)}},
		{name: "a file tool fails after", wantCode: 1, want: "exit 1: go test ./...", msgs: []*protocol.AgenticMessage{
			callMsg("1", "execute", `{"command":"go test ./..."}`), resultMsg("1", "execute", "FAIL\n[Command failed with exit code 1]", true),
			callMsg("2", "read_file", `{"file_path":"x"}`), resultMsg("2", "read_file", "Error", true)}},
		{name: "killed", wantCode: -1, want: "timed out after 60s and was killed: sleep 100", msgs: []*protocol.AgenticMessage{
			callMsg("1", "execute", `{"command":"sleep 100"}`), resultMsg("1", "execute", "[Command timed out after 60s and was killed]", true)}},
		{name: "results out of order", wantCode: 3, want: "exit 3: b", msgs: []*protocol.AgenticMessage{
			callMsg("1", "execute", `{"command":"a"}`), callMsg("2", "execute", `{"command":"b"}`),
			resultMsg("1", "execute", "[Command succeeded with exit code 0]", false), resultMsg("2", "execute", "[Command failed with exit code 3]", true)}},
		{name: "no status line", wantCode: -1, want: "failed: bash -c x", msgs: []*protocol.AgenticMessage{
			callMsg("1", "bash", `{"command":"bash -c x"}`), resultMsg("1", "bash", "boom", true)}},
		{name: "no status line, no error", msgs: []*protocol.AgenticMessage{
			callMsg("1", "bash", `{"command":"true"}`), resultMsg("1", "bash", "", false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c commands
			for _, m := range tc.msgs {
				c.see(m)
			}
			got, code := "", -1
			if f := c.last; f != nil {
				got = f.describe() + ": " + f.command
				if f.code != nil {
					code = *f.code
				}
			}
			if got != tc.want || (tc.want != "" && code != tc.wantCode) {
				t.Errorf("last failed command %q (code %d), want %q (code %d)", got, code, tc.want, tc.wantCode)
			}
		})
	}
}
