package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The worker goes into sandboxes whatever their libc, so it must be a
// static executable for each architecture: no ELF interpreter, no shared
// libraries. This builds it as `make worker` does.
func TestWorkerIsStatic(t *testing.T) {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, machine := range machines {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), "amelia-worker-linux-"+arch)
			build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
			build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != machine {
				t.Errorf("machine = %v, want %v", f.Machine, machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("has a %v program header: dynamically linked", p.Type)
				}
			}
			if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
				t.Errorf("needs shared libraries %v", libs)
			}
		})
	}
}
