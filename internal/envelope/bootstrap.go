package envelope

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// bootstrapMarker begins the line a Bootstrap command ends its output
// with: the marker, the command's tag, its exit code.
const bootstrapMarker = "amelia-exit:"

// Bootstrap is a shell command line, for a transport that may lose both
// stderr and the exit status, that runs script with sh (args as its
// positional parameters, $0 "amelia-bootstrap"), its stderr merged into
// its stdout, then writes a line with its exit code, marked with tag, to
// stdout. It is how a sandbox is prepared before the worker is in it;
// BootstrapResult reads what it wrote.
func Bootstrap(tag, script string, args ...string) string {
	words := []string{"sh", "-c", shexec.Quote(script), "amelia-bootstrap"}
	for _, a := range args {
		words = append(words, shexec.Quote(a))
	}
	return strings.Join(words, " ") + " 2>&1; printf '\\n" + bootstrapMarker + "%s:%s\\n' " + shexec.Quote(tag) + ` "$?"`
}

// BootstrapResult splits what a Bootstrap command tagged tag wrote into
// the script's output and its exit code. ok is false when the exit line is
// missing: the stream was cut, and the script may or may not have run.
func BootstrapResult(tag string, out []byte) (output []byte, code int, ok bool) {
	mark := []byte("\n" + bootstrapMarker + tag + ":")
	i := bytes.LastIndex(out, mark)
	if i < 0 {
		return out, 0, false
	}
	rest, found := bytes.CutSuffix(out[i+len(mark):], []byte("\n"))
	if !found {
		return out, 0, false
	}
	code, err := strconv.Atoi(string(rest))
	if err != nil {
		return out, 0, false
	}
	return out[:i], code, true
}
