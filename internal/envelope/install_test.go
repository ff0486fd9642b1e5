package envelope_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

func TestGoArch(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", " x86_64\n": "amd64",
	} {
		if got, err := envelope.GoArch(machine); err != nil || got != want {
			t.Errorf("GoArch(%q) = %q, %v; want %q", machine, got, err, want)
		}
	}
	for _, machine := range []string{"riscv64", "armv7l", "i686", "", "x86_64\x1b[2J"} {
		_, err := envelope.GoArch(machine)
		if err == nil || !strings.Contains(err.Error(), "x86_64 and aarch64") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("GoArch(%q) = %v", machine, err)
		}
	}
}

// The install script takes exactly the size it is told, whatever follows
// on its input, and refuses a file whose sha256 is not the one expected.
func TestInstallScript(t *testing.T) {
	bin := bytes.Repeat([]byte("worker!"), 100000)
	h := sha256.Sum256(bin)
	sum := hex.EncodeToString(h[:])
	dir := filepath.Join(t.TempDir(), "bin")
	dest := filepath.Join(dir, envelope.WorkerName(sum))
	install := func(input []byte, want string) (string, error) {
		cmd := exec.Command("sh", "-c", envelope.InstallScript, "sh", dir, dest, want, strconv.Itoa(len(bin)))
		cmd.Stdin = bytes.NewReader(input)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := install(append(bin, "trailing bytes the script must not read"...), sum); err != nil {
		t.Fatalf("install: %v: %s", err, out)
	}
	if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, bin) {
		t.Errorf("installed file: %d bytes, %v; want the %d bytes", len(got), err, len(bin))
	}
	if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed file mode: %v %v", fi, err)
	}
	damaged := bytes.Clone(bin)
	damaged[5] ^= 1
	if out, err := install(damaged, strings.Repeat("0", 64)); err == nil || !strings.Contains(out, "the upload was damaged") {
		t.Errorf("a damaged upload: %v %s; want a refusal", err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the install directory holds %d files, want only the worker (no temporary file left)", len(entries))
	}
}
