package envelope

import (
	"fmt"
	"strings"
)

// The scripts that put the worker into a sandbox, run with sh wherever
// commands run: through Exec, or through Bootstrap before Exec can (the
// exec envelope needs the worker).

// InstallScript reads exactly $4 bytes (the worker's size) from stdin into
// a temporary file beside $2 in the directory $1, checks that its sha256
// is $3, makes it executable and renames it to $2. Reading a known size
// does not depend on the transport passing on the end of the input; the
// rename is atomic, so concurrent installs of the same binary both succeed
// and a worker being started never sees half a file.
const InstallScript = `set -eu
umask 022
mkdir -p -- "$1"
tmp=$(mktemp "$2.tmp.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
head -c "$4" > "$tmp"
s=$(sha256sum < "$tmp")
s=${s%% *}
if [ "$s" != "$3" ]; then
	echo "the uploaded file's sha256 is $s, want $3: the upload was damaged" >&2
	exit 3
fi
chmod 0755 -- "$tmp"
mv -f -- "$tmp" "$2"
trap - EXIT`

// WorkerName is the file name of an installed worker: its sha256's first
// 16 hex digits name the build, so that sandboxes shared by amelias of
// different versions keep each one's.
func WorkerName(sum string) string { return "amelia-worker-" + sum[:16] }

// GoArch maps a sandbox's `uname -m` to the Go architecture of the worker
// it needs.
func GoArch(machine string) (string, error) {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("the sandbox's architecture %q is not supported: amelia-worker is built for x86_64 and aarch64", strings.TrimSpace(machine))
}
